//! kube-proxy's own expectations, reproduced: the services of tests in
//! kubernetes/kubernetes pkg/proxy/iptables/proxier_test.go, rebuilt in the model, must give
//! the rules those tests expect, rule for rule. Their expected text is kube-proxy's
//! `iptables-restore` input; quoted here as `iptables-save` prints it (addresses with `/32`,
//! `-s`/`-d`/`-p` first, `recent` options in the kernel's order), with the ordering inside
//! each chain kept. Same names, so the chain hashes must match too.

use super::*;
use crate::model::SessionAffinity;

/// `testHostname` and `testNodeIP` of proxier_test.go; its cluster CIDR is 10.0.0.0/8.
const HOST: &str = "test-hostname";

fn kp_cluster(services: Vec<Service>) -> Cluster {
    Cluster {
        pod_cidr: "10.0.0.0/8".parse().unwrap(),
        service_cidr: "172.30.0.0/16".parse().unwrap(),
        node_network: "192.168.0.0/24".parse().unwrap(),
        ..Cluster::example(services).with_nodes(&[(HOST, "192.168.0.2", "10.0.0.0/24")])
    }
}

/// An endpoint on `node` (`None`: no `nodeName`, which is never local).
fn kp_ep(ip: &str, node: Option<&str>) -> Endpoint {
    ep(ip, 80, node)
}

fn kp_service(
    ns: &str,
    name: &str,
    ty: ServiceType,
    cluster_ip: &str,
    port_name: &str,
    node_port: Option<u16>,
    eps: Vec<Endpoint>,
) -> Service {
    service(ns, name, ty, cluster_ip, vec![port(port_name, Protocol::Tcp, 80, node_port, eps)])
}

/// Our rules of one table outside the built-in chains and the two mark chains (whose
/// `--or-mark`/`--xor-mark` print as `--set-xmark`, checked against seed 000 instead),
/// grouped by chain with the order inside a chain kept.
fn ours(table: &Table) -> Vec<String> {
    let skip =
        ["INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING", "KUBE-MARK-MASQ", "KUBE-POSTROUTING"];
    let lines: Vec<String> =
        table.rules.iter().filter(|r| !skip.contains(&r.chain.as_str())).map(|r| r.line()).collect();
    sorted_by_chain(&lines)
}

