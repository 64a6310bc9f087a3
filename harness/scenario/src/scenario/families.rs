//! One address family per single-stack scenario: the first address read (the cluster's
//! `podCIDR`, when it parses) sets it, and the first address of the other family in the file
//! is the error (reported through `Diagnostics::one_family` in `error`). A dual-stack cluster (its networks list a CIDR of each family) admits both.
//!
//! An address of the other family is treated like an address that does not parse: the field
//! counts as broken, so nothing that depends on it reports again (an IPv4 node IP is not
//! also "outside" an IPv6 node network). Each is reported as it is read, so that what holds
//! it counts as broken too; when the file's errors are collected only the first in the file
//! stays, since every later one would say the same.

use crate::model::IpFamily;

pub(crate) const DUAL_STACK: &str = "the cluster is single-stack: every address of the scenario must be of \
     one family (for dual-stack, give spec.cluster podCIDR, serviceCIDR and nodeNetwork a CIDR of each family)";

/// The address (or family name) that set the scenario's family, and where.
#[derive(Debug, Clone)]
struct First {
    family: IpFamily,
    shown: String,
    field: String,
    line: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Families {
    first: Option<First>,
    /// The cluster is dual-stack: both families are admitted.
    dual: bool,
    /// Where in [`Diagnostics`]'s list the errors about the other family are.
    pub(super) reported: Vec<usize>,
}

impl Families {
    /// Whether `family`, of the value `shown` in `field` on `line`, is the scenario's: `Ok`,
    /// or the message for a value of the other family.
    pub(crate) fn admit(
        &mut self,
        field: String,
        line: usize,
        family: IpFamily,
        shown: &str,
    ) -> Result<(), String> {
        if self.dual {
            return Ok(());
        }
        let Some(first) = &self.first else {
            self.first = Some(First { family, shown: shown.to_string(), field, line });
            return Ok(());
        };
        if first.family == family {
            return Ok(());
        }
        let this = if shown == family.as_k8s() { "this is".to_string() } else { format!("{shown} is") };
        Err(format!(
            "{DUAL_STACK} ({this} {family}, but the first address, {} at {} line {}, is {})",
            first.shown, first.field, first.line, first.family
        ))
    }
}

impl Families {
    /// Whether `family` is admitted with nothing to note: the cluster is dual-stack, or an
    /// earlier address set this family. Most addresses of a file are so, and need no place.
    pub(crate) fn settled(&self, family: IpFamily) -> bool {
        self.dual || self.first.as_ref().is_some_and(|first| first.family == family)
    }

    /// No address was read yet, nor the cluster found dual-stack.
    pub(super) fn untouched(&self) -> bool {
        self.first.is_none() && !self.dual && self.reported.is_empty()
    }

    /// The cluster is dual-stack: from here on, addresses of either family are admitted.
    pub(crate) fn set_dual(&mut self) {
        self.dual = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_value_sets_the_family() {
        let mut f = Families::default();
        assert_eq!(f.admit("spec.cluster.podCIDR".into(), 7, IpFamily::V6, "fd00::/48"), Ok(()));
        assert_eq!(f.admit("x".into(), 8, IpFamily::V6, "fd00::1"), Ok(()));
        assert_eq!(
            f.admit("y".into(), 9, IpFamily::V4, "10.0.0.1"),
            Err(format!(
                "{DUAL_STACK} (10.0.0.1 is IPv4, but the first address, fd00::/48 at spec.cluster.podCIDR line 7, is IPv6)"
            ))
        );
        assert_eq!(f.admit("w".into(), 11, IpFamily::V6, "fd00::2"), Ok(()));
    }

    #[test]
    fn a_dual_stack_cluster_admits_both() {
        let mut f = Families::default();
        f.set_dual();
        assert_eq!(f.admit("a".into(), 1, IpFamily::V4, "10.0.0.1"), Ok(()));
        assert_eq!(f.admit("b".into(), 2, IpFamily::V6, "fd00::1"), Ok(()));
    }

    #[test]
    fn a_family_name_is_this() {
        let mut f = Families::default();
        f.admit("a".into(), 1, IpFamily::V4, "10.0.0.0/8").unwrap();
        let message = f.admit("b".into(), 2, IpFamily::V6, "IPv6").unwrap_err();
        assert!(
            message.contains("(this is IPv6, but the first address, 10.0.0.0/8 at a line 1, is IPv4)"),
            "{message}"
        );
    }
}
