//! IPv6 clusters: the IPv6 proxier's rules, checked against kube-proxy's own IPv6 fixtures
//! (`TestEnableLocalhostNodePortsIPv6` / `TestDisableLocalhostNodePortsIPv6` in
//! proxier_test.go, quoted as `ip6tables-save` prints them: hosts with `/128`, `-s`/`-d`/`-p`
//! first) and, for every other form, against the IPv4 rules of the same cluster moved to
//! IPv6 ([`v6`]): the same rules with `/128` hosts, `icmp6-port-unreachable` and full-length
//! `recent` masks, less what exists for IPv4 only.

use std::net::IpAddr;

use ipnet::IpNet;

use super::*;
use crate::model::IpFamily;
use crate::proxy::iptables_rules::args;

const NODEPORTS_COMMENT: &str =
    "\"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";

/// `a.b.c.d` → `fd00:a:b:1c::d`: the decimal octets read as hex groups, so addresses stay
/// recognisable, and `c` with a leading 1 so that no group is zero: `::` never swallows one,
/// and the text of addresses sorts as the IPv4 text did (kube-proxy orders endpoints by
/// their text). `x.y.z.1` stays the first host of its `/24`'s image, as the bridge address
/// is. IPv6 addresses unchanged.
pub(super) fn v6_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("fd00:{a}:{b}:1{c}::{d}").parse().expect("a valid IPv6 address")
        }
        v6 => v6,
    }
}

/// A CIDR moved like its address: each IPv4 octet of prefix becomes a 16-bit group, so
/// containment is kept (`10.244.0.0/16` → `fd00:10:244::/48`).
pub(super) fn v6_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V4(v4) => {
            let prefix = 16 + 16 * v4.prefix_len().div_ceil(8);
            IpNet::new(v6_ip(IpAddr::V4(v4.network())), prefix).expect("a valid prefix").trunc()
        }
        v6 => v6,
    }
}

/// The same cluster with every address moved to IPv6.
pub(super) fn v6(c: &Cluster) -> Cluster {
    let mut c = c.clone();
    c.pod_cidr = v6_net(c.pod_cidr);
    c.service_cidr = v6_net(c.service_cidr);
    c.node_network = v6_net(c.node_network);
    for n in &mut c.nodes {
        n.ips = n.ips.map(|ip| v6_ip(*ip));
        n.secondary_ips.iter_mut().for_each(|ip| *ip = v6_ip(*ip));
        n.pod_cidrs = n.pod_cidrs.map(|c| v6_net(*c));
    }
    for h in &mut c.external_hosts {
        h.ips = h.ips.map(|ip| v6_ip(*ip));
    }
    for p in &mut c.pods {
        p.ips = p.ips.map(|ip| v6_ip(*ip));
    }
    for s in &mut c.services {
        s.cluster_ips = s.cluster_ips.map(|ip| v6_ip(*ip));
        s.external_ips.iter_mut().for_each(|ip| *ip = v6_ip(*ip));
        s.load_balancer_ips.iter_mut().for_each(|ip| *ip = v6_ip(*ip));
        s.load_balancer_source_ranges.iter_mut().for_each(|n| *n = v6_net(*n));
        for ep in s.ports.iter_mut().flat_map(|p| &mut p.endpoints) {
            ep.ip = v6_ip(ep.ip);
        }
    }
    c.proxy.node_port_addresses.iter_mut().for_each(|n| *n = v6_net(*n));
    c
}

#[test]
fn the_converter_keeps_containment() {
    assert_eq!(v6_ip("10.244.1.5".parse().unwrap()).to_string(), "fd00:10:244:11::5");
    assert_eq!(v6_ip("10.244.0.5".parse().unwrap()).to_string(), "fd00:10:244:10::5");
    assert_eq!(v6_net("10.244.0.0/24".parse().unwrap()).to_string(), "fd00:10:244:10::/64");
    assert_eq!(v6_net("10.244.0.0/16".parse().unwrap()).to_string(), "fd00:10:244::/48");
    assert_eq!(v6_net("10.96.0.0/12".parse().unwrap()).to_string(), "fd00:10:96::/48");
    let c = v6(&everything());
    assert_eq!(c.ip_family(), IpFamily::V6);
    for n in &c.nodes {
        assert!(c.pod_cidr.contains(&n.pod_cidr()) && c.node_network.contains(&n.ip()), "{n:?}");
    }
    let (v4, moved) = (everything(), v6(&everything()));
    for (s, m) in v4.services.iter().zip(&moved.services) {
        assert_eq!(v4.service_cidr.contains(&s.cluster_ip()), moved.service_cidr.contains(&m.cluster_ip()));
    }
}

