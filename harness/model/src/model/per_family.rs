//! One value per IP family, the primary family's first: a node's InternalIPs and pod CIDRs, a
//! pod's `podIPs`, a Service's `clusterIPs`. Kept together, so that no address can be left
//! out of the other family's view: [`PerFamily::only`] is how every view picks its family.

use std::net::IpAddr;

use ipnet::IpNet;

use super::IpFamily;

/// A value that belongs to one IP family.
pub trait OfFamily {
    fn family(&self) -> IpFamily;
}

impl OfFamily for IpAddr {
    fn family(&self) -> IpFamily {
        IpFamily::of(*self)
    }
}

impl OfFamily for IpNet {
    fn family(&self) -> IpFamily {
        IpFamily::of_net(self)
    }
}

/// The primary family's value, and the second family's in a dual-stack object: Kubernetes'
/// two-entry lists (`clusterIPs`, `podIPs`, `podCIDRs`), whose entries differ in family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PerFamily<T> {
    primary: T,
    second: Option<T>,
}

impl<T> PerFamily<T> {
    /// A single-stack value.
    pub fn single(primary: T) -> PerFamily<T> {
        PerFamily { primary, second: None }
    }

    /// The primary family's value.
    pub fn primary(&self) -> &T {
        &self.primary
    }

    /// The second family's value, in a dual-stack object.
    pub fn second(&self) -> Option<&T> {
        self.second.as_ref()
    }

    /// Every value, primary first.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        std::iter::once(&self.primary).chain(self.second.as_ref())
    }

    /// The values made by `f`, in the same families' places.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> PerFamily<U> {
        PerFamily { primary: f(&self.primary), second: self.second.as_ref().map(f) }
    }
}

impl<T: OfFamily> PerFamily<T> {
    /// The primary value and the second, which must be of the other family (the callers
    /// validate that first: two values of one family are a bug, not an input).
    pub fn dual(primary: T, second: Option<T>) -> PerFamily<T> {
        if let Some(s) = &second {
            assert_ne!(primary.family(), s.family(), "PerFamily::dual: two values of one family");
        }
        PerFamily { primary, second }
    }

    /// The primary value and the second, or `None` when both are of one family (for readers
    /// of files, which report that themselves and must not panic on it).
    pub fn pair(primary: T, second: Option<T>) -> Option<PerFamily<T>> {
        match &second {
            Some(s) if s.family() == primary.family() => None,
            _ => Some(PerFamily { primary, second }),
        }
    }

    /// The value of `family`, if there is one.
    pub fn get(&self, family: IpFamily) -> Option<&T> {
        self.iter().find(|v| v.family() == family)
    }

    /// The single-stack value of `family` alone (what that family's proxier sees), if there is
    /// one.
    pub fn only(&self, family: IpFamily) -> Option<PerFamily<T>>
    where
        T: Clone,
    {
        self.get(family).cloned().map(PerFamily::single)
    }

    /// Whether some value is `value`.
    pub fn contains(&self, value: &T) -> bool
    where
        T: PartialEq,
    {
        self.iter().any(|v| v == value)
    }
}

impl<T: Copy> PerFamily<T> {
    /// Every value by copy, primary first.
    pub fn copied(&self) -> impl Iterator<Item = T> + '_ {
        self.iter().copied()
    }
}

impl<T> From<T> for PerFamily<T> {
    fn from(primary: T) -> PerFamily<T> {
        PerFamily::single(primary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn each_family_has_its_own_value_primary_first() {
        let dual = PerFamily::dual(ip("fd00::1"), Some(ip("10.0.0.1")));
        assert_eq!(dual.get(IpFamily::V4), Some(&ip("10.0.0.1")));
        assert_eq!(dual.get(IpFamily::V6), Some(&ip("fd00::1")));
        assert_eq!(dual.copied().collect::<Vec<_>>(), [ip("fd00::1"), ip("10.0.0.1")]);
        assert_eq!(dual.only(IpFamily::V4), Some(PerFamily::single(ip("10.0.0.1"))));
        assert!(dual.contains(&ip("10.0.0.1")) && !dual.contains(&ip("10.0.0.2")));
        assert_eq!(PerFamily::pair(ip("10.0.0.1"), Some(ip("10.0.0.2"))), None);
        assert_eq!(
            PerFamily::pair(ip("10.0.0.1"), Some(ip("fd00::1"))).unwrap().second(),
            Some(&ip("fd00::1"))
        );
        let single = PerFamily::single(ip("10.0.0.1"));
        assert_eq!((single.get(IpFamily::V6), single.only(IpFamily::V6)), (None, None));
        assert_eq!(single.map(|a| a.is_ipv4()), PerFamily::single(true));
    }

    #[test]
    #[should_panic(expected = "two values of one family")]
    fn two_values_of_one_family_are_a_bug() {
        PerFamily::dual(ip("10.0.0.1"), Some(ip("10.0.0.2")));
    }
}
