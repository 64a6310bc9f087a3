//! The catalog of known bugs: each entry of the mutation catalog (`proxy::Mutant`, by name)
//! with the upstream reports of the bug, the releases it shipped in and where it was fixed (as
//! far as known), and its signature: the probes of which scenarios a proxy with the bug fails,
//! and how. A run whose failures match a signature names the bug (`report::known_bugs`);
//! `tests/mutants.rs` proves each signature by running its mutant against its scenarios. It
//! sits with the reports that name the bugs; the mutants that reproduce them look it up by name.

use std::collections::BTreeSet;

use crate::verdict::Symptom;

/// The probe name that stands for any probe of the scenario: the mark holds when some probe
/// failed with its symptom (a bug each probe shows only by chance, such as affinity lost on a
/// restart, which a client re-picking its old backend hides).
pub const ANY: &str = "*";

/// The probe name a signature gives the proxy's own failure in a scenario ([`Symptom::ProxyFailed`]).
pub const PROXY: &str = "(the proxy)";

/// One probe of a signature: it fails, and among its symptoms is `symptom`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub scenario: &'static str,
    pub probe: &'static str,
    pub symptom: Symptom,
    /// The bug shows in this probe only when a random choice lands on it: each attempt picks
    /// a backend, and only some backends show the bug (masquerade missing toward a local
    /// endpoint, whose remote twin is masqueraded to the same address). Only its failing with
    /// `symptom` tells: a run that passes it, or fails it otherwise (the attempts that missed
    /// the bug may fail in another way of their own), neither proves nor rules out the bug.
    pub by_chance: bool,
}

/// A probe every run of the bug fails: every attempt shows `symptom`
/// (`tests/mutants.rs` checks that, attempt by attempt).
const fn mark(scenario: &'static str, probe: &'static str, symptom: Symptom) -> Mark {
    Mark { scenario, probe, symptom, by_chance: false }
}

/// A probe that shows the bug only in the attempts whose random choice lands on it.
const fn by_chance(scenario: &'static str, probe: &'static str, symptom: Symptom) -> Mark {
    Mark { scenario, probe, symptom, by_chance: true }
}

/// A known bug.
#[derive(Debug, Clone, Copy)]
pub struct KnownBug {
    /// The mutant that reproduces it (`proxy::Mutant::name`).
    pub name: &'static str,
    /// Upstream reports and fixes, `owner/repo#N`; empty for a mutant made up to prove a check
    /// (a bug a proxy could ship, no report known).
    pub upstream: &'static [&'static str],
    /// The proxy and the releases the bug shipped in, or `unknown`.
    pub shipped: &'static str,
    /// Where it was fixed, or `unknown` (with why, after it).
    pub fixed: &'static str,
    /// The probes a proxy with the bug fails, in every mode where the bug can exist.
    pub signature: &'static [Mark],
}

impl KnownBug {
    /// `matches kubernetes/kubernetes#131765, mutant etp-local-filtered-before-dnat (in kube-proxy
    /// nftables mode up to v1.33.4 (…); fixed in v1.33.5 and v1.34 (…))`, or for a made-up
    /// mutant `matches mutant no-affinity`.
    pub fn headline(&self) -> String {
        let what = match self.upstream.first() {
            Some(first) => format!("{first}, mutant {}", self.name),
            None => format!("mutant {}", self.name),
        };
        let mut when = Vec::new();
        if !self.shipped.starts_with(UNKNOWN) {
            when.push(format!("in {}", self.shipped));
        }
        if !self.fixed.starts_with(UNKNOWN) {
            // `by #139629, release unknown` reads after `fixed`; a release after `fixed in`.
            let by = if self.fixed.starts_with("by ") { "" } else { "in " };
            when.push(format!("fixed {by}{}", self.fixed));
        }
        if when.is_empty() {
            format!("matches {what}")
        } else {
            format!("matches {what} ({})", when.join("; "))
        }
    }

