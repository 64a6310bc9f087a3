//! Rule coverage with real packets: traces tie each rule a probe's packets matched to that
//! probe, in iptables mode and in nftables mode, and a mutant that drops a rule the suite
//! covers shows in the coverage or in the verdicts.

use std::path::Path;
use std::time::Duration;

use packetproof::admission;
use packetproof::coverage::{self, ScenarioCoverage};
use packetproof::model::Scenario;
use packetproof::proxy::{self, Mutant, Proxy};
use packetproof::results::ScenarioReport;
use packetproof::runner::{self, RunOptions};

fn load(path: &str) -> Scenario {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    admission::load(&file).unwrap_or_else(|e| panic!("{e}"))
}

fn run(s: &Scenario, proxy: &dyn Proxy) -> (ScenarioReport, ScenarioCoverage) {
    let options = RunOptions { timeout: Duration::from_millis(300), coverage: true, ..RunOptions::default() };
    let report = runner::run(s, proxy, &options).unwrap_or_else(|e| panic!("{e:#}"));
    let coverage = *report.coverage.clone().expect("coverage was measured");
    (report, coverage)
}

/// One probe through Service web: web's rules name it, dns's rules name nothing, and the
/// verdicts are those of a run without coverage (it passes).
#[test]
fn a_probe_covers_its_services_rules_and_no_other() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let s = load("tests/data/coverage-two-services.yaml");
    for (name, web, dns) in [
        (proxy::iptables::NAME, "10.96.0.80/32", "10.96.0.53/32"),
        (proxy::nftables::NAME, "shop/web/tcp/http", "shop/dns/tcp/dns"),
    ] {
        let proxy = proxy::build(&packetproof::model::ProxyChoice::named(name), Path::new(".")).unwrap();
        let (report, coverage) = run(&s, proxy.as_ref());
        assert!(report.passed(), "{name}: the scenario fails with coverage on");
        let mentions = |what: &str| -> Vec<_> {
            coverage
                .instances
                .iter()
                .filter(|i| i.rule.text.contains(what) || i.rule.at.chain.contains(what))
                .collect()
        };
        let (web, dns) = (mentions(web), mentions(dns));
        assert!(!web.is_empty() && !dns.is_empty(), "{name}: {coverage:#?}");
        assert!(
            web.iter().any(|i| i.hit_by.contains("client-to-web")),
            "{name}: no rule of web was hit: {web:#?}"
        );
        assert!(dns.iter().all(|i| i.hit_by.is_empty()), "{name}: a rule of dns was hit: {dns:#?}");
        // Both nodes' rules are listed; the probe crossed node-b's too (its answer at least).
        assert!(coverage.instances.iter().any(|i| i.node == "node-b" && !i.hit_by.is_empty()), "{name}");
    }
}

/// `no-hairpin-masq` drops the rule that masquerades a pod reaching itself through its
/// Service: the suite covers it (scenario hairpin), and without it the coverage loses that
/// template and the scenario fails.
#[test]
fn a_mutant_dropping_a_covered_rule_shows() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let s = load("../scenarios/hairpin.yaml");
    let whole = packetproof::proxy::iptables::BuiltinIptables { mutant: None };
    let broken = packetproof::proxy::iptables::BuiltinIptables { mutant: Some(Mutant::NoHairpinMasq) };
    let (passing, full) = run(&s, &whole);
    let (failing, partial) = run(&s, &broken);
    assert!(passing.passed() && !failing.passed());
    let covered = |c: &ScenarioCoverage| {
        let tables = coverage::tables([("builtin-iptables", "hairpin", c)]);
        tables[0]
            .templates
            .iter()
            .filter(|t| !t.covered_by.is_empty())
            .map(|t| t.rule.text.clone())
            .collect::<Vec<_>>()
    };
    let (full, partial) = (covered(&full), covered(&partial));
    let lost: Vec<&String> = full.iter().filter(|t| !partial.contains(t)).collect();
    assert!(
        lost.iter().any(|t| t.contains("-s <ip>/<n>") && t.contains("KUBE-MARK-MASQ")),
        "the hairpin masquerade template was not lost: {lost:#?}"
    );
}