#[test]
fn overall_rules_with_multiple_services() {
    // TestOverallIPTablesRulesWithMultipleServices.
    let mut svc2 = kp_service(
        "ns2",
        "svc2",
        ServiceType::LoadBalancer,
        "172.30.0.42",
        "p80",
        Some(3001),
        vec![kp_ep("10.180.0.2", None)],
    );
    svc2.external_traffic_policy = TrafficPolicy::Local;
    svc2.load_balancer_ips = vec!["1.2.3.4".parse().unwrap()];
    svc2.external_ips = vec!["192.168.99.22".parse().unwrap()];
    svc2.health_check_node_port = Some(30000);
    let mut svc4 = kp_service(
        "ns4",
        "svc4",
        ServiceType::NodePort,
        "172.30.0.44",
        "p80",
        None,
        vec![kp_ep("10.180.0.4", None), kp_ep("10.180.0.5", Some(HOST))],
    );
    svc4.external_ips = vec!["192.168.99.33".parse().unwrap()];
    let mut svc5 = kp_service(
        "ns5",
        "svc5",
        ServiceType::LoadBalancer,
        "172.30.0.45",
        "p80",
        Some(3002),
        vec![kp_ep("10.180.0.3", None)],
    );
    svc5.load_balancer_ips = vec!["5.6.7.8".parse().unwrap()];
    // Cluster policy: the health check node port is ignored.
    svc5.health_check_node_port = Some(30000);
    svc5.load_balancer_source_ranges = vec!["203.0.113.0/25".parse().unwrap()];
    let c = kp_cluster(vec![
        kp_service(
            "ns1",
            "svc1",
            ServiceType::ClusterIp,
            "172.30.0.41",
            "p80",
            None,
            vec![kp_ep("10.180.0.1", None)],
        ),
        svc2,
        kp_service(
            "ns3",
            "svc3",
            ServiceType::NodePort,
            "172.30.0.43",
            "p80",
            Some(3003),
            vec![kp_ep("10.180.0.3", None)],
        ),
        svc4,
        svc5,
        kp_service("ns6", "svc6", ServiceType::ClusterIp, "172.30.0.46", "p80", None, vec![]),
    ]);
    let rules = node_rules(&c, HOST);
    let filter = [
        "-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns2/svc2:p80 health check node port\" -m tcp --dport 30000 -j ACCEPT",
        "-A KUBE-SERVICES -d 172.30.0.46/32 -p tcp -m comment --comment \"ns6/svc6:p80 has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable",
        "-A KUBE-EXTERNAL-SERVICES -d 192.168.99.22/32 -p tcp -m comment --comment \"ns2/svc2:p80 has no local endpoints\" -m tcp --dport 80 -j DROP",
        "-A KUBE-EXTERNAL-SERVICES -d 1.2.3.4/32 -p tcp -m comment --comment \"ns2/svc2:p80 has no local endpoints\" -m tcp --dport 80 -j DROP",
        "-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"ns2/svc2:p80 has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 3001 -j DROP",
        "-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP",
        "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
        "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT",
        "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        "-A KUBE-PROXY-FIREWALL -d 5.6.7.8/32 -p tcp -m comment --comment \"ns5/svc5:p80 traffic not accepted by KUBE-FW-NUKIZ6OKUXPJNT4C\" -m tcp --dport 80 -j DROP",
    ];
    assert_eq!(ours(&rules.filter), sorted_by_chain(&filter));
    let nat = [
        "-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns2/svc2:p80\" -m tcp --dport 3001 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT",
        "-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns3/svc3:p80\" -m tcp --dport 3003 -j KUBE-EXT-X27LE4BHSL4DOUIK",
        "-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns5/svc5:p80\" -m tcp --dport 3002 -j KUBE-EXT-NUKIZ6OKUXPJNT4C",
        "-A KUBE-SERVICES -d 172.30.0.41/32 -p tcp -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O",
        "-A KUBE-SERVICES -d 172.30.0.42/32 -p tcp -m comment --comment \"ns2/svc2:p80 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT",
        "-A KUBE-SERVICES -d 192.168.99.22/32 -p tcp -m comment --comment \"ns2/svc2:p80 external IP\" -m tcp --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT",
        "-A KUBE-SERVICES -d 1.2.3.4/32 -p tcp -m comment --comment \"ns2/svc2:p80 loadbalancer IP\" -m tcp --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT",
        "-A KUBE-SERVICES -d 172.30.0.43/32 -p tcp -m comment --comment \"ns3/svc3:p80 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK",
        "-A KUBE-SERVICES -d 172.30.0.44/32 -p tcp -m comment --comment \"ns4/svc4:p80 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK",
        "-A KUBE-SERVICES -d 192.168.99.33/32 -p tcp -m comment --comment \"ns4/svc4:p80 external IP\" -m tcp --dport 80 -j KUBE-EXT-4SW47YFZTEDKD3PK",
        "-A KUBE-SERVICES -d 172.30.0.45/32 -p tcp -m comment --comment \"ns5/svc5:p80 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-NUKIZ6OKUXPJNT4C",
        "-A KUBE-SERVICES -d 5.6.7.8/32 -p tcp -m comment --comment \"ns5/svc5:p80 loadbalancer IP\" -m tcp --dport 80 -j KUBE-FW-NUKIZ6OKUXPJNT4C",
        "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
        "-A KUBE-EXT-4SW47YFZTEDKD3PK -m comment --comment \"masquerade traffic for ns4/svc4:p80 external destinations\" -j KUBE-MARK-MASQ",
        "-A KUBE-EXT-4SW47YFZTEDKD3PK -j KUBE-SVC-4SW47YFZTEDKD3PK",
        "-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -s 10.0.0.0/8 -m comment --comment \"pod traffic for ns2/svc2:p80 external destinations\" -j KUBE-SVC-GNZBNJ2PO5MGZ6GT",
        "-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment \"masquerade LOCAL traffic for ns2/svc2:p80 external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ",
        "-A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment \"route LOCAL traffic for ns2/svc2:p80 external destinations\" -m addrtype --src-type LOCAL -j KUBE-SVC-GNZBNJ2PO5MGZ6GT",
        "-A KUBE-EXT-NUKIZ6OKUXPJNT4C -m comment --comment \"masquerade traffic for ns5/svc5:p80 external destinations\" -j KUBE-MARK-MASQ",
        "-A KUBE-EXT-NUKIZ6OKUXPJNT4C -j KUBE-SVC-NUKIZ6OKUXPJNT4C",
        "-A KUBE-EXT-X27LE4BHSL4DOUIK -m comment --comment \"masquerade traffic for ns3/svc3:p80 external destinations\" -j KUBE-MARK-MASQ",
        "-A KUBE-EXT-X27LE4BHSL4DOUIK -j KUBE-SVC-X27LE4BHSL4DOUIK",
        "-A KUBE-FW-NUKIZ6OKUXPJNT4C -s 203.0.113.0/25 -m comment --comment \"ns5/svc5:p80 loadbalancer IP\" -j KUBE-EXT-NUKIZ6OKUXPJNT4C",
        "-A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment \"other traffic to ns5/svc5:p80 will be dropped by KUBE-PROXY-FIREWALL\"",
        "-A KUBE-SEP-C6EBXVWJJZMIWKLZ -s 10.180.0.5/32 -m comment --comment \"ns4/svc4:p80\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-C6EBXVWJJZMIWKLZ -p tcp -m comment --comment \"ns4/svc4:p80\" -m tcp -j DNAT --to-destination 10.180.0.5:80",
        "-A KUBE-SEP-I77PXRDZVX7PMWMN -s 10.180.0.3/32 -m comment --comment \"ns5/svc5:p80\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-I77PXRDZVX7PMWMN -p tcp -m comment --comment \"ns5/svc5:p80\" -m tcp -j DNAT --to-destination 10.180.0.3:80",
        "-A KUBE-SEP-OYPFS5VJICHGATKP -s 10.180.0.3/32 -m comment --comment \"ns3/svc3:p80\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-OYPFS5VJICHGATKP -p tcp -m comment --comment \"ns3/svc3:p80\" -m tcp -j DNAT --to-destination 10.180.0.3:80",
        "-A KUBE-SEP-RS4RBKLTHTF2IUXJ -s 10.180.0.2/32 -m comment --comment \"ns2/svc2:p80\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-RS4RBKLTHTF2IUXJ -p tcp -m comment --comment \"ns2/svc2:p80\" -m tcp -j DNAT --to-destination 10.180.0.2:80",
        "-A KUBE-SEP-SXIVWICOYRO3J4NJ -s 10.180.0.1/32 -m comment --comment \"ns1/svc1:p80\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-SXIVWICOYRO3J4NJ -p tcp -m comment --comment \"ns1/svc1:p80\" -m tcp -j DNAT --to-destination 10.180.0.1:80",
        "-A KUBE-SEP-UKSFD7AGPMPPLUHC -s 10.180.0.4/32 -m comment --comment \"ns4/svc4:p80\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-UKSFD7AGPMPPLUHC -p tcp -m comment --comment \"ns4/svc4:p80\" -m tcp -j DNAT --to-destination 10.180.0.4:80",
        "-A KUBE-SVC-4SW47YFZTEDKD3PK ! -s 10.0.0.0/8 -d 172.30.0.44/32 -p tcp -m comment --comment \"ns4/svc4:p80 cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ",
        "-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment \"ns4/svc4:p80 -> 10.180.0.4:80\" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-UKSFD7AGPMPPLUHC",
        "-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment \"ns4/svc4:p80 -> 10.180.0.5:80\" -j KUBE-SEP-C6EBXVWJJZMIWKLZ",
        "-A KUBE-SVC-GNZBNJ2PO5MGZ6GT ! -s 10.0.0.0/8 -d 172.30.0.42/32 -p tcp -m comment --comment \"ns2/svc2:p80 cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ",
        "-A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment \"ns2/svc2:p80 -> 10.180.0.2:80\" -j KUBE-SEP-RS4RBKLTHTF2IUXJ",
        "-A KUBE-SVC-NUKIZ6OKUXPJNT4C ! -s 10.0.0.0/8 -d 172.30.0.45/32 -p tcp -m comment --comment \"ns5/svc5:p80 cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ",
        "-A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment \"ns5/svc5:p80 -> 10.180.0.3:80\" -j KUBE-SEP-I77PXRDZVX7PMWMN",
        "-A KUBE-SVC-X27LE4BHSL4DOUIK ! -s 10.0.0.0/8 -d 172.30.0.43/32 -p tcp -m comment --comment \"ns3/svc3:p80 cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ",
        "-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment \"ns3/svc3:p80 -> 10.180.0.3:80\" -j KUBE-SEP-OYPFS5VJICHGATKP",
        "-A KUBE-SVC-XPGD46QRK7WJZT7O ! -s 10.0.0.0/8 -d 172.30.0.41/32 -p tcp -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ",
        "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.1:80\" -j KUBE-SEP-SXIVWICOYRO3J4NJ",
    ];
    assert_eq!(ours(&rules.nat), sorted_by_chain(&nat));
}