    /// The scenarios the signature names, each once, in order.
    pub fn scenarios(&self) -> Vec<&'static str> {
        let mut seen = BTreeSet::new();
        self.signature.iter().map(|m| m.scenario).filter(|s| seen.insert(*s)).collect()
    }
}

const UNKNOWN: &str = "unknown";

/// The bug a mutant reproduces, by the mutant's name.
pub fn by_name(name: &str) -> Option<&'static KnownBug> {
    CATALOG.iter().find(|b| b.name == name)
}

/// A known bug whose signature a run's failures match.
#[derive(Debug, Clone)]
pub struct Match {
    pub bug: &'static KnownBug,
    /// The signature's probes the run judged, `(scenario, probe)`: every one failed as the
    /// signature says.
    pub probes: Vec<(String, String)>,
}

/// The bugs whose signature `judged` matches. `judged(scenario, probe)` is `None` for a probe
/// the run did not judge, else the symptoms it failed with (empty when it passed); for
/// [`ANY`], those of every probe of the scenario; for [`PROXY`], the proxy's own failure. A bug matches
/// when the run judged at least half of its signature's probes and every one of them failed
/// with the signature's symptom: a run of a few scenarios can name a bug, and one probe that
/// passes, or fails otherwise, rules it out. A [`by_chance`] probe counts only when it failed
/// with the symptom: otherwise the bug's random choices may have missed it.
pub fn matches(judged: impl Fn(&str, &str) -> Option<BTreeSet<Symptom>>) -> Vec<Match> {
    CATALOG
        .iter()
        .filter_map(|bug| {
            let mut probes = Vec::new();
            for m in bug.signature {
                match judged(m.scenario, m.probe) {
                    None => {}
                    Some(symptoms) if symptoms.contains(&m.symptom) => {
                        probes.push((m.scenario.to_string(), m.probe.to_string()))
                    }
                    Some(_) if m.by_chance => {}
                    Some(_) => return None,
                }
            }
            (!probes.is_empty() && 2 * probes.len() >= bug.signature.len()).then_some(Match { bug, probes })
        })
        .collect()
}

use Symptom::*;

