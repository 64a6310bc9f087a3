//! In the kernel (root only): the tables of every scenario cluster, and of every mutant, load
//! into a namespace through the real `Proxy` methods and read back (`nft -j list table`) with
//! the chains, hooks, rules, sets, maps and elements that were written.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::proxy::test_support::{Scratch, privileged, runtime};
use crate::topology::{Netns, NodeHandle};

/// What a table holds, as comparable lines: each chain with its hook, rule count and rule
/// comments; each set or map with its timeout and element count.
type Summary = BTreeMap<String, String>;

fn summary_of(rules: &RuleSet) -> Summary {
    let mut out = Summary::new();
    for chain in &rules.chains {
        let hook =
            chain.hook.as_ref().map(|h| format!("{} {} {}", h.kind, h.hook, h.priority)).unwrap_or_default();
        let in_chain: Vec<_> = rules.rules_in(&chain.name).collect();
        let comments: Vec<&str> = in_chain.iter().filter_map(|r| r.comment.as_deref()).collect();
        out.insert(format!("chain {}", chain.name), format!("{hook}|{} rules|{comments:?}", in_chain.len()));
    }
    for set in &rules.sets {
        let kind = if set.map { "map" } else { "set" };
        let n = rules.elements_of(&set.name).count();
        out.insert(format!("{kind} {}", set.name), format!("timeout {:?}|{n} elements", set.timeout));
    }
    out
}

/// The same summary of what the kernel holds, from `nft -j list table`.
fn summary_in_kernel(ns: &Netns, family: IpFamily) -> Summary {
    let fam = ruleset::nft_family(family);
    let out = ns.exec("nft", &["-j", "list", "table", fam, ruleset::TABLE], None).expect("listing the table");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("nft -j prints JSON");
    let objects = json["nftables"].as_array().expect("an nftables array");
    let mut rules: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    for rule in objects.iter().filter_map(|o| o.get("rule")) {
        let chain = rule["chain"].as_str().unwrap().to_string();
        rules.entry(chain).or_default().push(rule.get("comment").and_then(|c| c.as_str()).map(String::from));
    }
    let mut out = Summary::new();
    for o in objects {
        if let Some(chain) = o.get("chain") {
            let name = chain["name"].as_str().unwrap();
            let hook = match chain.get("hook") {
                Some(h) => {
                    format!("{} {} {}", chain["type"].as_str().unwrap(), h.as_str().unwrap(), chain["prio"])
                }
                None => String::new(),
            };
            let in_chain = rules.get(name).cloned().unwrap_or_default();
            let comments: Vec<&str> = in_chain.iter().filter_map(|c| c.as_deref()).collect();
            out.insert(format!("chain {name}"), format!("{hook}|{} rules|{comments:?}", in_chain.len()));
        }
        for kind in ["set", "map"] {
            if let Some(set) = o.get(kind) {
                let n = set.get("elem").and_then(|e| e.as_array()).map_or(0, Vec::len);
                let timeout = set.get("timeout").and_then(|t| t.as_u64());
                out.insert(
                    format!("{kind} {}", set["name"].as_str().unwrap()),
                    format!("timeout {timeout:?}|{n} elements"),
                );
            }
        }
    }
    out
}

/// Programs `node` of `cluster` into the scratch namespace and checks every table read back.
fn program_and_compare(
    scratch: &Netns,
    cluster: &Cluster,
    node: &str,
    mutant: Option<Mutant>,
    layout: Layout,
    what: &str,
) {
    let handle = NodeHandle { name: node.to_string(), netns: scratch.clone() };
    let proxy = BuiltinNftables { mutant, layout };
    let what = format!("{what} ({layout:?})");
    let mut state = crate::proxy::NodeState::default();
    proxy.program_node(cluster, &handle, &mut state).unwrap_or_else(|e| panic!("{what}: {e:#}"));
    for rules in node_rulesets_in(cluster, node, mutant, layout) {
        assert_eq!(summary_in_kernel(scratch, rules.family), summary_of(&rules), "{what}");
    }
    let dump = proxy.dump_node(&handle, &state).unwrap();
    assert!(dump.contains("table ip") && dump.contains("kube-proxy"), "{what}: {dump}");
}

#[test]
fn every_scenario_cluster_loads_and_reads_back() {
    if !privileged() {
        return;
    }
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let files = packetproof::scenario::discover(&[suite]).expect("listing scenarios/");
    assert!(files.len() > 10, "the suite is there");
    let scratch = Scratch::new("nft-scenarios");
    let runtime = runtime();
    let _in_runtime = runtime.enter();
    for file in files {
        let s = packetproof::admission::load(&file).unwrap_or_else(|e| panic!("{e}"));
        for node in &s.cluster.nodes {
            // Health check servers bind the node's addresses (nftables mode's default
            // `--nodeport-addresses` is the node's primary IPs).
            for ip in node.ips.copied() {
                scratch.add_host_address(ip);
            }
            let what = format!("{} on {}", s.name, node.name);
            for layout in [Layout::V1_31, Layout::V1_34] {
                program_and_compare(&scratch.0, &s.cluster, &node.name, None, layout, &what);
            }
        }
    }
    // No localhost node ports in nftables mode: route_localnet stays off.
    assert_eq!(scratch.route_localnet(), "0");
}

#[test]
fn every_mutant_loads_and_reads_back_in_both_families() {
    if !privileged() {
        return;
    }
    // Health check servers bind the node's addresses.
    let scratch = Scratch::new("nft-mutants").with_host_addresses(&[
        "192.168.50.2",
        "192.168.50.3",
        "fd00:192:168:50::2",
        "fd00:192:168:50::3",
    ]);
    let runtime = runtime();
    let _in_runtime = runtime.enter();
    for mutant in std::iter::once(None).chain(Mutant::ALL.map(Some)) {
        for node in ["node-a", "node-b"] {
            // Each load replaces the tables the previous one left (of its families).
            for layout in [Layout::V1_31, Layout::V1_34] {
                let what = format!("{mutant:?} on {node}");
                program_and_compare(&scratch.0, &everything(), node, mutant, layout, &what);
                program_and_compare(
                    &scratch.0,
                    &dual_stack(),
                    node,
                    mutant,
                    layout,
                    &format!("{what}, dual"),
                );
            }
        }
    }
}

#[test]
fn load_errors_name_the_node_and_the_line() {
    if !privileged() {
        return;
    }
    let scratch = Scratch::new("nft-bad-input");
    let node = NodeHandle { name: "node-x".to_string(), netns: scratch.0.clone() };
    let mut rules = node_rules(&everything(), "node-a");
    rules.rule(generate::SERVICES, "jump no-such-chain");
    let err = format!("{:#}", load::apply(&node, &rules.render_replacing()).unwrap_err());
    assert!(err.contains("node node-x"), "{err}");
    assert!(err.contains(": add rule ip kube-proxy services jump no-such-chain"), "{err}");
}