fn source_ranges_lb() -> Service {
    // TestLoadBalancer: two LB IPs, source ranges of which one holds the node's IP.
    let mut svc = kp_service(
        "ns1",
        "svc1",
        ServiceType::LoadBalancer,
        "172.30.0.41",
        "p80",
        Some(3001),
        vec![kp_ep("10.180.0.1", None)],
    );
    svc.load_balancer_ips = vec!["1.2.3.4".parse().unwrap(), "5.6.7.8".parse().unwrap()];
    svc.load_balancer_source_ranges =
        vec!["192.168.0.0/24".parse().unwrap(), "203.0.113.0/25".parse().unwrap()];
    svc
}

#[test]
fn load_balancer_with_source_ranges() {
    let rules = node_rules(&kp_cluster(vec![source_ranges_lb()]), HOST);
    let filter: Vec<String> =
        ours(&rules.filter).into_iter().filter(|l| l.starts_with("-A KUBE-PROXY-FIREWALL ")).collect();
    assert_eq!(
        filter,
        [
            "-A KUBE-PROXY-FIREWALL -d 1.2.3.4/32 -p tcp -m comment --comment \"ns1/svc1:p80 traffic not accepted by KUBE-FW-XPGD46QRK7WJZT7O\" -m tcp --dport 80 -j DROP",
            "-A KUBE-PROXY-FIREWALL -d 5.6.7.8/32 -p tcp -m comment --comment \"ns1/svc1:p80 traffic not accepted by KUBE-FW-XPGD46QRK7WJZT7O\" -m tcp --dport 80 -j DROP",
        ]
    );
    let nat = [
        "-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns1/svc1:p80\" -m tcp --dport 3001 -j KUBE-EXT-XPGD46QRK7WJZT7O",
        "-A KUBE-SERVICES -d 172.30.0.41/32 -p tcp -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O",
        "-A KUBE-SERVICES -d 1.2.3.4/32 -p tcp -m comment --comment \"ns1/svc1:p80 loadbalancer IP\" -m tcp --dport 80 -j KUBE-FW-XPGD46QRK7WJZT7O",
        "-A KUBE-SERVICES -d 5.6.7.8/32 -p tcp -m comment --comment \"ns1/svc1:p80 loadbalancer IP\" -m tcp --dport 80 -j KUBE-FW-XPGD46QRK7WJZT7O",
        "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
        "-A KUBE-EXT-XPGD46QRK7WJZT7O -m comment --comment \"masquerade traffic for ns1/svc1:p80 external destinations\" -j KUBE-MARK-MASQ",
        "-A KUBE-EXT-XPGD46QRK7WJZT7O -j KUBE-SVC-XPGD46QRK7WJZT7O",
        "-A KUBE-FW-XPGD46QRK7WJZT7O -s 192.168.0.0/24 -m comment --comment \"ns1/svc1:p80 loadbalancer IP\" -j KUBE-EXT-XPGD46QRK7WJZT7O",
        "-A KUBE-FW-XPGD46QRK7WJZT7O -s 203.0.113.0/25 -m comment --comment \"ns1/svc1:p80 loadbalancer IP\" -j KUBE-EXT-XPGD46QRK7WJZT7O",
        // The node's IP is in a range: a node reaching a VIP bound locally sends from the VIP.
        "-A KUBE-FW-XPGD46QRK7WJZT7O -s 1.2.3.4/32 -m comment --comment \"ns1/svc1:p80 loadbalancer IP\" -j KUBE-EXT-XPGD46QRK7WJZT7O",
        "-A KUBE-FW-XPGD46QRK7WJZT7O -s 5.6.7.8/32 -m comment --comment \"ns1/svc1:p80 loadbalancer IP\" -j KUBE-EXT-XPGD46QRK7WJZT7O",
        "-A KUBE-FW-XPGD46QRK7WJZT7O -m comment --comment \"other traffic to ns1/svc1:p80 will be dropped by KUBE-PROXY-FIREWALL\"",
        "-A KUBE-SEP-SXIVWICOYRO3J4NJ -s 10.180.0.1/32 -m comment --comment \"ns1/svc1:p80\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-SXIVWICOYRO3J4NJ -p tcp -m comment --comment \"ns1/svc1:p80\" -m tcp -j DNAT --to-destination 10.180.0.1:80",
        "-A KUBE-SVC-XPGD46QRK7WJZT7O ! -s 10.0.0.0/8 -d 172.30.0.41/32 -p tcp -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ",
        "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.1:80\" -j KUBE-SEP-SXIVWICOYRO3J4NJ",
    ];
    assert_eq!(ours(&rules.nat), sorted_by_chain(&nat));
}

