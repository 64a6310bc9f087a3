//! A rule's identity, one type from the kernel's listing to the report: where it sits
//! ([`Location`]) and its text ([`Rule`]). A trace names a rule by its location and handle
//! ([`RuleId`]); the legacy and IPVS counters by its location and position in its chain; a
//! template is a [`Rule`] whose chain and text are abstracted.

use serde::{Deserialize, Serialize};

/// Where a rule sits, as the kernel's traces and listings name it: its family (`ip`, `ip6`,
/// `inet`), its table (`nat`, `kube-proxy`; `ipvs` for IPVS's servers), its chain (`virtual
/// servers`, `real servers` for IPVS).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Location {
    pub family: String,
    pub table: String,
    pub chain: String,
}

/// A rule: where it sits and its text (`iptables-save`'s, `nft`'s, `ipvsadm -S`'s).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Rule {
    #[serde(flatten)]
    pub at: Location,
    #[serde(rename = "rule")]
    pub text: String,
}

/// A rule as a trace message names it: where it sits and its handle.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleId {
    pub at: Location,
    pub handle: u64,
}

impl Location {
    pub fn new(family: &str, table: &str, chain: &str) -> Location {
        Location { family: family.to_string(), table: table.to_string(), chain: chain.to_string() }
    }
}
