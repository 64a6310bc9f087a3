//! Every verdict is a statement about what the kernel did, not about the clock: the suite's
//! drop, forward and reject cases give the same verdict, probe by probe, whether an attempt
//! waits 300 ms, 1 s or 4 s (and one expected to be silent, three tenths of that: 90 ms to
//! 1.2 s). A packet forwarded to an address nobody holds is silent for about
//! 3 s and then answered by the node's ICMP host unreachable; it must be judged "forwarded" at
//! every timeout, and a drop must be proven by the capture and conntrack, not by silence.

use std::path::Path;
use std::time::Duration;

use packetproof::admission;
use packetproof::model::Scenario;
use packetproof::proxy::Mutant;
use packetproof::proxy::Proxy;
use packetproof::proxy::iptables::BuiltinIptables;
use packetproof::proxy::nftables::BuiltinNftables;
use packetproof::results::Outcome;
use packetproof::runner::{self, RunOptions};

/// The scenarios whose probes are dropped, forwarded un-translated, rejected by a rule or
/// refused by a host's closed port, in both families.
const SCENARIOS: [&str; 5] = [
    "raw-addresses",
    "no-endpoints-reject",
    "etp-local-nodeport",
    "external-ips-local",
    "ipv6-hairpin-and-reject",
];

const TIMEOUTS_MS: [u64; 3] = [300, 1000, 4000];

fn load(name: &str) -> Scenario {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(format!("{name}.yaml"));
    admission::load(&file).unwrap_or_else(|e| panic!("{e}"))
}

/// A probe's name, whether it passed, and its failures.
type Verdict = (String, bool, Vec<String>);

/// Each probe's verdict at `timeout_ms`.
fn verdicts(s: &Scenario, proxy: &dyn Proxy, timeout_ms: u64) -> Vec<Verdict> {
    let options = RunOptions { timeout: Duration::from_millis(timeout_ms), ..RunOptions::default() };
    let report = runner::run(s, proxy, &options).unwrap_or_else(|e| panic!("{}: {e:#}", s.name));
    let Outcome::Judged(verdicts) = report.outcome else { panic!("{} did not run", s.name) };
    verdicts
        .into_iter()
        .map(|v| (v.probe.name.clone(), v.passed(), v.failures.into_iter().map(|f| f.message).collect()))
        .collect()
}

/// Runs every scenario at every timeout and requires the same pass or fail per probe;
/// `must_pass` also requires every probe to pass.
fn same_verdicts_at_every_timeout(proxy: &dyn Proxy, scenarios: &[&str], must_pass: bool) {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    for name in scenarios {
        let s = load(name);
        let runs: Vec<(u64, Vec<Verdict>)> =
            TIMEOUTS_MS.iter().map(|&t| (t, verdicts(&s, proxy, t))).collect();
        let (first_ms, first) = &runs[0];
        for (ms, run) in &runs[1..] {
            for ((probe, passed, failures), (_, passed_first, failures_first)) in run.iter().zip(first) {
                assert_eq!(
                    passed,
                    passed_first,
                    "{name} [{}] probe {probe}: {} at {ms} ms but {} at {first_ms} ms\n  {ms} ms: {failures:?}\n  \
                     {first_ms} ms: {failures_first:?}",
                    proxy.name(),
                    if *passed { "passed" } else { "failed" },
                    if *passed_first { "passed" } else { "failed" },
                );
            }
        }
        if must_pass {
            for (ms, run) in &runs {
                let failed: Vec<_> = run.iter().filter(|(_, passed, _)| !passed).collect();
                assert!(failed.is_empty(), "{name} [{}] at {ms} ms: {failed:?}", proxy.name());
            }
        }
    }
}

#[test]
fn iptables_verdicts_do_not_depend_on_the_timeout() {
    same_verdicts_at_every_timeout(&BuiltinIptables { mutant: None }, &SCENARIOS, true);
}

#[test]
fn nftables_verdicts_do_not_depend_on_the_timeout() {
    let proxy = BuiltinNftables { mutant: None, layout: Default::default() };
    same_verdicts_at_every_timeout(&proxy, &SCENARIOS, true);
}

/// A node that forwards what it must drop is caught at every timeout, by the same probes:
/// at 300 ms and 1 s by its conntrack entry and ARP for the destination, at 4 s also by the
/// host unreachable that follows.
#[test]
fn a_proxy_that_forwards_instead_of_dropping_fails_alike_at_every_timeout() {
    let proxy = BuiltinIptables { mutant: Some(Mutant::EtpLocalNoDrop) };
    same_verdicts_at_every_timeout(&proxy, &["external-ips-local"], false);
}
