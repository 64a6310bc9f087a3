//! A writer of the "newc" cpio format, the one the kernel unpacks as an initramfs.
//! Several archives written one after another form one initramfs (the kernel unpacks each), so
//! a kernel's modules and the shared tools are written once and concatenated per VM.

use std::io::{self, Write};

/// One entry: a directory, a regular file (its contents) or a symbolic link (its target).
pub enum Entry<'a> {
    Dir,
    File { data: &'a [u8], executable: bool },
    Symlink(&'a str),
}

pub struct Writer<W: Write> {
    out: W,
    next_inode: u32,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W) -> Writer<W> {
        // Inode numbers only need to be distinct within an archive; start high so that two
        // concatenated archives never hand the kernel the same (inode, device) for two files,
        // which it would treat as a hard link.
        Writer { out, next_inode: 1 }
    }

    /// Starts numbering inodes at `first`: give each archive of one initramfs its own range.
    pub fn with_first_inode(out: W, first: u32) -> Writer<W> {
        Writer { out, next_inode: first }
    }

    /// Adds `path` (relative, no leading `/`).
    pub fn add(&mut self, path: &str, entry: Entry<'_>) -> io::Result<()> {
        let (mode, data): (u32, &[u8]) = match entry {
            Entry::Dir => (0o040755, b""),
            Entry::File { data, executable: true } => (0o100755, data),
            Entry::File { data, executable: false } => (0o100644, data),
            Entry::Symlink(target) => (0o120777, target.as_bytes()),
        };
        let inode = self.next_inode;
        self.next_inode += 1;
        self.header(path.trim_start_matches('/'), inode, mode, data.len())?;
        self.out.write_all(data)?;
        self.pad(data.len())
    }

    /// Writes the trailer and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.header("TRAILER!!!", 0, 0, 0)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn header(&mut self, name: &str, inode: u32, mode: u32, size: usize) -> io::Result<()> {
        let nlink = if mode & 0o040000 != 0 { 2 } else { 1 };
        // magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor,
        // rdevminor, namesize (with its NUL), check.
        let fields = [inode, mode, 0, 0, nlink, 0, size as u32, 0, 0, 0, 0, name.len() as u32 + 1, 0];
        let mut header = String::from("070701");
        for field in fields {
            header.push_str(&format!("{field:08x}"));
        }
        self.out.write_all(header.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.pad(header.len() + name.len() + 1)
    }

    /// Pads to a multiple of four bytes, as newc requires after headers+names and after data.
    fn pad(&mut self, len: usize) -> io::Result<()> {
        let padding = (4 - len % 4) % 4;
        self.out.write_all(&[0u8; 3][..padding])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_newc_headers_padded_to_four_bytes() {
        let mut w = Writer::new(Vec::new());
        w.add("/bin", Entry::Dir).unwrap();
        w.add("bin/sh", Entry::Symlink("busybox")).unwrap();
        w.add("init", Entry::File { data: b"#!/bin/sh\n", executable: true }).unwrap();
        let out = w.finish().unwrap();
        assert_eq!(out.len() % 4, 0);
        let text = String::from_utf8_lossy(&out);
        // The first header: inode 1, a directory, two links, name "bin" (4 bytes with NUL).
        assert!(text.starts_with("07070100000001000041ed0000000000000000000000020000000000000000"));
        assert!(text.contains("bin/sh\0"));
        assert!(text.contains("busybox"));
        assert!(text.contains("000081ed"), "the executable's mode");
        assert!(text.contains("TRAILER!!!\0"));
        // Every header begins on a four-byte boundary.
        for (i, _) in text.match_indices("070701") {
            assert_eq!(i % 4, 0, "header at {i}");
        }
    }
}
