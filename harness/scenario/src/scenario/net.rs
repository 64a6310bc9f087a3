//! Parsing addresses and CIDRs the way a scenario author writes them, with messages that say
//! what to write instead.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::Protocol;

use super::error::{Diagnostics, Site};
use super::yaml::FieldPath;

/// An address of either family; [`ip_at`] also holds it to the scenario's family.
pub(crate) fn parse_ip(text: &str) -> Result<IpAddr, String> {
    match text.trim().parse::<IpAddr>() {
        Ok(ip) => Ok(ip),
        Err(_) if text.contains('/') => {
            Err(format!("{text:?} is a CIDR; an address is expected here (e.g. 10.244.1.5)"))
        }
        Err(_) => Err(format!("{text:?} is not an IP address")),
    }
}

/// A CIDR of either family; [`cidr_at`] also holds it to the scenario's family.
pub(crate) fn parse_cidr(text: &str) -> Result<IpNet, String> {
    let net = match text.trim().parse::<IpNet>() {
        Ok(net) => net,
        Err(_) if text.trim().parse::<IpAddr>().is_ok() => {
            return Err(format!("{text:?} is an address; a CIDR is expected here (e.g. 10.244.0.0/16)"));
        }
        Err(_) => return Err(format!("{text:?} is not a CIDR (expected e.g. 10.244.0.0/16)")),
    };
    if net.trunc() != net {
        return Err(format!("{net} has host bits set (did you mean {}?)", net.trunc()));
    }
    Ok(net)
}

/// The address at `path`, reporting why it is none: unreadable, or of the other family than
/// the scenario's (see `families`).
pub(crate) fn ip_at(site: &Site<'_>, path: &FieldPath, text: &str, diag: &mut Diagnostics) -> Option<IpAddr> {
    let ip = parse_ip(text).map_err(|e| diag.value(site, path, e)).ok()?;
    diag.ip_family(site, path, ip).then_some(ip)
}

/// The CIDR at `path`, as [`ip_at`] reads an address.
pub(crate) fn cidr_at(
    site: &Site<'_>,
    path: &FieldPath,
    text: &str,
    diag: &mut Diagnostics,
) -> Option<IpNet> {
    let net = parse_cidr(text).map_err(|e| diag.value(site, path, e)).ok()?;
    diag.net_family(site, path, &net).then_some(net)
}

pub(crate) fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Why `ip` can't be a host address of `net`, described as `what` (e.g. `nodeNetwork
/// 192.168.50.0/24`), or `None` if it can.
pub(crate) fn not_a_host_of(ip: IpAddr, net: &IpNet, what: &str) -> Option<String> {
    if !net.contains(&ip) {
        Some(format!("{ip} is not inside {what}"))
    } else {
        reserved_in(ip, net).map(|why| format!("{ip} is {why} of {what}, not a host address"))
    }
}

/// Why `ip` can't be a host in `net` (its network or broadcast address; for IPv6 the
/// subnet-router anycast address, and no broadcast), if it can't.
pub(crate) fn reserved_in(ip: IpAddr, net: &IpNet) -> Option<&'static str> {
    if net.prefix_len() + 2 > net.max_prefix_len() {
        return None; // /31 and /32 (/127, /128) have no network or broadcast address
    }
    match net {
        IpNet::V4(_) if ip == net.network() => Some("the network address"),
        IpNet::V4(_) if ip == net.broadcast() => Some("the broadcast address"),
        IpNet::V6(_) if ip == net.network() => Some("the subnet-router anycast address"),
        _ => None,
    }
}

/// A Kubernetes port number field (`int32` in the API).
pub(crate) fn port_number(n: i32) -> Result<u16, String> {
    u16::try_from(n).ok().filter(|&p| p != 0).ok_or_else(|| format!("{n} is not a port number (1-65535)"))
}

/// A Kubernetes `protocol` field; absent means TCP, as the API server defaults it.
pub(crate) fn protocol(p: Option<&str>) -> Result<Protocol, String> {
    match p {
        None => Ok(Protocol::Tcp),
        Some(p) => Protocol::parse_k8s(p)
            .ok_or_else(|| format!("unknown protocol {p:?} (expected TCP, UDP or SCTP)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(parse_ip("10.0.0.1").unwrap().to_string(), "10.0.0.1");
        assert_eq!(parse_ip("fd00::1").unwrap().to_string(), "fd00::1");
        assert!(parse_ip("10.0.0.300").unwrap_err().contains("not an IP address"));
        assert!(parse_ip("10.0.0.0/8").unwrap_err().contains("is a CIDR"));
    }

    #[test]
    fn cidrs() {
        assert_eq!(parse_cidr("10.244.0.0/16").unwrap().to_string(), "10.244.0.0/16");
        assert_eq!(parse_cidr("fd00::/64").unwrap().to_string(), "fd00::/64");
        assert_eq!(
            parse_cidr("fd00::1/64").unwrap_err(),
            "fd00::1/64 has host bits set (did you mean fd00::/64?)"
        );
        assert_eq!(
            parse_cidr("10.244.1.5/24").unwrap_err(),
            "10.244.1.5/24 has host bits set (did you mean 10.244.1.0/24?)"
        );
        assert!(parse_cidr("10.244.1.5").unwrap_err().contains("is an address"));
        assert!(parse_cidr("ten/8").unwrap_err().contains("not a CIDR"));
    }

    #[test]
    fn ports_and_protocols() {
        assert_eq!(port_number(53), Ok(53));
        assert!(port_number(0).is_err() && port_number(70000).is_err() && port_number(-1).is_err());
        assert_eq!(protocol(None), Ok(Protocol::Tcp));
        assert_eq!(protocol(Some("UDP")), Ok(Protocol::Udp));
        assert_eq!(
            protocol(Some("udp")).unwrap_err(),
            "unknown protocol \"udp\" (expected TCP, UDP or SCTP)"
        );
    }

    #[test]
    fn overlap_and_reserved() {
        let a: IpNet = "10.244.0.0/16".parse().unwrap();
        let b: IpNet = "10.244.1.0/24".parse().unwrap();
        let c: IpNet = "10.96.0.0/12".parse().unwrap();
        assert!(overlaps(&a, &b) && overlaps(&b, &a) && !overlaps(&a, &c));
        assert_eq!(reserved_in("10.244.1.0".parse().unwrap(), &b), Some("the network address"));
        assert_eq!(reserved_in("10.244.1.255".parse().unwrap(), &b), Some("the broadcast address"));
        assert_eq!(reserved_in("10.244.1.7".parse().unwrap(), &b), None);
        let v6: IpNet = "fd00:10:244:1::/64".parse().unwrap();
        assert_eq!(
            reserved_in("fd00:10:244:1::".parse().unwrap(), &v6),
            Some("the subnet-router anycast address")
        );
        assert_eq!(reserved_in("fd00:10:244:1:ffff:ffff:ffff:ffff".parse().unwrap(), &v6), None);
        assert_eq!(
            not_a_host_of("10.244.2.7".parse().unwrap(), &b, "the podCIDR 10.244.1.0/24 of node node-a")
                .unwrap(),
            "10.244.2.7 is not inside the podCIDR 10.244.1.0/24 of node node-a"
        );
    }
}