#[test]
fn source_ranges_without_the_node_ip_do_not_admit_the_vips() {
    // Pods are never admitted either: their sources are pod IPs, outside the ranges
    // ("pod to LB1 (blocked by LoadBalancerSourceRanges)" in TestLoadBalancer).
    let mut svc = source_ranges_lb();
    svc.load_balancer_source_ranges = vec!["203.0.113.0/25".parse().unwrap()];
    let rules = node_rules(&kp_cluster(vec![svc]), HOST);
    let fw: Vec<String> = lines(&rules.nat, "KUBE-FW-XPGD46QRK7WJZT7O");
    assert_eq!(fw.len(), 2, "{fw:?}");
    assert!(fw[0].contains("-s 203.0.113.0/25 "));
    // On a node the model does not know there is no node IP to compare.
    let elsewhere = node_rules(&kp_cluster(vec![source_ranges_lb()]), "other-host");
    assert_eq!(lines(&elsewhere.nat, "KUBE-FW-XPGD46QRK7WJZT7O").len(), 3);
}

#[test]
fn health_check_node_port_with_localhost_node_port_addresses() {
    // TestHealthCheckNodePort: no endpoints, `--nodeport-addresses 127.0.0.0/8`.
    let mut svc =
        kp_service("ns1", "svc1", ServiceType::LoadBalancer, "172.30.0.42", "p80", Some(3001), vec![]);
    svc.health_check_node_port = Some(30000);
    svc.external_traffic_policy = TrafficPolicy::Local;
    let mut c = kp_cluster(vec![svc]);
    c.proxy.node_port_addresses = vec!["127.0.0.0/8".parse().unwrap()];
    let rules = node_rules(&c, HOST);
    let filter = [
        "-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns1/svc1:p80 health check node port\" -m tcp --dport 30000 -j ACCEPT",
        "-A KUBE-SERVICES -d 172.30.0.42/32 -p tcp -m comment --comment \"ns1/svc1:p80 has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable",
        "-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"ns1/svc1:p80 has no endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 3001 -j REJECT --reject-with icmp-port-unreachable",
    ];
    let ours_filter: Vec<String> = ours(&rules.filter)
        .into_iter()
        .filter(|l| !l.starts_with("-A KUBE-FIREWALL ") && !l.starts_with("-A KUBE-FORWARD "))
        .collect();
    assert_eq!(ours_filter, sorted_by_chain(&filter));
    assert_eq!(
        ours(&rules.nat),
        [
            "-A KUBE-SERVICES -d 127.0.0.1/32 -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -j KUBE-NODEPORTS"
        ]
    );
}

