//! `packetproof rules`: what a built-in proxy loads on a node of a scenario.

use anyhow::{Context, Result};

use super::{EXIT_ERROR, EXIT_PASS, load_all};
use crate::proxy;

/// Prints the rules of `proxy_name` for `node` (the first node unless told).
pub fn main(file: &std::path::Path, node: Option<&str>, proxy_name: &str) -> Result<i32> {
    let Some(mut scenarios) = load_all(&[file.to_path_buf()])? else { return Ok(EXIT_ERROR) };
    let s = scenarios.remove(0);
    let node = match node {
        Some(n) => n.to_string(),
        None => s.cluster.nodes.first().context("the scenario has no nodes")?.name.clone(),
    };
    anyhow::ensure!(s.cluster.node(&node).is_some(), "no node {node:?} in {}", file.display());
    let Some(built_in) = proxy::registry::built_in(proxy_name) else {
        anyhow::bail!("no rules to print for proxy {proxy_name:?} (built-in proxies only)")
    };
    let text = (built_in.render)(&s.cluster, &node, None);
    print!("{text}");
    Ok(EXIT_PASS)
}
