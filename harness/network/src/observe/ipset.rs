//! A namespace's ipsets over nfnetlink: their names, and destroying every one, without a
//! program run per node per reset (net/netfilter/ipset/ip_set_core.c: `IPSET_CMD_LIST` and
//! `IPSET_CMD_DESTROY` without a set name act on every set).

use anyhow::{Context, Result};

use super::nftables::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NftSocket, attr, attributes, name_of};
use crate::topology::netns::Netns;

const NFNL_SUBSYS_IPSET: u16 = 6;
const fn ipset_msg(command: u16) -> u16 {
    (NFNL_SUBSYS_IPSET << 8) | command
}
// enum ipset_cmd and the attributes of every command (linux/netfilter/ipset/ip_set.h): 3 is
// IPSET_CMD_DESTROY, 4 IPSET_CMD_FLUSH (which empties every set and leaves them all).
const CMD_DESTROY: u16 = ipset_msg(3);
const CMD_LIST: u16 = ipset_msg(7);
const ATTR_PROTOCOL: u16 = 1;
const ATTR_SETNAME: u16 = 2;
/// The protocol version asked for: 6, which every kernel since 2.6.39 speaks (newer ones accept
/// 6 and 7).
const PROTOCOL: u8 = 6;

/// The name of every set in `ns`. A kernel without ipset refuses the request: it has no set.
pub fn names(ns: &Netns) -> Result<Vec<String>> {
    let mut socket = NftSocket::open(ns)?;
    list(&mut socket).or_else(|e| match e.downcast_ref::<std::io::Error>().and_then(|e| e.raw_os_error()) {
        Some(libc::EOPNOTSUPP | libc::EPROTONOSUPPORT) => Ok(Vec::new()),
        _ => Err(e),
    })
}

fn list(socket: &mut NftSocket) -> Result<Vec<String>> {
    let sequence = socket.send_one(
        CMD_LIST,
        NLM_F_REQUEST | NLM_F_DUMP,
        libc::AF_INET as u8,
        &attr(ATTR_PROTOCOL, &[PROTOCOL]),
    )?;
    let mut names = Vec::new();
    socket.receive(sequence, |kind, _, _, payload| {
        if kind == CMD_LIST
            && let Some((_, name)) = attributes(payload).find(|(k, _)| *k == ATTR_SETNAME)
        {
            let name = name_of(name);
            if names.last() != Some(&name) {
                names.push(name);
            }
        }
        Ok(false)
    })?;
    names.dedup();
    Ok(names)
}

/// Destroys every set of `ns` (none may be referenced: the proxy's rules are gone first).
pub fn destroy_all(ns: &Netns) -> Result<()> {
    let mut socket = NftSocket::open(ns)?;
    let body = attr(ATTR_PROTOCOL, &[PROTOCOL]);
    socket.send_one(CMD_DESTROY, NLM_F_REQUEST | NLM_F_ACK, libc::AF_INET as u8, &body)?;
    // A listing after it: its end comes after the destruction's acknowledgement or error.
    let left = list(&mut socket).context("destroying the ipsets")?;
    anyhow::ensure!(left.is_empty(), "ipsets left after destroying them all: {}", left.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::netns::process_prefix;

    /// A set an iptables rule refers to cannot be destroyed, and saying so is an error; once
    /// the rule is gone every set goes.
    #[test]
    fn a_referenced_set_is_refused_and_unreferenced_ones_are_destroyed() {
        if !crate::privileges::scenarios_can_run() {
            return;
        }
        /// Removed however the test ends.
        struct Scratch(Netns);
        impl Drop for Scratch {
            fn drop(&mut self) {
                let _ = self.0.remove();
            }
        }
        let scratch = Scratch(Netns::create(&format!("{}ipset", process_prefix())).unwrap());
        let ns = &scratch.0;
        let exec = |program: &str, args: &[&str]| {
            let out = ns.exec(program, args, None).unwrap();
            assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        exec("ipset", &["create", "referenced", "hash:ip"]);
        exec("ipset", &["create", "alone", "hash:ip"]);
        exec("iptables", &["-A", "INPUT", "-m", "set", "--match-set", "referenced", "src", "-j", "ACCEPT"]);
        let refused = format!("{:#}", destroy_all(ns).unwrap_err());
        assert_eq!(names(ns).unwrap(), ["referenced", "alone"], "{refused}");
        exec("iptables", &["-F", "INPUT"]);
        destroy_all(ns).unwrap();
        assert!(names(ns).unwrap().is_empty());
    }
}
