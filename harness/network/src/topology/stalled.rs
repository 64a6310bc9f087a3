//! What the kernel's blocked tasks wait on, for an error that says the kernel did not act.
//!
//! A link set up with its carrier on becomes operationally up only when the kernel's
//! link-watch work runs, and that work takes the RTNL lock (net/core/link_watch.c,
//! `linkwatch_event`); addrconf's work, which ends an address's tentative state, takes it
//! too. When every scenario building at once waits many seconds for both, some task holds
//! that lock or keeps the workers from running. Its name and kernel stack, read from `/proc`,
//! are the evidence that the machine stalled (and of what), rather than that the harness made
//! a link wrongly.

use std::fs;

/// At most this many tasks are named: enough to show the holder and its queue.
const MOST_TASKS: usize = 12;

/// At most this many frames of each task's kernel stack: the lock or wait is near the top.
const MOST_FRAMES: usize = 6;

/// Every task of the machine in uninterruptible sleep (state `D`) with the top of its kernel
/// stack, one per line, as `kworker/u8:2 (1234): rtnl_lock < linkwatch_event < ...`; `None`
/// when no task is blocked, or `/proc` does not show them.
pub(super) fn blocked_tasks() -> Option<String> {
    let mut lines = Vec::new();
    for process in numbered_entries("/proc") {
        for task in numbered_entries(&format!("/proc/{process}/task")) {
            let dir = format!("/proc/{process}/task/{task}");
            let Ok(stat) = fs::read_to_string(format!("{dir}/stat")) else { continue };
            let Some((name, state, _)) = crate::containment::parse_stat(&stat) else { continue };
            if state != 'D' {
                continue;
            }
            let stack = fs::read_to_string(format!("{dir}/stack")).unwrap_or_default();
            lines.push(format!("{name} ({task}): {}", top_frames(&stack)));
            if lines.len() == MOST_TASKS {
                return Some(lines.join("; "));
            }
        }
    }
    (!lines.is_empty()).then(|| lines.join("; "))
}

fn numbered_entries(dir: &str) -> Vec<u32> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// `[<0>] rtnl_lock+0x15/0x20` lines as `rtnl_lock < linkwatch_event < ...`, innermost first.
fn top_frames(stack: &str) -> String {
    let frames: Vec<&str> = stack
        .lines()
        .filter_map(|line| {
            let symbol = line.split_once("] ").map_or(line, |(_, s)| s);
            let symbol = symbol.split('+').next()?.trim();
            (!symbol.is_empty()).then_some(symbol)
        })
        .take(MOST_FRAMES)
        .collect();
    if frames.is_empty() { "(stack not readable)".to_string() } else { frames.join(" < ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_lose_their_offsets_and_keep_their_order() {
        let stack =
            "[<0>] rtnl_lock+0x15/0x20\n[<0>] linkwatch_event+0xe/0x30\n[<0>] worker_thread+0x1/0x2\n";
        assert_eq!(top_frames(stack), "rtnl_lock < linkwatch_event < worker_thread");
        assert_eq!(top_frames(""), "(stack not readable)");
    }
}