/// Every known bug, in the order of `proxy::Mutant::ALL`.
pub static CATALOG: &[KnownBug] = &[
    KnownBug {
        name: "no-hairpin-masq",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            mark("etp-local-nodeport", "endpoint-hairpin-via-own-node-port", Silent),
            mark("hairpin", "self-via-service-tcp", Silent),
            mark("hairpin", "self-via-service-udp", Silent),
        ],
    },
    KnownBug {
        name: "no-node-port-masq",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            mark("external-ip-on-node-address", "office-to-external-ip-on-node-a", WrongSource),
            mark("external-ip-on-node-address", "office-to-web-node-port-on-node-b", WrongSource),
            mark("external-ip-on-node-address", "pod-to-external-ip-on-node-a", WrongSource),
            by_chance("external-ips", "node-a-host", WrongSource),
            by_chance("external-ips", "node-b-host-udp", WrongSource),
            by_chance("external-ips", "outside-udp-via-node-a", WrongSource),
            by_chance("external-ips", "outside-via-node-a", WrongSource),
            by_chance("external-ips", "outside-via-node-b", WrongSource),
            mark("external-ips", "pod-on-node-a", WrongSource),
            mark("external-ips", "pod-on-node-b", WrongSource),
        ],
    },
    KnownBug {
        name: "no-off-cluster-masq",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            by_chance("dual-stack", "node-host-to-cluster-ip-v4", WrongSource),
            by_chance("dual-stack", "node-host-to-cluster-ip-v6", WrongSource),
            by_chance("ipv6-cluster-ip", "node-a-host-to-cluster-ip-tcp", WrongSource),
            by_chance("ipv6-cluster-ip", "node-b-host-to-cluster-ip-udp", WrongSource),
        ],
    },
    KnownBug {
        name: "last-endpoint-never-chosen",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            mark("ipv6-cluster-ip", "pod-to-cluster-ip-tcp", Uneven),
            mark("ipv6-cluster-ip", "pod-to-cluster-ip-udp", Uneven),
            mark("kube-dns-udp", "client-to-dns", Uneven),
        ],
    },
    KnownBug {
        name: "drop-instead-of-reject",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            mark("command-clusterip", "pod-to-service-without-endpoints", Silent),
            mark("no-endpoints-reject", "external-to-node-port", Silent),
            mark("no-endpoints-reject", "pod-tcp-to-cluster-ip", Silent),
            mark("no-endpoints-reject", "pod-udp-to-cluster-ip", Silent),
        ],
    },
    KnownBug {
        name: "dnat-to-service-port",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            mark("dual-stack", "external-to-node-port-v4", Refused),
            mark("dual-stack", "external-to-node-port-v6", Refused),
            mark("dual-stack", "node-host-to-cluster-ip-v4", Refused),
            mark("dual-stack", "node-host-to-cluster-ip-v6", Refused),
            mark("dual-stack", "pod-to-cluster-ip-v4", Refused),
            mark("dual-stack", "pod-to-cluster-ip-v6", Refused),
            mark("dual-stack", "pod-to-cluster-ip-v6-udp", Refused),
            mark("dual-stack", "pod-to-ipv6-only-service", Refused),
            mark("external-ip-on-node-address", "node-b-host-to-external-ip-on-node-a", Refused),
            mark("external-ip-on-node-address", "office-to-external-ip-on-node-a", Refused),
            mark("external-ip-on-node-address", "office-to-web-node-port-on-node-b", Refused),
            mark("external-ip-on-node-address", "pod-to-external-ip-on-node-a", Refused),
        ],
    },
    KnownBug {
        name: "etp-local-masquerades",
        upstream: &["kubernetes/kubernetes#89869", "kubernetes/kubernetes#62537"],
        shipped: "kube-proxy IPVS mode",
        fixed: "unknown",
        signature: &[
            mark("etp-local-nodeport", "node-b-host-to-node-a-node-port", WrongSource),
            mark("etp-local-nodeport", "outside-via-endpoint-node", WrongSource),
            mark("ipv6-node-port", "local-policy-via-endpoint-node", WrongSource),
        ],
    },
    KnownBug {
        name: "etp-local-uses-remote-endpoints",
        upstream: &["kubernetes/kubernetes#97073"],
        shipped: "kube-proxy IPVS mode (reported on v1.18.9)",
        fixed: "unknown",
        signature: &[
            mark("external-ips-local", "outside-via-node-without-endpoint", Leaked),
            mark("ipv6-node-port", "local-policy-via-node-without-endpoint", Leaked),
        ],
    },
    KnownBug {
        name: "etp-local-no-drop",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            mark("etp-local-nodeport", "outside-via-node-without-endpoint", Leaked),
            mark("ipv6-node-port", "local-policy-via-node-without-endpoint", Leaked),
        ],
    },
    KnownBug {
        name: "itp-local-falls-back-to-remote",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            mark("itp-local", "node-c-host", Answered),
            mark("itp-local", "pod-on-node-without-endpoint", Answered),
        ],
    },
    KnownBug {
        name: "source-ranges-not-enforced",
        upstream: &["kubernetes/kubernetes#88698", "cilium/cilium#34903"],
        shipped: "kube-proxy IPVS mode; Cilium",
        fixed: "unknown",
        signature: &[
            mark("loadbalancer-source-ranges", "blocked-via-node-a", Answered),
            mark("loadbalancer-source-ranges", "blocked-via-node-b", Answered),
            mark("loadbalancer-source-ranges", "node-host-to-lb-ip", Answered),
            mark("loadbalancer-source-ranges", "pod-to-lb-ip", Answered),
        ],
    },
    KnownBug {
        name: "affinity-without-timeout",
        upstream: &["kubernetes/kubernetes#89358", "cloudnativelabs/kube-router#882"],
        shipped: "kube-proxy IPVS mode; kube-router",
        fixed: "unknown",
        // One probe from five clients at once: each client's part fails.
        signature: &[
            mark("session-affinity-timeout", "affinity-expires-between-attempts[loadgen-0]", AffinityKept),
            mark("session-affinity-timeout", "affinity-expires-between-attempts[loadgen-1]", AffinityKept),
            mark("session-affinity-timeout", "affinity-expires-between-attempts[loadgen-2]", AffinityKept),
            mark("session-affinity-timeout", "affinity-expires-between-attempts[loadgen-3]", AffinityKept),
            mark("session-affinity-timeout", "affinity-expires-between-attempts[loadgen-4]", AffinityKept),
        ],
    },
    KnownBug {
        name: "no-affinity",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            mark("session-affinity", "first-client-pod-is-sticky", AffinityBroken),
            mark("session-affinity", "node-host-is-sticky", AffinityBroken),
            mark("session-affinity", "outside-via-node-port-is-sticky", AffinityBroken),
            mark("session-affinity", "second-client-pod-is-sticky", AffinityBroken),
        ],
    },
    KnownBug {
        name: "terminating-used-while-ready",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            by_chance("terminating-ignored-while-ready", "outside-to-node-port", WrongBackend),
            by_chance("terminating-ignored-while-ready", "pod-to-cluster-ip", WrongBackend),
        ],
    },
    KnownBug {
        name: "terminating-never-fallback",
        upstream: &["kubernetes/kubernetes#85643"],
        shipped: "kube-proxy before v1.26",
        fixed: "v1.26 (ProxyTerminatingEndpoints on by default)",
        signature: &[
            mark("terminating-fallback", "node-host-to-cluster-ip", Refused),
            mark("terminating-fallback", "outside-to-node-port", Refused),
            mark("terminating-fallback", "pod-to-cluster-ip", Refused),
        ],
    },
    KnownBug {
        name: "node-port-on-all-addresses",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            mark("node-port-addresses", "node-b-host-to-node-a-secondary", Answered),
            mark("node-port-addresses", "outside-to-node-a-secondary", Answered),
            mark("node-port-addresses", "outside-to-node-b-secondary-udp", Answered),
        ],
    },
    KnownBug {
        name: "health-check-always-ok",
        upstream: &["cilium/cilium#11043"],
        shipped: "Cilium",
        fixed: "unknown",
        signature: &[
            mark("all-flows", "flow: external laptop -> api healthCheck@node-b", WrongHealth),
            mark("all-flows", "flow: node node-a -> api healthCheck@node-b", WrongHealth),
            mark("all-flows", "flow: node node-b -> api healthCheck@node-b", WrongHealth),
            mark("etp-local-health-check", "balancer-asks-node-b", WrongHealth),
            mark("etp-local-health-check", "node-a-asks-node-b", WrongHealth),
        ],
    },
    KnownBug {
        name: "node-ports-not-last",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[mark("external-ip-on-node-address", "office-to-external-ip-on-node-a", WrongBackend)],
    },
    KnownBug {
        name: "stale-udp-conntrack-kept",
        upstream: &["kubernetes/kubernetes#59368", "kubernetes/kubernetes#72336"],
        shipped: "kube-proxy before the fixes of both",
        fixed: "unknown",
        signature: &[mark("live-stale-udp-conntrack", "endpoint-replaced: after", WrongBackend)],
    },
    KnownBug {
        name: "localnet-not-firewalled",
        upstream: &["kubernetes/kubernetes#90259"],
        shipped: "kube-proxy iptables mode before v1.16.11, v1.17.7 and v1.18.4 (CVE-2020-8558)",
        fixed: "v1.16.11, v1.17.7, v1.18.4",
        signature: &[mark("localhost-node-port", "neighbour-to-node-a-localhost", Answered)],
    },
    KnownBug {
        name: "node-port-without-endpoints-not-rejected",
        upstream: &["kubernetes/kubernetes#43212", "kubernetes/kubernetes#43415"],
        shipped: "kube-proxy before #43415",
        fixed: "unknown",
        signature: &[
            mark("ipv6-hairpin-and-reject", "no-endpoints-node-port", RefusedByHost),
            mark("no-endpoints-reject", "external-to-node-port", RefusedByHost),
        ],
    },
    KnownBug {
        name: "hints-ignored",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            by_chance("topology-hints", "etp-local-pod-to-cluster-ip", WrongBackend),
            by_chance("topology-hints", "hinted-from-node-a-host", WrongBackend),
            by_chance("topology-hints", "hinted-from-zone-a", WrongBackend),
            by_chance("topology-hints", "hinted-from-zone-b", WrongBackend),
            by_chance("topology-hints", "hinted-outside-via-node-a", WrongBackend),
            by_chance("topology-hints", "hinted-outside-via-node-b", WrongBackend),
            by_chance("traffic-distribution", "zone-a-node-host", WrongBackend),
            by_chance("traffic-distribution", "zone-a-pod-without-local-endpoint", WrongBackend),
            by_chance("traffic-distribution", "zone-b-pod", WrongBackend),
        ],
    },
    KnownBug {
        name: "hints-used-when-incomplete",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[mark("topology-hints", "partial-from-zone-a", Uneven)],
    },
    KnownBug {
        name: "ip-mode-proxy-ignored",
        upstream: &["kubernetes/enhancements#1860"],
        shipped: "kube-proxy before v1.29",
        fixed: "v1.29 (gate LoadBalancerIPMode)",
        signature: &[
            mark("loadbalancer-ip-mode-proxy", "node-to-proxy-mode-ip", Answered),
            mark("loadbalancer-ip-mode-proxy", "outside-to-proxy-mode-ip-via-node-a", Answered),
            mark("loadbalancer-ip-mode-proxy", "pod-to-proxy-mode-ip", Answered),
        ],
    },
    KnownBug {
        name: "invalid-not-dropped",
        upstream: &["kubernetes/kubernetes#74839", "kubernetes/kubernetes#122663"],
        shipped: "kube-proxy iptables mode before the fix of #74839",
        fixed: "unknown",
        signature: &[mark("live-out-of-window", "out-of-window-segment: session-survives", Refused)],
    },
    KnownBug {
        name: "stale-udp-kept-when-scaled-to-zero",
        upstream: &["kubernetes/kubernetes#139628", "kubernetes/kubernetes#139629"],
        shipped: "kube-proxy v1.32 on (the conntrack reconciler; a regression from v1.31): seen in v1.32.13 to \
                  v1.36.3, both modes; v1.31.14 passes",
        fixed: "by #139629, release unknown",
        // The real releases move the stream once the Service has a replica again (the reconciler
        // then finds the entry stale): only the step to zero shows the bug.
        signature: &[mark("live-udp-scaled-to-zero", "scaled-to-zero: rejected", Answered)],
    },
    KnownBug {
        name: "stale-udp-kept-when-deleted",
        upstream: &["kubernetes/kubernetes#141371"],
        shipped: "kube-proxy v1.32 on: seen in v1.32.13 to v1.36.3, both modes; v1.31.14 passes",
        fixed: "by #141371, release unknown",
        signature: &[mark("live-udp-service-deleted", "service-deleted: no-longer-answered", Answered)],
    },
    KnownBug {
        name: "affinity-lost-on-sync",
        upstream: &["kubernetes/kubernetes#123162"],
        shipped: "kube-proxy nftables mode, on restart",
        fixed: "unknown",
        signature: &[
            // Each client re-picks its old backend with chance 1/4: all 8 after the two
            // steps do with chance 1.5e-5.
            mark("live-affinity-kept", ANY, AffinityBroken),
        ],
    },
    KnownBug {
        name: "udp-conntrack-cleared-when-not-ready",
        upstream: &["kubernetes/kubernetes#134143"],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[mark("live-udp-terminating", "old-replica-terminating: stream-stays", WrongBackend)],
    },
    KnownBug {
        name: "detect-local-mode-ignored",
        upstream: &[],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[
            mark("detect-local-interface-prefix", "own-nodes-pod-dropped-without-local-endpoint", Answered),
            mark("detect-local-interface-prefix", "pod-to-cluster-ip-masqueraded", WrongSource),
            mark("detect-local-node-cidr", "other-nodes-pod-dropped-without-local-endpoint", Leaked),
        ],
    },
    KnownBug {
        name: "affinity-to-not-ready",
        upstream: &["kubernetes/kubernetes#110302", "kubernetes/kubernetes#106030"],
        shipped: "kube-proxy v1.22 iptables mode",
        fixed: "by #106030, release unknown",
        signature: &[mark(
            "live-affinity-not-ready",
            "checkout-0-not-ready: moves-to-checkout-1",
            WrongBackend,
        )],
    },
    KnownBug {
        name: "source-ranges-node-reaches-first-lb-ip-only",
        upstream: &["kubernetes/kubernetes#109826"],
        shipped: "kube-proxy before #109826",
        fixed: "unknown",
        signature: &[mark("loadbalancer-source-ranges-local-vips", "node-to-second-vip", Silent)],
    },
    KnownBug {
        name: "udp-conntrack-flushed-on-restart",
        upstream: &["kubernetes/kubernetes#122740"],
        shipped: "kube-proxy iptables and nftables modes: seen in v1.30.3 and v1.31.14",
        fixed: "by v1.32 (v1.32.13 to v1.36.3 pass in both modes; the issue is open and #122741 was closed \
                unmerged, so the change that fixed it is not known here)",
        signature: &[mark(
            "live-udp-kept-across-restart",
            "restart-while-draining: stream-stays",
            WrongBackend,
        )],
    },
    KnownBug {
        name: "health-check-kept-when-endpoints-go",
        upstream: &["kubernetes/kubernetes#44311"],
        shipped: "unknown",
        fixed: "unknown",
        signature: &[mark(
            "live-health-check-endpoint-moves",
            "endpoint-moves-to-node-b: node-a-now-unhealthy",
            WrongHealth,
        )],
    },
    KnownBug {
        name: "service-addresses-not-bound",
        upstream: &["kubernetes/kubernetes#85422", "kubernetes/kubernetes#72197"],
        shipped: "kube-proxy IPVS mode",
        fixed: "unknown",
        // IPVS mode runs in the kernel matrix's VMs only: this signature is not proven by
        // `tests/mutants.rs` (the VMs' hunt, `matrix --mutants`, kills the mutant there).
        signature: &[mark("pod-to-clusterip-cross-node", "frontend-to-api", Silent)],
    },
    KnownBug {
        name: "partial-sync-misses-endpoints",
        upstream: &["kubernetes/kubernetes#121362", "kubernetes/kubernetes#122204"],
        shipped: "kube-proxy iptables mode v1.27 and later, with partial syncs (MinimizeIPTablesRestore)",
        fixed: "#122204 (release-1.28: #122757); releases unknown",
        signature: &[mark(
            "live-local-endpoint-arrives",
            "endpoint-on-node-b-ready: node-b-now-serves-locally",
            Refused,
        )],
    },
    KnownBug {
        name: "etp-local-filtered-before-dnat",
        upstream: &["kubernetes/kubernetes#131765", "kubernetes/kubernetes#132456"],
        shipped: "kube-proxy nftables mode up to v1.33.4 (seen in v1.30.3, v1.31.14, v1.32.13)",
        fixed: "v1.33.5 and v1.34 (#132456; release-1.33: #133969; v1.33.13 and later pass)",
        signature: &[
            mark("all-flows", "flow: node node-b -> api:https loadBalancer 198.51.100.50", Silent),
            mark("external-ips-local", "node-b-host", Silent),
        ],
    },
    KnownBug {
        name: "interface-prefix-matched-by-index",
        upstream: &["kubernetes/kubernetes#134024"],
        shipped: "kube-proxy nftables mode with detectLocalMode InterfaceNamePrefix (seen in v1.30.3, v1.31.14, \
                  v1.32.13)",
        fixed: "#134024, backported to release-1.33 (#134099, #134117) and release-1.34 (#134118); v1.33.13 \
                and later pass",
        signature: &[mark("detect-local-interface-prefix", PROXY, ProxyFailed)],
    },
    KnownBug {
        name: "source-ranges-checked-after-dnat",
        upstream: &["kubernetes/kubernetes#122614"],
        shipped: "kube-proxy nftables mode v1.29 (alpha)",
        fixed: "v1.30 (#122614)",
        signature: &[
            mark("loadbalancer-source-ranges", "blocked-via-node-a", Answered),
            mark("loadbalancer-source-ranges", "blocked-via-node-b", Answered),
            mark("loadbalancer-source-ranges", "pod-to-lb-ip", Answered),
        ],
    },
    KnownBug {
        name: "etp-local-pods-not-short-circuited",
        upstream: &[
            "kubernetes/kubernetes#77523",
            "kubernetes/kubernetes#93456",
            "kubernetes/kubernetes#97081",
        ],
        shipped: "kube-proxy iptables mode before #77523; IPVS mode (#93456, partly fixed by #97081)",
        fixed: "unknown (the releases of #77523 and #97081 are not known here)",
        signature: &[mark("external-ips-local", "pod-on-node-b", Silent)],
    },
    KnownBug {
        name: "itp-local-filters-external-traffic",
        upstream: &["kubernetes/kubernetes#105470"],
        shipped: "kube-proxy with internalTrafficPolicy (alpha in v1.21), as reported in 2021",
        fixed: "unknown",
        signature: &[
            mark("itp-local", "pod-on-node-without-endpoint", Refused),
            mark("traffic-policies-apart", "outside-via-node-without-endpoint", Refused),
            mark("traffic-policies-apart", "pod-on-node-without-endpoint", Refused),
        ],
    },
    KnownBug {
        name: "etp-local-skips-internal-filtering",
        upstream: &["kubernetes/kubernetes#105470"],
        shipped: "kube-proxy with internalTrafficPolicy or topology hints (alpha in v1.21), as reported in 2021",
        fixed: "unknown",
        signature: &[
            by_chance("topology-hints", "etp-local-pod-to-cluster-ip", WrongBackend),
            mark("traffic-policies-apart", "both-local-pod-on-node-without-endpoint", Answered),
        ],
    },
    KnownBug {
        name: "hints-count-unready-endpoints",
        upstream: &["kubernetes/kubernetes#106507"],
        shipped: "kube-proxy with TopologyAwareHints before #106507",
        fixed: "by #106507, release unknown",
        signature: &[mark("topology-hints-unready", "zone-a-pod-uses-every-ready-endpoint", Refused)],
    },
    KnownBug {
        name: "etp-local-affinity-ignored",
        upstream: &["kubernetes/kubernetes#55429", "kubernetes/kubernetes#55519"],
        shipped: "kube-proxy iptables mode before #55519 (reported in 2017)",
        fixed: "by #55519, release unknown",
        signature: &[mark("etp-local-affinity", "outside-via-endpoint-node-is-sticky", AffinityBroken)],
    },
    KnownBug {
        name: "health-check-on-all-addresses",
        upstream: &["kubernetes/kubernetes#82163"],
        shipped: "kube-proxy, reported on v1.15 in IPVS mode (the health check server is every mode's)",
        fixed: "unknown (the issue was closed as stale; v1.30.3 passes node-port-addresses)",
        signature: &[
            mark("node-port-addresses", "balancer-asks-node-a-secondary", Broken),
            mark("node-port-addresses", "node-b-host-asks-node-a-secondary", Broken),
        ],
    },
    KnownBug {
        name: "remote-hairpin-not-masqueraded",
        upstream: &[],
        shipped: "kube-proxy nftables mode v1.36 (seen in v1.36.3: its hairpin-connections set holds only the \
                  node's own endpoints; v1.35.6 passes)",
        fixed: "unknown",
        signature: &[mark("all-flows", "flow: pod api-0 -> api:https nodePort@node-b", Silent)],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_signatures_are_unique_and_nonempty() {
        let mut names = BTreeSet::new();
        for bug in CATALOG {
            assert!(names.insert(bug.name), "{} twice", bug.name);
            assert!(!bug.signature.is_empty(), "{} has no signature", bug.name);
            let mut probes = BTreeSet::new();
            for m in bug.signature {
                assert!(probes.insert((m.scenario, m.probe)), "{}: {m:?} twice", bug.name);
            }
        }
    }

    #[test]
    fn headlines_name_the_report_and_the_releases_known() {
        let headline = |name| by_name(name).map(KnownBug::headline).unwrap_or_default();
        assert_eq!(
            headline("etp-local-filtered-before-dnat"),
            "matches kubernetes/kubernetes#131765, mutant etp-local-filtered-before-dnat (in kube-proxy nftables \
             mode up to v1.33.4 (seen in v1.30.3, v1.31.14, v1.32.13); fixed in v1.33.5 and v1.34 (#132456; \
             release-1.33: #133969; v1.33.13 and later pass))"
        );
        assert_eq!(
            headline("stale-udp-kept-when-deleted"),
            "matches kubernetes/kubernetes#141371, mutant stale-udp-kept-when-deleted (in kube-proxy v1.32 on: seen \
             in v1.32.13 to v1.36.3, both modes; v1.31.14 passes; fixed by #141371, release unknown)"
        );
        assert_eq!(headline("no-affinity"), "matches mutant no-affinity");
    }

    #[test]
    fn symptoms_read_back_by_name() {
        for s in Symptom::ALL {
            assert_eq!(s.name().parse::<Symptom>(), Ok(s));
        }
    }

    #[test]
    fn a_match_needs_half_the_signature_and_no_contradiction() {
        let bug = &CATALOG[0];
        let first = bug.signature[0];
        let failing = |s: &str, p: &str| {
            bug.signature
                .iter()
                .find(|m| m.scenario == s && m.probe == p)
                .map(|m| BTreeSet::from([m.symptom]))
        };
        assert!(matches(failing).iter().any(|m| m.bug.name == bug.name));
        // The first probe passed: ruled out.
        let one_passed = |s: &str, p: &str| {
            if (s, p) == (first.scenario, first.probe) { Some(BTreeSet::new()) } else { failing(s, p) }
        };
        assert!(!matches(one_passed).iter().any(|m| m.bug.name == bug.name));
        // Nothing of the signature judged: no claim.
        assert!(matches(|_: &str, _: &str| None).is_empty());
    }

    /// A probe that shows the bug only by chance and passed, or failed otherwise, neither
    /// proves nor rules it out; a certain one rules it out.
    #[test]
    fn a_by_chance_probe_counts_only_when_it_fails_as_said() {
        let bug = by_name("no-node-port-masq").expect("in the catalog");
        let chance = bug.signature.iter().find(|m| m.by_chance).expect("a by-chance probe");
        let certain = bug.signature.iter().find(|m| !m.by_chance).expect("a certain probe");
        let all_but = |other: Mark, symptoms: BTreeSet<Symptom>| {
            move |s: &str, p: &str| {
                let m = bug.signature.iter().find(|m| m.scenario == s && m.probe == p)?;
                Some(if (s, p) == (other.scenario, other.probe) {
                    symptoms.clone()
                } else {
                    BTreeSet::from([m.symptom])
                })
            }
        };
        let named = |judged| matches(judged).iter().any(|m| m.bug.name == bug.name);
        for symptoms in [BTreeSet::new(), BTreeSet::from([Silent])] {
            assert!(named(all_but(*chance, symptoms.clone())), "{symptoms:?}");
            assert!(!named(all_but(*certain, symptoms.clone())), "{symptoms:?}");
        }
    }
}
