//! Loading a node's `kube-proxy` tables with `nft -f -` (one transaction: the tables are
//! replaced atomically, as kube-proxy's own transactions replace their contents) and reading
//! the node's ruleset back.

use anyhow::{Context, Result};

use crate::proxy::loader;
use crate::topology::NodeHandle;

/// Runs `text` through `nft -f -` inside the node's namespace. An error names the node and
/// quotes the input lines nft complains about.
pub fn apply(node: &NodeHandle, text: &str) -> Result<()> {
    loader::run(node, "nft", &["-f", "-"], text, "nftables", offending_lines)
}

/// The node's whole ruleset as `nft list ruleset` prints it (without coverage's trace table).
pub fn dump(node: &NodeHandle) -> Result<String> {
    let out = node
        .netns
        .exec("nft", &["list", "ruleset"], None)
        .with_context(|| format!("dumping the nftables ruleset of node {}", node.name))?;
    Ok(crate::observe::nftrace::without_trace_table(&String::from_utf8_lossy(&out.stdout)))
}

/// The input lines an nft error points at: it names each as `/dev/stdin:LINE:COLUMNS:`.
fn offending_lines<'t>(message: &str, text: &'t str) -> Vec<(usize, &'t str)> {
    let mut found: Vec<(usize, &str)> = Vec::new();
    for (at, marker) in message.match_indices("stdin:") {
        let rest = &message[at + marker.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(n) = digits.parse::<usize>() else { continue };
        if let Some(line) = n.checked_sub(1).and_then(|i| text.lines().nth(i))
            && !found.iter().any(|(m, _)| *m == n)
        {
            found.push((n, line));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_lines_nft_names() {
        let text = "add table ip t\nadd chain ip t c\nadd rule ip t c jump nope\n";
        let message = "running `nft -f -` in namespace pp-1-n: exit status: 1: /dev/stdin:3:25-28: Error: \
                       Could not process rule: No such file or directory\nadd rule ip t c jump nope\n ^^^^";
        assert_eq!(offending_lines(message, text), [(3, "add rule ip t c jump nope")]);
        assert!(offending_lines("nft: command not found", text).is_empty());
    }
}
