//! `packetproof cleanup`: what earlier runs left behind, removed.

use anyhow::Result;

use super::{EXIT_PASS, remove_leftovers};

pub fn main(all: bool) -> Result<i32> {
    let removed = remove_leftovers(all)?;
    for what in &removed {
        println!("removed {what}");
    }
    println!("{} leftovers removed", removed.len());
    Ok(EXIT_PASS)
}
