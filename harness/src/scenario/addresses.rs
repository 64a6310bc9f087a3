//! Every address the scenario assigns, so no two things get the same one.

use std::collections::HashMap;
use std::net::IpAddr;

use super::error::{Diagnostics, Site};
use super::yaml::FieldPath;

#[derive(Default)]
pub(crate) struct Addresses {
    owners: HashMap<IpAddr, String>,
}

impl Addresses {
    /// Records `ip` as `owner`'s (e.g. `node node-a`); reports it at `path` if already taken.
    pub fn claim(
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

    /// Who `ip` was assigned to, e.g. `node node-a`, if anyone.
    pub fn owner(&self, ip: IpAddr) -> Option<&str> {
        self.owners.get(&ip).map(String::as_str)
    }
}
