//! Send scheduling: which probes of a phase go out one after another and which together, in
//! waves, so that a phase's silences cost one timeout rather than one each.

use std::collections::BTreeSet;
use std::net::IpAddr;

use anyhow::Result;

use super::{Kinds, Shipment, Wire};
use crate::model::Phase;
use crate::oracle::Expectation;
use crate::verdict::SentProbe;
use crate::verdict::evidence::Window;

/// Sends each probe of `phase` as its kind does, one after another, except the probes that
/// go out together (those that wait out a silence, and the clients of a probe from several):
/// they go out at once where the first of them stands, so a phase's silences cost one timeout
/// rather than one each, and clients wait out their pauses side by side. Each of them is
/// judged on its own flows only (its source ports), so a window shared with the others changes
/// none of its evidence.
/// Probes on a route in `shared_routes` keep their places: another probe steers that route.
pub fn send_phase(
    phase: &Phase<'_>,
    expectations: &[Expectation],
    kinds: &mut Kinds,
    mut wire: Wire<'_>,
    shared_routes: &BTreeSet<(String, IpAddr)>,
) -> Result<Vec<SentProbe>> {
    let mut together = Vec::new();
    for (i, (probe, expected)) in phase.probes.iter().zip(expectations).enumerate() {
        let route = super::route(phase.cluster, probe);
        let shared = route.is_some_and(|(host, ip, _)| shared_routes.contains(&(host, ip)));
        if kinds.of(probe).goes_together(probe, expected) && !shared {
            together.push(i);
        }
    }
    let mut all: Vec<Option<SentProbe>> = phase.probes.iter().map(|_| None).collect();
    for (i, (probe, expected)) in phase.probes.iter().zip(expectations).enumerate() {
        if together.first() == Some(&i) {
            for wave in waves(phase, &together) {
                let before = wire.frame_counts();
                let probes: Vec<_> = wave.iter().map(|&j| (&phase.probes[j], &expectations[j])).collect();
                let shipments = super::send_together(&probes, &mut wire)?;
                let window = window(before, wire.frame_counts());
                for (j, shipment) in wave.into_iter().zip(shipments) {
                    all[j] = Some(sent_probe(shipment, window.clone()));
                }
            }
        }
        if together.contains(&i) {
            continue;
        }
        let before = wire.frame_counts();
        let shipment = kinds.of(probe).send(probe, expected, &mut wire)?;
        all[i] = Some(sent_probe(shipment, window(before, wire.frame_counts())));
    }
    Ok(all.into_iter().flatten().collect())
}

/// The most attempts sent together: each waits on a thread of its own.
pub(crate) const MOST_AT_ONCE: u32 = 256;

/// The probes `together` (positions in `phase`) in waves sent one after another. An external
/// host has one route to an address: probes steering it through different nodes go in
/// different waves. A wave holds at most [`MOST_AT_ONCE`] attempts, unless one probe has more.
pub(crate) fn waves(phase: &Phase<'_>, together: &[usize]) -> Vec<Vec<usize>> {
    struct Wave {
        probes: Vec<usize>,
        routes: Vec<(String, IpAddr, Option<String>)>,
        attempts: u32,
    }
    let mut waves: Vec<Wave> = Vec::new();
    for &i in together {
        let probe = &phase.probes[i];
        let route = super::route(phase.cluster, probe);
        let clashes = |w: &Wave| match &route {
            Some((host, ip, via)) => w.routes.iter().any(|(h, i, v)| h == host && i == ip && v != via),
            None => false,
        };
        let fits = |w: &&mut Wave| w.attempts.saturating_add(probe.count) <= MOST_AT_ONCE && !clashes(w);
        let wave = match waves.iter_mut().find(fits) {
            Some(wave) => wave,
            None => {
                waves.push(Wave { probes: Vec::new(), routes: Vec::new(), attempts: 0 });
                waves.last_mut().expect("just pushed")
            }
        };
        wave.probes.push(i);
        wave.routes.extend(route);
        wave.attempts = wave.attempts.saturating_add(probe.count);
    }
    waves.into_iter().map(|w| w.probes).collect()
}

/// The frames each capture point took between `before` and `after` (frame counts).
fn window(before: Vec<(String, usize)>, after: Vec<(String, usize)>) -> Window {
    Window { frames: before.into_iter().zip(after).map(|((key, from), (_, to))| (key, from..to)).collect() }
}

/// Routes (an external host's to an address) that one probe of the scenario steers through
/// a node and another takes as it finds it: the latter depends on the order of the two.
pub fn shared_routes(phases: &[Phase<'_>]) -> BTreeSet<(String, IpAddr)> {
    let routes: Vec<_> = phases
        .iter()
        .flat_map(|phase| phase.probes.iter().filter_map(|p| super::route(phase.cluster, p)))
        .collect();
    let steered =
        |host: &str, ip: &IpAddr| routes.iter().any(|(h, i, via)| h == host && i == ip && via.is_some());
    routes
        .iter()
        .filter(|(h, ip, via)| via.is_none() && steered(h, ip))
        .map(|(h, ip, _)| (h.clone(), *ip))
        .collect()
}

/// A shipment with the frames it is judged on.
fn sent_probe(Shipment { dst, sent, faults, witnesses }: Shipment, window: Window) -> SentProbe {
    SentProbe { dst, sent, window, faults, witnesses }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Probe, Scenario, Source, Target};

    fn load(name: &str) -> Scenario {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../scenarios/{name}.yaml"));
        crate::admission::load(&file).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn probes_steering_one_route_through_different_nodes_go_in_different_waves() {
        // blocked-via-node-a and -b: internet-scanner to 198.51.100.25 via node-a, then node-b.
        let s = load("loadbalancer-source-ranges");
        let phase = &s.phases()[0];
        let names: Vec<&str> = [2, 3, 4, 5].iter().map(|&i| phase.probes[i].name.as_str()).collect();
        assert_eq!(names, ["blocked-via-node-a", "blocked-via-node-b", "pod-to-lb-ip", "node-host-to-lb-ip"]);
        assert_eq!(waves(phase, &[2, 3, 4, 5]), [vec![2, 4, 5], vec![3]]);
        // Through the same node, they share one.
        assert_eq!(waves(phase, &[2, 2]), [vec![2, 2]]);
    }

    #[test]
    fn a_wave_holds_a_bounded_number_of_attempts() {
        let mut s = load("loadbalancer-source-ranges");
        s.probes.iter_mut().for_each(|p| p.count = MOST_AT_ONCE / 2);
        s.probes[0].count = MOST_AT_ONCE + 1;
        let phase = &s.phases()[0];
        assert_eq!(waves(phase, &[0, 4, 5, 6, 7]), [vec![0], vec![4, 5], vec![6, 7]]);
    }

    #[test]
    fn a_route_one_probe_steers_and_another_takes_as_it_finds_it_is_shared() {
        // office steers its route to 192.168.50.11 (an external IP on node-a's address) via node-a.
        let mut s = load("external-ip-on-node-address");
        assert!(shared_routes(&s.phases()).is_empty());
        let node_a = Target::Address("192.168.50.11:31053".parse().unwrap());
        s.probes.push(Probe::example(Source::External("office".into()), node_a));
        let shared = shared_routes(&s.phases());
        assert_eq!(
            shared.into_iter().collect::<Vec<_>>(),
            [("office".to_string(), "192.168.50.11".parse().unwrap())]
        );
    }
}
