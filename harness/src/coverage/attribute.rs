//! Which probe each traced packet belongs to, by its flow, across NAT and across nodes.
//!
//! A probe's attempts leave its client from known source ports towards a known destination:
//! a packet seen with such a source port and that destination names the client's endpoint
//! (address and port, as the first node saw it). NAT then changes either side of a flow: each
//! traced packet carries its headers as every base chain saw them, so within one packet the
//! headers before and after a translation name the same side of the same flow, and are joined
//! (source with source, destination with destination). A masqueraded request that reaches
//! the next node under the first node's address and a new port is thereby still the probe's,
//! and so is every answer that comes back to it. What no probe's endpoint joins (the proxy's
//! own traffic to its API server, say) belongs to no probe.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;

use super::identity::{Location, RuleId};
use crate::observe::nftrace::{Headers, TraceEvent};

/// What a probe sent: its client's source ports and the destination it addressed.
#[derive(Debug, Clone)]
pub struct ProbeFlows {
    pub label: String,
    pub dst: SocketAddr,
    pub ports: BTreeSet<u16>,
}

/// One packet's crossing of one namespace: its headers at each base chain and the proxy's
/// rules that matched it, in order.
#[derive(Debug, Default, Clone)]
pub struct Crossing {
    pub headers: Vec<Headers>,
    /// The proxy's rules it matched, as the traces named them.
    pub hits: Vec<RuleId>,
}

/// The crossings in one namespace's trace messages. A packet's messages share an id (its
/// buffer's) while it crosses: the first comes from the chain that marked it, the last from the
/// harness's chain at the last priority of its last hook, or from the rule that dropped it.
/// A bridged packet goes on in a new buffer (br_netfilter), under a new id: a message with a
/// packet under an id with nothing open continues it as a crossing of its own. Packets on
/// other CPUs may interleave their messages, so each id keeps its own open crossing.
pub fn crossings(events: Vec<TraceEvent>) -> Vec<Crossing> {
    let mut done = Vec::new();
    let mut open: HashMap<u32, Crossing> = HashMap::new();
    for event in events {
        let begins = event.packet.is_some() && (event.starts_packet() || !open.contains_key(&event.id));
        if begins && let Some(previous) = open.insert(event.id, Crossing::default()) {
            done.push(previous);
        }
        let ends = event.ends_packet();
        let id = event.id;
        let Some(crossing) = open.get_mut(&id) else { continue };
        if let Some(packet) = event.packet
            && crossing.headers.last() != Some(&packet)
        {
            crossing.headers.push(packet);
        }
        if event.is_proxy_rule()
            && let Some(handle) = event.handle
        {
            let at = Location { family: event.family.to_string(), table: event.table, chain: event.chain };
            crossing.hits.push(RuleId { at, handle });
        }
        if ends && let Some(finished) = open.remove(&id) {
            done.push(finished);
        }
    }
    done.extend(open.into_values());
    done
}

type Endpoint = (u8, SocketAddr);

/// Disjoint sets of endpoints: the names one side of a flow has had.
#[derive(Default)]
struct Aliases {
    parent: HashMap<Endpoint, Endpoint>,
}

impl Aliases {
    fn find(&mut self, e: Endpoint) -> Endpoint {
        let mut root = e;
        while let Some(&p) = self.parent.get(&root) {
            if p == root {
                break;
            }
            root = p;
        }
        // Path compression: every endpoint on the way points at the root.
        let mut at = e;
        while at != root {
            let next = self.parent.insert(at, root).unwrap_or(root);
            at = next;
        }
        root
    }

    fn join(&mut self, a: Endpoint, b: Endpoint) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent.insert(ra, rb);
        }
    }
}

