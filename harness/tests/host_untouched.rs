//! A run must leave the machine's own network namespace exactly as it found it: the same links,
//! addresses, routes, iptables and nftables rules and conntrack count, and no namespace or veth
//! of ours behind. Reads of the host's state only; nothing here writes to it.

use std::path::Path;
use std::process::Command;

use packetproof::runner::RunOptions;
use packetproof::topology::netns;
use packetproof::{admission, commands};

/// Host state as text, one labelled section per source.
fn snapshot() -> Vec<(&'static str, String)> {
    let run = |program: &str, args: &[&str]| -> String {
        match Command::new(program).args(args).output() {
            Ok(out) => String::from_utf8_lossy(&out.stdout)
                .lines()
                // iptables-save stamps its output with the time; nothing else differs by run.
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n"),
            Err(e) => format!("({program} unavailable: {e})"),
        }
    };
    vec![
        ("links", run("ip", &["-o", "link", "show"])),
        ("addresses", run("ip", &["-o", "address", "show"])),
        ("routes", run("ip", &["route", "show", "table", "all"])),
        ("iptables-save", run("iptables-save", &[])),
        ("ip6tables-save", run("ip6tables-save", &[])),
        ("nft list ruleset", run("nft", &["list", "ruleset"])),
        ("conntrack -C", run("conntrack", &["-C"])),
        ("veths", run("ip", &["-o", "link", "show", "type", "veth"])),
    ]
}

#[test]
fn a_run_leaves_the_host_namespace_untouched() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let before = snapshot();

    let suite =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").canonicalize().expect("scenarios/ exists");
    for name in ["hairpin", "external-nodeport-masquerade", "no-endpoints-reject"] {
        let file = suite.join(format!("{name}.yaml"));
        let s = admission::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let report = commands::run_one(&s, None, &RunOptions::default(), None).expect("scenario runs");
        assert!(report.passed(), "{name} failed; see `cargo test --test scenarios {name}`");
    }

    let after = snapshot();
    for ((what, b), (_, a)) in before.iter().zip(&after) {
        assert_eq!(b, a, "the host's {what} changed during the run");
    }
    let ours: Vec<String> = netns::leftover_namespaces(true)
        .expect("listing namespaces")
        .into_iter()
        .filter(|n| n.starts_with(&netns::process_prefix()))
        .collect();
    assert!(ours.is_empty(), "namespaces left behind: {ours:?}");
}
