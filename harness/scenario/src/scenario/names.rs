//! Name rules. Names become network namespace names and appear in rule comments, so they
//! follow Kubernetes' DNS-1123 subdomain rule, as node and pod names do in a real cluster.

pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() {
        return Err("a name must not be empty".to_string());
    }
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "{name:?} is not a valid name: use lowercase letters, digits, '-' and '.', \
             starting and ending with a letter or digit (DNS-1123 subdomain)"
        ));
    }
    if name.len() > MAX_NAME {
        return Err(format!(
            "a name of {} characters is too long here: packetproof names network namespaces and \
             evidence files after it, which the kernel limits to 255 bytes; use at most {MAX_NAME}",
            name.len()
        ));
    }
    Ok(())
}

/// The longest name a run can carry: a namespace is `pp-<pid>-<run>-p-<name>` (up to 24 bytes
/// before the name) and an evidence file `node-<name>.conntrack-events` (21), in 255 bytes.
pub(crate) const MAX_NAME: usize = 200;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_subdomains() {
        for ok in ["node-a", "coredns-a", "a.b-c.d", "x1"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Node-A", "-a", "a-", "a..b", "a/b", "a_b", ".", ".."] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        // A valid DNS-1123 subdomain, but longer than a namespace name can carry.
        let long = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(60)].join(".");
        assert!(check_name(&long).unwrap_err().contains("at most 200"), "{long}");
        assert!(check_name(&"e".repeat(63)).is_ok());
    }
}
