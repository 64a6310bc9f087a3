//! Feeding rule text to a loader (`nft -f -`, `iptables-restore`) inside a node's namespace,
//! with an error that quotes the input lines the loader refused.

use anyhow::Result;

use crate::topology::NodeHandle;

/// The input lines (numbered from 1) that a loader's error message points at, in the
/// loader's own dialect.
pub type OffendingLines = for<'t> fn(&str, &'t str) -> Vec<(usize, &'t str)>;

/// Runs `program args` inside the node's namespace with `text` on stdin. An error names the
/// node and the `kind` of rules, and quotes the input lines `offending` finds in its message.
pub fn run(
    node: &NodeHandle,
    program: &str,
    args: &[&str],
    text: &str,
    kind: &str,
    offending: OffendingLines,
) -> Result<()> {
    let loaded = node.netns.exec(program, args, Some(text.as_bytes()));
    loaded.map(|_| ()).map_err(|e| {
        let shown: Vec<String> =
            offending(&format!("{e:#}"), text).iter().map(|(n, line)| format!("line {n}: {line}")).collect();
        let quoted = if shown.is_empty() { String::new() } else { format!(" (input {})", shown.join("; ")) };
        e.context(format!("loading {kind} rules on node {}{quoted}", node.name))
    })
}
