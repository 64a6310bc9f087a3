//! Putting a plan into a node namespace and reading it back: the IPVS sysctls kube-proxy
//! sets, the dummy interface and its addresses (`ip`), the ipsets (`ipset restore`), the
//! iptables rules (`iptables-restore`, `ip6tables-restore`) and the virtual servers
//! (`ipvsadm -R`, fed only the differences).

use std::collections::BTreeSet;
use std::net::IpAddr;

use anyhow::{Context, Result};

use super::plan::{DUMMY, FamilyPlan};
use super::virtual_servers::{self, Table};
use crate::model::IpFamily;
use crate::proxy::loader;
use crate::topology::NodeHandle;

/// Sysctls `NewProxier` sets (pkg/proxy/ipvs/proxier.go): conntrack for IPVS connections, so
/// that iptables' MASQUERADE sees them; connections to a deleted real server expire at their
/// next packet; persistence templates of a quiescent server too. `conn_reuse_mode` is left as
/// it is on kernels from 5.9 on (every kernel this runs on). Per namespace, once `ip_vs` is in.
const SYSCTLS: &[(&str, &str)] = &[
    ("net/ipv4/vs/conntrack", "1"),
    ("net/ipv4/vs/expire_nodest_conn", "1"),
    ("net/ipv4/vs/expire_quiescent_template", "1"),
];

/// Why this kernel cannot run IPVS mode, if it cannot: `/proc/net/ip_vs` appears with the
/// `ip_vs` module (loaded on demand where kmod can, as the VMs do).
pub fn unavailable() -> Option<String> {
    let present = || std::path::Path::new("/proc/net/ip_vs").exists();
    if !present() {
        // Where modules cannot load (this project's host), modprobe fails and nothing changes.
        let _ = std::process::Command::new("modprobe").arg("-q").arg("ip_vs").status();
    }
    if present() {
        return None;
    }
    Some(
        "IPVS: this kernel has no ip_vs (no /proc/net/ip_vs, and modprobe ip_vs failed): run it in a VM"
            .into(),
    )
}

fn sysctls(node: &NodeHandle) -> Result<()> {
    for (key, value) in SYSCTLS {
        let path = format!("/proc/sys/{key}");
        node.netns
            .run(|| std::fs::write(&path, value))?
            .with_context(|| format!("setting {key}={value} on node {}", node.name))?;
    }
    Ok(())
}

/// Creates `kube-ipvs0` if missing, left down as kube-proxy leaves it (`EnsureDummyDevice`):
/// the kernel adds local routes for its addresses all the same.
fn ensure_dummy(node: &NodeHandle) -> Result<()> {
    if node.netns.exec("ip", &["link", "show", DUMMY], None).is_err() {
        node.netns
            .exec("ip", &["link", "add", DUMMY, "type", "dummy"], None)
            .with_context(|| format!("creating {DUMMY} on node {}", node.name))?;
    }
    Ok(())
}

/// The addresses bound to `kube-ipvs0` now.
fn bound_addresses(node: &NodeHandle) -> Result<BTreeSet<IpAddr>> {
    let out = node.netns.exec("ip", &["-o", "addr", "show", "dev", DUMMY], None)?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "inet" || *w == "inet6")?;
            words.get(at + 1)?.split('/').next()?.parse().ok()
        })
        .collect())
}

fn address_arg(ip: IpAddr) -> String {
    format!("{ip}/{}", IpFamily::of(ip).host_prefix())
}

/// The node's virtual servers as `ipvsadm -Ln` lists them.
pub(crate) fn virtual_servers(node: &NodeHandle) -> Result<Table> {
    let out = node
        .netns
        .exec("ipvsadm", &["-Ln"], None)
        .with_context(|| format!("listing the IPVS table of node {}", node.name))?;
    virtual_servers::parse_list(&String::from_utf8_lossy(&out.stdout))
}