/// TestTerminatingEndpointsTrafficPolicyLocal's Service: LoadBalancer, external policy Local,
/// ClientIP affinity with the default timeout, health check node port, no node port.
fn terminating_local(endpoints: Vec<Endpoint>) -> Service {
    let mut svc = kp_service("ns1", "svc1", ServiceType::LoadBalancer, "172.30.1.1", "", None, endpoints);
    svc.external_traffic_policy = TrafficPolicy::Local;
    svc.load_balancer_ips = vec!["1.2.3.4".parse().unwrap()];
    svc.health_check_node_port = Some(30000);
    svc.session_affinity = SessionAffinity::ClientIp { timeout_seconds: 10800 };
    svc
}

fn conditions(ip: &str, node: &str, ready: bool, serving: bool, terminating: bool) -> Endpoint {
    Endpoint { ready, serving, terminating, ..kp_ep(ip, Some(node)) }
}

#[test]
fn affinity_and_local_policy_with_ready_endpoints() {
    // "ready endpoints exist": the local ready ones, not the terminating ones.
    let svc = terminating_local(vec![
        conditions("10.0.1.1", HOST, true, true, false),
        conditions("10.0.1.2", HOST, true, true, false),
        conditions("10.0.1.3", HOST, false, true, true),
        conditions("10.0.1.4", HOST, false, false, true),
        conditions("10.0.1.5", "host-1", true, true, false),
    ]);
    let rules = node_rules(&kp_cluster(vec![svc]), HOST);
    assert_eq!(
        ours(&rules.filter).into_iter().filter(|l| l.starts_with("-A KUBE-NODEPORTS ")).collect::<Vec<_>>(),
        [
            "-A KUBE-NODEPORTS -p tcp -m comment --comment \"ns1/svc1 health check node port\" -m tcp --dport 30000 -j ACCEPT"
        ]
    );
    let nat = [
        "-A KUBE-SERVICES -d 172.30.1.1/32 -p tcp -m comment --comment \"ns1/svc1 cluster IP\" -m tcp --dport 80 -j KUBE-SVC-AQI2S6QIMU7PVVRP",
        "-A KUBE-SERVICES -d 1.2.3.4/32 -p tcp -m comment --comment \"ns1/svc1 loadbalancer IP\" -m tcp --dport 80 -j KUBE-EXT-AQI2S6QIMU7PVVRP",
        "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
        "-A KUBE-EXT-AQI2S6QIMU7PVVRP -s 10.0.0.0/8 -m comment --comment \"pod traffic for ns1/svc1 external destinations\" -j KUBE-SVC-AQI2S6QIMU7PVVRP",
        "-A KUBE-EXT-AQI2S6QIMU7PVVRP -m comment --comment \"masquerade LOCAL traffic for ns1/svc1 external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ",
        "-A KUBE-EXT-AQI2S6QIMU7PVVRP -m comment --comment \"route LOCAL traffic for ns1/svc1 external destinations\" -m addrtype --src-type LOCAL -j KUBE-SVC-AQI2S6QIMU7PVVRP",
        "-A KUBE-EXT-AQI2S6QIMU7PVVRP -j KUBE-SVL-AQI2S6QIMU7PVVRP",
        "-A KUBE-SEP-3JOIVZTXZZRGORX4 -s 10.0.1.1/32 -m comment --comment \"ns1/svc1\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-3JOIVZTXZZRGORX4 -p tcp -m comment --comment \"ns1/svc1\" -m recent --set --name KUBE-SEP-3JOIVZTXZZRGORX4 --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 10.0.1.1:80",
        "-A KUBE-SEP-EQCHZ7S2PJ72OHAY -s 10.0.1.5/32 -m comment --comment \"ns1/svc1\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-EQCHZ7S2PJ72OHAY -p tcp -m comment --comment \"ns1/svc1\" -m recent --set --name KUBE-SEP-EQCHZ7S2PJ72OHAY --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 10.0.1.5:80",
        "-A KUBE-SEP-IO5XOSKPAXIFQXAJ -s 10.0.1.2/32 -m comment --comment \"ns1/svc1\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-IO5XOSKPAXIFQXAJ -p tcp -m comment --comment \"ns1/svc1\" -m recent --set --name KUBE-SEP-IO5XOSKPAXIFQXAJ --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 10.0.1.2:80",
        "-A KUBE-SVC-AQI2S6QIMU7PVVRP ! -s 10.0.0.0/8 -d 172.30.1.1/32 -p tcp -m comment --comment \"ns1/svc1 cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ",
        "-A KUBE-SVC-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.1:80\" -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-3JOIVZTXZZRGORX4 --mask 255.255.255.255 --rsource -j KUBE-SEP-3JOIVZTXZZRGORX4",
        "-A KUBE-SVC-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.2:80\" -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-IO5XOSKPAXIFQXAJ --mask 255.255.255.255 --rsource -j KUBE-SEP-IO5XOSKPAXIFQXAJ",
        "-A KUBE-SVC-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.5:80\" -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-EQCHZ7S2PJ72OHAY --mask 255.255.255.255 --rsource -j KUBE-SEP-EQCHZ7S2PJ72OHAY",
        "-A KUBE-SVC-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.1:80\" -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-3JOIVZTXZZRGORX4",
        "-A KUBE-SVC-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.2:80\" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-IO5XOSKPAXIFQXAJ",
        "-A KUBE-SVC-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.5:80\" -j KUBE-SEP-EQCHZ7S2PJ72OHAY",
        "-A KUBE-SVL-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.1:80\" -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-3JOIVZTXZZRGORX4 --mask 255.255.255.255 --rsource -j KUBE-SEP-3JOIVZTXZZRGORX4",
        "-A KUBE-SVL-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.2:80\" -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-IO5XOSKPAXIFQXAJ --mask 255.255.255.255 --rsource -j KUBE-SEP-IO5XOSKPAXIFQXAJ",
        "-A KUBE-SVL-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.1:80\" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-3JOIVZTXZZRGORX4",
        "-A KUBE-SVL-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.2:80\" -j KUBE-SEP-IO5XOSKPAXIFQXAJ",
    ];
    assert_eq!(ours(&rules.nat), sorted_by_chain(&nat));
}