/// A namespace's rules as coverage reads them, against the real kernel: each rule by the
/// handle traces name, iptables-nft's with `iptables-save`'s text and the rest with nft's, the
/// trace table left out; the ruleset's generation stays while nothing commits and moves with
/// any commit, which is what lets a reading stand for a whole phase.
#[test]
fn rules_are_read_by_handle_and_kept_while_the_generation_stands() {
    use packetproof::observe::{nftables::NftSocket, nftrace};
    use packetproof::topology::netns::{self, Netns};
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let ns = Netns::create(&format!("{}cov-rules", netns::process_prefix())).expect("a namespace");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut socket = NftSocket::open(&ns).unwrap();
        nftrace::install(&mut socket).unwrap();
        let restore = "*nat\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A OUTPUT -j KUBE-SERVICES\n\
                       -A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment \"shop/web:http\" -j DNAT --to-destination 10.0.0.1:80\nCOMMIT\n";
        ns.exec("iptables-restore", &[], Some(restore.as_bytes())).unwrap();
        ns.exec(
            "nft",
            &["-f", "-"],
            Some(b"table ip own {\n chain c {\n  ip daddr 10.96.0.11 counter drop\n }\n}\n"),
        )
        .unwrap();

        let (generation, rules) = coverage::rules::list(&ns, &mut socket).unwrap();
        assert!(rules.traced);
        let texts: Vec<(&str, &str, &str)> = rules
            .order
            .iter()
            .map(|id| (id.at.table.as_str(), id.at.chain.as_str(), rules.rules[id].as_str()))
            .collect();
        assert_eq!(
            texts,
            [
                ("nat", "OUTPUT", "-A OUTPUT -j KUBE-SERVICES"),
                (
                    "nat",
                    "KUBE-SERVICES",
                    "-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment \"shop/web:http\" -j DNAT --to-destination 10.0.0.1:80"
                ),
                ("own", "c", "ip daddr 10.96.0.11 counter drop"),
            ]
        );
        // The handles are nft's.
        let listing =
            String::from_utf8(ns.exec("nft", &["-a", "list", "table", "ip", "own"], None).unwrap().stdout)
                .unwrap();
        let own = rules.order.iter().find(|id| id.at.table == "own").unwrap();
        assert!(listing.contains(&format!("drop # handle {}", own.handle)), "{listing}");

        assert_eq!(socket.generation().unwrap(), generation, "nothing committed");
        ns.exec("nft", &["add", "rule", "ip", "own", "c", "ip", "daddr", "10.96.0.12", "drop"], None)
            .unwrap();
        assert_ne!(socket.generation().unwrap(), generation, "a commit moves the generation");
    }));
    let _ = ns.remove();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Rules a proxy writes with iptables-legacy live in x_tables, which tracing cannot see: their
/// counters are read when each phase starts and ends, and a rule whose count grew counts for
/// every probe of the phase. The program's rules for `web` are hit, rules no packet crossed
/// are listed unhit, and the coverage says how it was measured.
#[test]
fn legacy_rules_are_counted_per_phase() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let s = load("../scenarios/command-clusterip.yaml");
    let command = [
        "python3",
        "proxies/clusterip.py",
        "--state",
        "{state}",
        "--cluster-cidr",
        "{clusterCIDR}",
        "--restore",
        "iptables-legacy-restore",
    ];
    let options = serde_json::json!({ "command": command });
    let proxy = proxy::command::CommandProxy::from_options(&options, s.source.parent().unwrap()).unwrap();
    let (report, coverage) = run(&s, &proxy);
    assert!(report.passed(), "the scenario fails with its rules in iptables-legacy");
    let web: Vec<_> = coverage.instances.iter().filter(|i| i.rule.text.contains("10.96.0.50/32")).collect();
    assert!(web.iter().any(|i| i.hit_by.contains("pod-to-web")), "no rule of web was hit: {coverage:#?}");
    // Counted per rule, not per table: some rule no packet of a phase crossed stays unhit (which
    // one depends on what else the nodes sent: node-a's own OUTPUT jump was hit once).
    assert!(coverage.instances.iter().any(|i| i.hit_by.is_empty()), "{coverage:#?}");
    assert!(coverage.notes.iter().any(|n| n.contains("legacy")), "{:?}", coverage.notes);
}
