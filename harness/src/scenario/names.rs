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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_subdomains() {
        for ok in ["node-a", "coredns-a", "a.b-c.d", "x1"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Node-A", "-a", "a-", "a..b", "a/b", "a_b"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
