//! `packetproof cleanup`: what earlier runs left behind, removed.

use anyhow::Result;

use super::{EXIT_ERROR, EXIT_PASS, remove_leftovers};

/// Exit 2 when some journal of additions to existing nodes could not be undone (it stays).
pub fn main(all: bool) -> Result<i32> {
    let found = remove_leftovers(all)?;
    for what in &found.removed {
        println!("removed {what}");
    }
    println!("{} leftovers removed", found.removed.len());
    for why in &found.not_undone {
        eprintln!("packetproof: not taken back (its journal stays): {why}");
    }
    Ok(if found.not_undone.is_empty() { EXIT_PASS } else { EXIT_ERROR })
}