/// `testHostname`'s IPv6 cluster of proxier_test.go (its fake IPv6 proxier has no local
/// detector; ours detects by cluster CIDR, `fd00:10::/64` here).
fn kp_v6_cluster(services: Vec<Service>) -> Cluster {
    Cluster {
        pod_cidr: "fd00:10::/64".parse().unwrap(),
        service_cidr: "fd00:ab34::/64".parse().unwrap(),
        node_network: "fd00:192:168::/64".parse().unwrap(),
        ..Cluster::example(services).with_nodes(&[("test-hostname", "fd00:192:168::2", "fd00:10::/80")])
    }
}

#[test]
fn localhost_node_ports_ipv6_matches_kube_proxy() {
    // TestEnableLocalhostNodePortsIPv6 and TestDisableLocalhostNodePortsIPv6 expect the same
    // rules: IPv6 never has localhost node ports, whatever the flag.
    let eps = vec![ep("ff06::c1", 80, None), ep("ff06::c2", 80, Some("test-hostname"))];
    let mut svc = service(
        "ns1",
        "svc1",
        ServiceType::NodePort,
        "fd00:ab34::20",
        vec![port("p80", Protocol::Tcp, 80, Some(30001), eps)],
    );
    svc.external_traffic_policy = TrafficPolicy::Local;
    for localhost in [true, false] {
        let mut c = kp_v6_cluster(vec![svc.clone()]);
        c.proxy.localhost_node_ports = localhost;
        let rules = node_rules(&c, "test-hostname");
        let filter: Vec<String> = rules
            .filter
            .rules
            .iter()
            .filter(|r| !["INPUT", "FORWARD", "OUTPUT"].contains(&r.chain.as_str()))
            .map(|r| r.line())
            .collect();
        assert_eq!(
            filter,
            [
                "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
                "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT",
                "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            ],
            "localhost node ports {localhost}"
        );
        // The two rules of the local-traffic detector the fixture's proxier lacks.
        let (detector, rest): (Vec<Rule>, Vec<Rule>) =
            rules.nat.rules.iter().cloned().partition(|r| r.has("fd00:10::/64"));
        assert_eq!(
            detector.iter().map(Rule::line).collect::<Vec<_>>(),
            [
                "-A KUBE-SVC-XPGD46QRK7WJZT7O ! -s fd00:10::/64 -d fd00:ab34::20/128 -p tcp -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ",
                "-A KUBE-EXT-XPGD46QRK7WJZT7O -s fd00:10::/64 -m comment --comment \"pod traffic for ns1/svc1:p80 external destinations\" -j KUBE-SVC-XPGD46QRK7WJZT7O",
            ]
        );
        let skip = ["PREROUTING", "OUTPUT", "POSTROUTING", "KUBE-MARK-MASQ", "KUBE-POSTROUTING"];
        let nat: Vec<String> =
            rest.iter().filter(|r| !skip.contains(&r.chain.as_str())).map(Rule::line).collect();
        let expected = [
            "-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns1/svc1:p80\" -m tcp --dport 30001 -j KUBE-EXT-XPGD46QRK7WJZT7O",
            "-A KUBE-SERVICES -d fd00:ab34::20/128 -p tcp -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O",
            "-A KUBE-SERVICES ! -d ::1/128 -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
            "-A KUBE-EXT-XPGD46QRK7WJZT7O -m comment --comment \"masquerade LOCAL traffic for ns1/svc1:p80 external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ",
            "-A KUBE-EXT-XPGD46QRK7WJZT7O -m comment --comment \"route LOCAL traffic for ns1/svc1:p80 external destinations\" -m addrtype --src-type LOCAL -j KUBE-SVC-XPGD46QRK7WJZT7O",
            "-A KUBE-EXT-XPGD46QRK7WJZT7O -j KUBE-SVL-XPGD46QRK7WJZT7O",
            "-A KUBE-SEP-LIGRYQQLSZN4UWQ5 -s ff06::c1/128 -m comment --comment \"ns1/svc1:p80\" -j KUBE-MARK-MASQ",
            "-A KUBE-SEP-LIGRYQQLSZN4UWQ5 -p tcp -m comment --comment \"ns1/svc1:p80\" -m tcp -j DNAT --to-destination [ff06::c1]:80",
            "-A KUBE-SEP-XJJ5QXWGJG344QDZ -s ff06::c2/128 -m comment --comment \"ns1/svc1:p80\" -j KUBE-MARK-MASQ",
            "-A KUBE-SEP-XJJ5QXWGJG344QDZ -p tcp -m comment --comment \"ns1/svc1:p80\" -m tcp -j DNAT --to-destination [ff06::c2]:80",
            "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> [ff06::c1]:80\" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-LIGRYQQLSZN4UWQ5",
            "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> [ff06::c2]:80\" -j KUBE-SEP-XJJ5QXWGJG344QDZ",
            "-A KUBE-SVL-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> [ff06::c2]:80\" -j KUBE-SEP-XJJ5QXWGJG344QDZ",
        ];
        assert_eq!(sorted_by_chain(&nat), sorted_by_chain(&expected), "localhost node ports {localhost}");
    }
}

#[test]
fn ipv6_has_the_firewall_chain_hooked_but_empty() {
    // kube-proxy ensures KUBE-FIREWALL and its INPUT/OUTPUT jumps in both families; only the
    // IPv4 proxier (and kubelet, IPv4 only) fills it with the localnet guard.
    let rules = node_rules(&v6(&cluster(vec![kube_dns()])), "node-a");
    assert!(rules.filter.has_chain("KUBE-FIREWALL"));
    assert!(lines(&rules.filter, "KUBE-FIREWALL").is_empty());
    assert_eq!(lines(&rules.filter, "INPUT").last().unwrap(), "-A INPUT -j KUBE-FIREWALL");
    assert_eq!(lines(&rules.filter, "OUTPUT").last().unwrap(), "-A OUTPUT -j KUBE-FIREWALL");
    assert!(!rules.render().contains("127.0.0.0/8"));
}

/// The IPv4 rules of `c` on `node`, moved to IPv6 line by line: every address and CIDR, host
/// masks to `/128`, the reject and `recent` mask to their IPv6 forms, and the IPv4-only
/// rules (the localnet guard, localhost node ports) as IPv6 has them.
fn expected_v6_lines(c: &Cluster, node: &str) -> Vec<String> {
    let rules = node_rules(c, node);
    let mut out = Vec::new();
    for table in rules.tables() {
        for rule in &table.rules {
            if rule.comment() == Some("block incoming localnet connections") {
                continue;
            }
            let mut rule = rule.clone();
            if rule.chain == "KUBE-SERVICES" && rule.target() == Some("KUBE-NODEPORTS") {
                if rule.has("127.0.0.1/32") {
                    continue; // ::1 is skipped
                }
                rule.args.retain(|a| a != "127.0.0.0/8");
                if rule.args.first().map(String::as_str) == Some("!") {
                    rule.args.remove(0);
                    rule.args.remove(0);
                }
                if rule.has("addrtype") {
                    rule.args.splice(0..0, args!["!", "-d", "::1/128"]);
                }
            }
            for a in &mut rule.args {
                *a = move_token(a);
            }
            out.push(rule.line());
        }
    }
    out
}

/// One argument token moved to IPv6: addresses, `addr/prefix`, `addr:port`, and the
/// IPv4-only words; comments with an `ip:port` in them too.
fn move_token(token: &str) -> String {
    match token {
        "icmp-port-unreachable" => return "icmp6-port-unreachable".into(),
        "255.255.255.255" => return "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".into(),
        _ => {}
    }
    if let Ok(net) = token.parse::<IpNet>() {
        return if net.prefix_len() == 32 {
            format!("{}/128", v6_ip(net.addr()))
        } else {
            v6_net(net).to_string()
        };
    }
    if let Ok(sa) = token.parse::<std::net::SocketAddr>() {
        return std::net::SocketAddr::new(v6_ip(sa.ip()), sa.port()).to_string();
    }
    // `name -> 10.244.0.5:53` comments name the endpoint.
    if let Some((head, ep)) = token.rsplit_once(" -> ")
        && let Ok(sa) = ep.parse::<std::net::SocketAddr>()
    {
        return format!("{head} -> {}", std::net::SocketAddr::new(v6_ip(sa.ip()), sa.port()));
    }
    token.to_string()
}

#[test]
fn every_form_is_the_ipv4_form_moved_to_ipv6() {
    // The chain hashes differ where an endpoint (`[ip]:port`) is hashed: compare with the
    // SEP names mapped.
    let mut restricted = everything();
    restricted.proxy.masquerade_all = true;
    restricted.proxy.node_port_addresses = vec![
        "192.168.50.0/24".parse().unwrap(),
        "10.244.0.0/24".parse().unwrap(),
        "127.0.0.0/8".parse().unwrap(),
    ];
    let mut no_localhost = everything();
    no_localhost.proxy.localhost_node_ports = false;
    for (what, c) in [("default", everything()), ("restricted", restricted), ("no-localhost", no_localhost)] {
        let moved = v6(&c);
        for node in ["node-a", "node-b", "node-c"] {
            let sep_names = sep_renames(&c);
            let rename = |line: &str| {
                sep_names.iter().fold(line.to_string(), |l, (from, to)| l.replace(from.as_str(), to.as_str()))
            };
            let expected: Vec<String> = expected_v6_lines(&c, node).iter().map(|l| rename(l)).collect();
            let ours: Vec<String> = node_rules(&moved, node)
                .tables()
                .iter()
                .flat_map(|t| t.rules.iter().map(Rule::line))
                .collect();
            assert_eq!(ours, expected, "{what} on {node}");
        }
    }
}

/// `KUBE-SEP-…` names of `c`'s endpoints → the names of the same endpoints in `v6(c)`.
fn sep_renames(c: &Cluster) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for svc in &c.services {
        for p in &svc.ports {
            let name = naming::service_port_name(svc, p);
            for ep in &p.endpoints {
                let moved = std::net::SocketAddr::new(v6_ip(ep.ip), ep.port);
                out.push((
                    naming::sep_chain(&name, p.protocol, ep.address()),
                    naming::sep_chain(&name, p.protocol, moved),
                ));
            }
        }
    }
    out
}

