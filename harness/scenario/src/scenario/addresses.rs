//! Every address the scenario assigns, so no two things get the same one.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use super::error::{Diagnostics, Site};
use super::yaml::FieldPath;

#[derive(Default)]
pub(crate) struct Addresses {
    owners: HashMap<IpAddr, String>,
    /// Nodes' secondary addresses: where a VIP that is local to a node sits.
    secondary: HashSet<IpAddr>,
}

impl Addresses {
    /// Records `ip` as `owner`'s (e.g. `node node-a`); reports it at `path` if already taken.
    pub(crate) fn claim(
        &mut self,
        ip: IpAddr,
        owner: String,
        site: &Site<'_>,
        path: &FieldPath,
        diag: &mut Diagnostics,
    ) {
        match self.owners.get(&ip) {
            Some(first) => diag.value(site, path, format!("{ip} is already the address of {first}")),
            None => {
                self.owners.insert(ip, owner);
            }
        }
    }

    /// Records `ip` as a node's secondary address (claimed with [`Addresses::claim`]).
    pub(crate) fn mark_secondary(&mut self, ip: IpAddr) {
        self.secondary.insert(ip);
    }

    /// Whether `ip` is a node's secondary address.
    pub(crate) fn is_secondary(&self, ip: IpAddr) -> bool {
        self.secondary.contains(&ip)
    }

    /// Who `ip` was assigned to, e.g. `node node-a`, if anyone.
    pub(crate) fn owner(&self, ip: IpAddr) -> Option<&str> {
        self.owners.get(&ip).map(String::as_str)
    }
}
