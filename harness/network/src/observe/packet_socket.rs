//! A raw AF_PACKET socket bound to one interface, with kernel receive timestamps. This file
//! holds all of `observe`'s unsafe code: plain libc calls with checked results.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Asked of the kernel so that bursts (a flood probe, a GSO train) are not dropped while the
/// reader thread is descheduled; root may exceed `rmem_max` with SO_RCVBUFFORCE.
const RECEIVE_BUFFER: libc::c_int = 4 << 20;

/// One frame taken from the queue.
pub struct Received {
    pub len: usize,
    pub timestamp: SystemTime,
    /// Sent by this namespace out of the interface (`PACKET_OUTGOING`), not received on it.
    pub outgoing: bool,
}

pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Opens a socket that receives every frame in and out of `interface`. Call it on a thread
    /// inside the namespace: both the interface name and the socket belong to the calling
    /// thread's namespace.
    pub fn open(interface: &str) -> io::Result<PacketSocket> {
        let name = CString::new(interface).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        // Protocol 0 receives nothing until the bind below names the interface, so frames of
        // other interfaces never slip into the queue in between.
        // SAFETY: plain syscall; the result is checked before it is owned.
        let raw = unsafe {
            libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0)
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let socket = PacketSocket { fd: unsafe { OwnedFd::from_raw_fd(raw) } };
        socket.set_int(libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
        if socket.set_int(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RECEIVE_BUFFER).is_err() {
            socket.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, RECEIVE_BUFFER)?;
        }
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: `addr` is a valid sockaddr_ll of the length passed.
        let rc = unsafe {
            libc::bind(
                socket.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(socket)
    }

    /// Moves one queued frame into `buf` without blocking: its length (cut to `buf`), the
    /// kernel's receive time and whether this host sent it (`PACKET_OUTGOING`) rather than
    /// received it. `None` when the queue is empty.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<Received>> {
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        // u64 elements keep the control buffer aligned for cmsghdr.
        let mut control = [0u64; 8];
        // SAFETY: msghdr is plain data; all-zero is a valid value.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut from: libc::sockaddr_ll = unsafe { zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of::<[u64; 8]>();
        loop {
            // SAFETY: `msg` points at `iov` (into `buf`) and `control`, which outlive the call.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
            if n >= 0 {
                let len = (n as usize).min(buf.len());
                return Ok(Some(Received {
                    len,
                    timestamp: timestamp(&msg).unwrap_or_else(SystemTime::now),
                    outgoing: from.sll_pkttype == libc::PACKET_OUTGOING,
                }));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EAGAIN) => return Ok(None),
                Some(libc::EINTR) => continue,
                // The interface went down (or away): the socket reports it once and then goes
                // on, receiving again if the link comes back up.
                Some(libc::ENETDOWN) => continue,
                _ => return Err(err),
            }
        }
    }

    /// Blocks until a frame is queued (`false`) or `stop` is readable or closed (`true`).
    pub(super) fn wait(&self, stop: BorrowedFd<'_>) -> io::Result<bool> {
        let mut fds = [
            libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: stop.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        loop {
            // SAFETY: `fds` is a valid array of two pollfd.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if rc >= 0 {
                return Ok(fds[1].revents != 0);
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(err);
            }
        }
    }

    /// Sends one whole frame (from the Ethernet header on) out of the bound interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `frame` is valid for `frame.len()` bytes.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Blocks until a frame is queued (`true`) or `timeout` passes (`false`).
    pub fn wait_for(&self, timeout: Duration) -> io::Result<bool> {
        let mut fds = [libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fds` is a valid array of one pollfd.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 1, millis) };
        match rc {
            0 => Ok(false),
            n if n > 0 => Ok(true),
            _ if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => Ok(true),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// Frames the kernel dropped because the queue was full, since the last call.
    pub(super) fn drops(&self) -> io::Result<u32> {
        // SAFETY: tpacket_stats is plain data; all-zero is a valid value.
        let mut stats: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `stats` has room for `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut stats as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stats.tp_drops)
    }

    fn set_int(&self, level: libc::c_int, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: `value` is a c_int of the length passed.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                option,
                (&value as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }
}

/// The SCM_TIMESTAMPNS control message that SO_TIMESTAMPNS attaches to each frame.
fn timestamp(msg: &libc::msghdr) -> Option<SystemTime> {
    // SAFETY: the CMSG_* walk stays within the control buffer the kernel filled in, as
    // described by `msg`.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                return Some(UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}