/// Loads every family's plan, in kube-proxy's order: dummy interface and new addresses,
/// virtual servers, ipsets, iptables rules, then stale addresses unbound. `flush` deletes
/// every virtual server first (a mutant's bug).
pub fn apply(node: &NodeHandle, plans: &[FamilyPlan], flush: bool) -> Result<()> {
    ensure_dummy(node)?;
    let want: BTreeSet<IpAddr> = plans.iter().flat_map(|p| p.bound.iter().copied()).collect();
    let have = bound_addresses(node)?;
    for ip in want.difference(&have) {
        node.netns
            .exec("ip", &["addr", "add", &address_arg(*ip), "dev", DUMMY], None)
            .with_context(|| format!("binding {ip} to {DUMMY} on node {}", node.name))?;
    }

    if flush {
        node.netns.exec("ipvsadm", &["-C"], None)?;
    }
    let current = virtual_servers(node)?;
    sysctls(node)?;
    let desired: Table = plans.iter().flat_map(|p| p.servers.clone()).collect();
    let commands = virtual_servers::sync_commands(&current, &desired);
    if !commands.is_empty() {
        let text = commands.join("\n") + "\n";
        loader::run(node, "ipvsadm", &["-R"], &text, "IPVS", |_, _| Vec::new())?;
    }

    let sets: String = plans.iter().map(|p| p.sets.render()).collect();
    loader::run(node, "ipset", &["restore", "-exist"], &sets, "ipset", ipset_offending)?;

    for plan in plans {
        let restore = match plan.family {
            IpFamily::V4 => "iptables-restore",
            IpFamily::V6 => "ip6tables-restore",
        };
        loader::run(node, restore, &["-w"], &plan.rules.render(), "iptables", iptables_offending)?;
    }

    for ip in have.difference(&want) {
        node.netns
            .exec("ip", &["addr", "del", &address_arg(*ip), "dev", DUMMY], None)
            .with_context(|| format!("unbinding {ip} from {DUMMY} on node {}", node.name))?;
    }
    Ok(())
}

/// `ipset v7.17: Error in line 3: …`.
fn ipset_offending<'t>(message: &str, text: &'t str) -> Vec<(usize, &'t str)> {
    numbered_line(message, "Error in line ", text)
}

/// `line 31: RULE_APPEND failed`, `Error occurred at line: 31`.
fn iptables_offending<'t>(message: &str, text: &'t str) -> Vec<(usize, &'t str)> {
    let mut found = numbered_line(message, "line ", text);
    found.extend(numbered_line(message, "at line: ", text));
    found
}

fn numbered_line<'t>(message: &str, marker: &str, text: &'t str) -> Vec<(usize, &'t str)> {
    message
        .match_indices(marker)
        .filter_map(|(at, m)| {
            let digits: String = message[at + m.len()..].chars().take_while(char::is_ascii_digit).collect();
            let n: usize = digits.parse().ok()?;
            Some((n, text.lines().nth(n.checked_sub(1)?)?))
        })
        .take(1)
        .collect()
}

/// Everything the proxy programmed on the node, for failure reports.
pub fn dump(node: &NodeHandle, families: &[IpFamily]) -> Result<String> {
    let mut out = String::new();
    let mut section = |title: &str, program: &str, args: &[&str]| -> Result<()> {
        let got = node
            .netns
            .exec(program, args, None)
            .with_context(|| format!("dumping {title} of node {}", node.name))?;
        out.push_str(&format!("# {title}\n{}\n", String::from_utf8_lossy(&got.stdout)));
        Ok(())
    };
    section("ipvsadm -Ln", "ipvsadm", &["-Ln"])?;
    section(&format!("ip addr show {DUMMY}"), "ip", &["addr", "show", DUMMY])?;
    section("ipset list", "ipset", &["list"])?;
    for family in families {
        match family {
            IpFamily::V4 => section("iptables-save", "iptables-save", &[])?,
            IpFamily::V6 => section("ip6tables-save", "ip6tables-save", &[])?,
        }
    }
    Ok(out)
}