#[test]
fn ipv6_forms_in_full() {
    let c = v6(&cluster(vec![lb_service(), no_endpoints()]));
    let on_a = node_rules(&c, "node-a");
    let name = "default/lb:http";
    let sep = naming::sep_chain(name, Protocol::Tcp, "[fd00:10:244:10::5]:8080".parse().unwrap());
    assert_eq!(
        lines(&on_a.nat, &sep),
        [
            format!("-A {sep} -s fd00:10:244:10::5/128 -m comment --comment \"{name}\" -j KUBE-MARK-MASQ"),
            format!(
                "-A {sep} -p tcp -m comment --comment \"{name}\" -m recent --set --name {sep} --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource -m tcp -j DNAT --to-destination [fd00:10:244:10::5]:8080"
            ),
        ]
    );
    let no_eps = lines(&on_a.filter, "KUBE-SERVICES");
    assert!(!no_eps.is_empty());
    assert!(
        no_eps.iter().all(|l| l.ends_with("-j REJECT --reject-with icmp6-port-unreachable")),
        "{no_eps:?}"
    );
    assert_eq!(
        lines(&on_a.nat, "KUBE-SERVICES").last().unwrap(),
        &format!(
            "-A KUBE-SERVICES ! -d ::1/128 -m comment --comment {NODEPORTS_COMMENT} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
        )
    );
    // Local-traffic detection by the IPv6 cluster CIDR.
    let ext = naming::ext_chain(name, Protocol::Tcp);
    assert!(lines(&on_a.nat, &ext)[0].starts_with(&format!("-A {ext} -s fd00:10:244::/48 ")));
    // No route_localnet for IPv6.
    assert!(!crate::proxy::node_ports::localhost_node_ports(&c.proxy, IpFamily::V6));
}