/// For each crossing (of every node, in one list), the probes (indices into `probes`) it
/// belongs to.
pub fn attribute(crossings: &[&Crossing], probes: &[ProbeFlows]) -> Vec<BTreeSet<usize>> {
    let mut aliases = Aliases::default();
    for crossing in crossings {
        for pair in crossing.headers.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            // A NAT hook changes one side of a packet: two headers that differ in both are
            // not one packet translated, and joining them would join two flows.
            if a.protocol == b.protocol && (a.src == b.src || a.dst == b.dst) {
                aliases.join((a.protocol, a.src), (b.protocol, b.src));
                aliases.join((a.protocol, a.dst), (b.protocol, b.dst));
            }
        }
    }
    // Each probe's client endpoints, as the packets it sent named them.
    let mut clients: HashMap<Endpoint, BTreeSet<usize>> = HashMap::new();
    for crossing in crossings {
        for h in &crossing.headers {
            for (i, probe) in probes.iter().enumerate() {
                if h.dst == probe.dst && probe.ports.contains(&h.src.port()) {
                    let root = aliases.find((h.protocol, h.src));
                    clients.entry(root).or_default().insert(i);
                }
            }
        }
    }
    crossings
        .iter()
        .map(|crossing| {
            let mut owners = BTreeSet::new();
            for h in &crossing.headers {
                for side in [h.src, h.dst] {
                    if let Some(probes) = clients.get(&aliases.find((h.protocol, side))) {
                        owners.extend(probes.iter().copied());
                    }
                }
            }
            owners
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(src: &str, dst: &str) -> Headers {
        Headers { protocol: 6, src: src.parse().unwrap(), dst: dst.parse().unwrap() }
    }

    fn crossing(headers: &[Headers], rule: u64) -> Crossing {
        Crossing {
            headers: headers.to_vec(),
            hits: vec![RuleId { at: Location::new("ip", "nat", "KUBE-SERVICES"), handle: rule }],
        }
    }

    fn probe(label: &str, dst: &str, port: u16) -> ProbeFlows {
        ProbeFlows { label: label.into(), dst: dst.parse().unwrap(), ports: [port].into() }
    }

    #[test]
    fn a_masqueraded_flow_stays_its_probes_on_the_next_node_and_back() {
        // node-a: the pod's request as it arrived, DNATed to a pod on node-b (the filter
        // chains see it so), then masqueraded to node-a's address (the last hook sees that).
        let a_out = crossing(
            &[
                h("10.244.1.2:20000", "10.96.0.10:80"),
                h("10.244.1.2:20000", "10.244.2.3:8080"),
                h("192.168.0.1:41234", "10.244.2.3:8080"),
            ],
            1,
        );
        // node-b: the request as it arrives, then the answer going back.
        let b_in = crossing(&[h("192.168.0.1:41234", "10.244.2.3:8080")], 2);
        let b_back = crossing(&[h("10.244.2.3:8080", "192.168.0.1:41234")], 3);
        // node-a: the answer, its destination restored at prerouting, its source at postrouting.
        let a_back = crossing(
            &[
                h("10.244.2.3:8080", "192.168.0.1:41234"),
                h("10.244.2.3:8080", "10.244.1.2:20000"),
                h("10.96.0.10:80", "10.244.1.2:20000"),
            ],
            4,
        );
        // Another probe to another Service, and the proxy's own traffic.
        let other =
            crossing(&[h("10.244.1.2:20001", "10.96.0.20:53"), h("10.244.1.2:20001", "10.244.2.9:5353")], 5);
        let own = crossing(&[h("192.168.0.1:50000", "192.168.0.100:6443")], 6);
        let all = [&a_out, &b_in, &b_back, &a_back, &other, &own];
        let probes = [probe("web", "10.96.0.10:80", 20000), probe("dns", "10.96.0.20:53", 20001)];
        let owners = attribute(&all, &probes);
        let web: BTreeSet<usize> = [0].into();
        assert_eq!(owners[..4], [web.clone(), web.clone(), web.clone(), web]);
        assert_eq!(owners[4], [1].into());
        assert!(owners[5].is_empty());
    }

    #[test]
    fn headers_that_differ_on_both_sides_are_not_joined() {
        // A buffer reused by another probe's packet to the same backend: both sides differ
        // from the last header, so the two clients stay apart.
        let mixed = crossing(
            &[h("192.168.0.1:41234", "10.244.2.3:8080"), h("10.244.1.9:20001", "10.244.2.3:8081")],
            1,
        );
        let first = crossing(&[h("10.244.1.2:20000", "10.96.0.10:80")], 2);
        let probes = [probe("web", "10.96.0.10:80", 20000)];
        let owners = attribute(&[&mixed, &first], &probes);
        assert!(owners[0].is_empty() && owners[1] == [0].into());
    }

    #[test]
    fn interleaved_packets_keep_their_own_messages() {
        let event =
            |id: u32, table: &str, chain: &str, handle: Option<u64>, packet: Option<Headers>| TraceEvent {
                id,
                family: if table == "nat" { "ip" } else { "inet" },
                table: table.into(),
                chain: chain.into(),
                handle,
                packet,
                dropped: false,
            };
        let t = crate::observe::nftrace::TRACE_TABLE;
        let p1 = h("10.0.0.1:20000", "10.96.0.10:80");
        let p2 = h("10.0.0.1:20001", "10.96.0.10:80");
        let events = vec![
            event(1, t, "mark-output", Some(5), Some(p1)),
            event(2, t, "mark-output", Some(5), Some(p2)),
            event(1, "nat", "OUTPUT", Some(7), Some(p1)),
            event(2, "nat", "OUTPUT", Some(8), Some(p2)),
            // The same buffer reused for a later packet: a new crossing.
            event(1, t, "mark-output", Some(5), Some(p2)),
            event(1, "nat", "OUTPUT", Some(9), None),
        ];
        let mut found: Vec<(u16, Vec<u64>)> = crossings(events)
            .into_iter()
            .map(|c| (c.headers[0].src.port(), c.hits.iter().map(|h| h.handle).collect()))
            .collect();
        found.sort();
        assert_eq!(found, [(20000, vec![7]), (20001, vec![8]), (20001, vec![9])]);
    }
}
