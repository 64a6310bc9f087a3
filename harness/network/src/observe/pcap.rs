//! Captures written as classic pcap files (Ethernet, nanosecond timestamps), for a human to
//! open in Wireshark or tcpdump when a verdict fails.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::UNIX_EPOCH;

use anyhow::{Context, Result};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};

use super::capture::Frame;

/// Writes `frames` to `path` with their real timestamps (LINKTYPE_ETHERNET).
pub fn write_pcap(path: &Path, frames: &[Frame]) -> Result<()> {
    let what = || format!("writing pcap {}", path.display());
    let file = File::create(path).with_context(what)?;
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::NanoSecond,
        // Frames are kept up to 256 KiB; a reader must not treat longer ones as corrupt.
        snaplen: 256 << 10,
        endianness: if cfg!(target_endian = "little") { Endianness::Little } else { Endianness::Big },
        ..PcapHeader::default()
    };
    let mut writer = PcapWriter::with_header(BufWriter::new(file), header).with_context(what)?;
    for frame in frames {
        let timestamp = frame.timestamp.duration_since(UNIX_EPOCH).unwrap_or_default();
        let len = u32::try_from(frame.data.len()).with_context(what)?;
        writer.write_packet(&PcapPacket::new(timestamp, len, &frame.data)).with_context(what)?;
    }
    writer.into_writer().flush().with_context(what)
}