#[test]
fn node_port_addresses_in_ipv6_skip_loopback_and_the_other_family() {
    let mut c = v6(&everything());
    c.proxy.node_port_addresses = vec![
        "fd00:192:168:150::/64".parse().unwrap(),
        "::1/128".parse().unwrap(),
        "192.168.50.0/24".parse().unwrap(),
    ];
    let jumps: Vec<String> = node_rules(&c, "node-a")
        .nat
        .rules_in("KUBE-SERVICES")
        .filter(|r| r.target() == Some("KUBE-NODEPORTS"))
        .map(|r| r.line())
        .collect();
    let jump = |ip: &str| {
        format!("-A KUBE-SERVICES -d {ip}/128 -m comment --comment {NODEPORTS_COMMENT} -j KUBE-NODEPORTS")
    };
    assert_eq!(jumps, [jump("fd00:192:168:150::2"), jump("fd00:192:168:150::102")]);
}

#[test]
fn every_jump_target_is_declared_in_ipv6_for_every_mutant() {
    for mutant in std::iter::once(None).chain(Mutant::ALL.map(Some)) {
        let c = v6(&everything());
        for node in ["node-a", "node-b", "node-c"] {
            let rules = node_ruleset(&c, node, mutant);
            for table in rules.tables() {
                for rule in &table.rules {
                    let target = rule.target().unwrap_or_default();
                    if target.starts_with("KUBE-") {
                        assert!(table.has_chain(target), "{mutant:?} {node}: {}", rule.line());
                    }
                }
            }
        }
    }
}