#[test]
fn local_policy_falls_back_to_local_terminating_endpoints() {
    // "only terminating endpoints exist": the local set falls back to its serving-terminating
    // endpoints while the Cluster set keeps the remote ready one.
    let svc = terminating_local(vec![
        conditions("10.0.1.2", HOST, false, true, true),
        conditions("10.0.1.3", HOST, false, true, true),
        conditions("10.0.1.4", HOST, false, false, true),
        conditions("10.0.1.5", "host-1", true, true, false),
    ]);
    let rules = node_rules(&kp_cluster(vec![svc]), HOST);
    assert_eq!(
        lines(&rules.nat, "KUBE-SVC-AQI2S6QIMU7PVVRP")[1..],
        [
            "-A KUBE-SVC-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.5:80\" -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-EQCHZ7S2PJ72OHAY --mask 255.255.255.255 --rsource -j KUBE-SEP-EQCHZ7S2PJ72OHAY",
            "-A KUBE-SVC-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.5:80\" -j KUBE-SEP-EQCHZ7S2PJ72OHAY",
        ]
    );
    assert_eq!(
        lines(&rules.nat, "KUBE-SVL-AQI2S6QIMU7PVVRP"),
        [
            "-A KUBE-SVL-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.2:80\" -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-IO5XOSKPAXIFQXAJ --mask 255.255.255.255 --rsource -j KUBE-SEP-IO5XOSKPAXIFQXAJ",
            "-A KUBE-SVL-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.3:80\" -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-XGJFVO3L2O5SRFNT --mask 255.255.255.255 --rsource -j KUBE-SEP-XGJFVO3L2O5SRFNT",
            "-A KUBE-SVL-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.2:80\" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-IO5XOSKPAXIFQXAJ",
            "-A KUBE-SVL-AQI2S6QIMU7PVVRP -m comment --comment \"ns1/svc1 -> 10.0.1.3:80\" -j KUBE-SEP-XGJFVO3L2O5SRFNT",
        ]
    );
    let mut seps: Vec<&str> =
        rules.nat.chains.iter().map(|c| c.name.as_str()).filter(|c| c.starts_with("KUBE-SEP-")).collect();
    seps.sort();
    assert_eq!(seps, ["KUBE-SEP-EQCHZ7S2PJ72OHAY", "KUBE-SEP-IO5XOSKPAXIFQXAJ", "KUBE-SEP-XGJFVO3L2O5SRFNT"]);
}
