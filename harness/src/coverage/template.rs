//! A rule's template: its text with what differs from one Service, endpoint or node to the
//! next abstracted, so that the same rule shape for two Services counts once.
//!
//! Abstracted: kube-proxy's hashed chain names (`KUBE-SVC-<hash>`, `KUBE-SEP-`, `KUBE-EXT-`,
//! `KUBE-FW-`, `KUBE-SVL-`, `KUBE-XLB-`), its nftables mode's named chains and sets
//! (`service-<name>`, `endpoint-`, `external-`, `firewall-`, `local-`, `affinity-`),
//! addresses (`<ip>`), numbers (`<n>`), Service names in comments (`<name>`), and the
//! elements of an inline set or map, which collapse to their distinct shapes. What is left
//! (matches, targets, fixed chain names, comment words) is the shape. The rules apply to any
//! proxy's text, not only kube-proxy's: an unknown proxy's rules are grouped by chain and
//! this abstracted text.

use std::net::Ipv6Addr;

/// `(chain, rule)` as templates.
pub fn template(chain: &str, rule: &str) -> (String, String) {
    (abstract_text(chain), collapse_sets(&abstract_text(rule)))
}

/// The nftables kube-proxy prefixes whose chains and sets are named `PREFIX-HASH8-…`.
const NAMED_PREFIXES: &[&str] = &["service", "endpoint", "external", "firewall", "local", "affinity"];

/// Each word of `text` abstracted; spaces, quotes and punctuation kept.
fn abstract_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let is_word_char = |c: char| c.is_ascii_alphanumeric() || "_.:/-[]+%".contains(c);
    for c in text.chars() {
        if is_word_char(c) {
            word.push(c);
        } else {
            out.push_str(&abstract_word(&word));
            word.clear();
            out.push(c);
        }
    }
    out.push_str(&abstract_word(&word));
    out
}

fn abstract_word(word: &str) -> String {
    if word.is_empty() {
        return String::new();
    }
    if let Some(named) = named_chain(word) {
        return named;
    }
    if let Some(kube) = kube_chain(word) {
        return kube;
    }
    let word = addresses(word);
    let word = digits(&word);
    // `namespace/name:port` in a comment, once addresses and numbers are out.
    let named = word.replace("<ip>", "").replace("<n>", "");
    let service_name = named.contains('/')
        && named.chars().any(|c| c.is_ascii_lowercase())
        && !named.starts_with(['/', '0']);
    if service_name { "<name>".to_string() } else { word }
}

/// `service-ULMVA6XW-ns1/svc1/tcp/p80` → `service-<name>` (also after `@` or a jump).
fn named_chain(word: &str) -> Option<String> {
    let (prefix, rest) = word.split_once('-')?;
    let hash = rest.get(..8)?;
    let hashed = hash.chars().all(|c| c.is_ascii_uppercase() || ('2'..='7').contains(&c));
    (NAMED_PREFIXES.contains(&prefix) && hashed && rest[8..].starts_with('-'))
        .then(|| format!("{prefix}-<name>"))
}

/// `KUBE-SVC-ERIFXISQEP7F7OF4` → `KUBE-SVC-<hash>`: a segment of 16 base32 characters.
fn kube_chain(word: &str) -> Option<String> {
    let segments: Vec<&str> = word.split('-').collect();
    let is_hash =
        |s: &&str| s.len() == 16 && s.chars().all(|c| c.is_ascii_uppercase() || ('2'..='7').contains(&c));
    if segments.len() < 2 || !segments.iter().any(is_hash) {
        return None;
    }
    Some(segments.iter().map(|s| if is_hash(s) { "<hash>" } else { s }).collect::<Vec<_>>().join("-"))
}

/// IPv4 and IPv6 addresses (with a prefix length or port after them) → `<ip>`.
fn addresses(word: &str) -> String {
    // IPv6 first: the whole word, bracketed or not, with a prefix length or not.
    let bare = word.trim_start_matches('[');
    let (address, rest) = match bare.find([']', '/']) {
        Some(at) => (&bare[..at], &bare[at..]),
        None => (bare, ""),
    };
    if address.contains(':') && address.parse::<Ipv6Addr>().is_ok() {
        return format!("{}<ip>{}", if word.starts_with('[') { "[" } else { "" }, rest);
    }
    // Dotted quads anywhere in the word.
    let mut out = String::new();
    let mut rest = word;
    while let Some((start, len)) = find_ipv4(rest) {
        out.push_str(&rest[..start]);
        out.push_str("<ip>");
        rest = &rest[start + len..];
    }
    out.push_str(rest);
    out
}

/// The first `a.b.c.d` in `text` (each part 1–3 digits), as (start, length).
fn find_ipv4(text: &str) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        if bytes[start].is_ascii_digit() && (start == 0 || !bytes[start - 1].is_ascii_alphanumeric()) {
            let mut at = start;
            let mut parts = 0;
            loop {
                let digits = bytes[at..].iter().take_while(|b| b.is_ascii_digit()).count();
                if digits == 0 || digits > 3 {
                    break;
                }
                at += digits;
                parts += 1;
                if parts == 4 || bytes.get(at) != Some(&b'.') {
                    break;
                }
                at += 1;
            }
            if parts == 4 {
                return Some((start, at - start));
            }
        }
        start += 1;
    }
    None
}

/// Every run of digits (a decimal point joins two) → `<n>`, except inside `<ip>`, hex
/// constants (`0x4000`: a fixed mark) and words where digits are part of a name (`cni0`).
fn digits(word: &str) -> String {
    if word.starts_with("0x") {
        return word.to_string();
    }
    let mut out = String::new();
    let mut chars = word.chars().peekable();
    let mut prev: Option<char> = None;
    while let Some(c) = chars.next() {
        let after_letter = prev.is_some_and(|p| p.is_ascii_alphabetic());
        if c.is_ascii_digit() && !after_letter {
            while chars.peek().is_some_and(|d| d.is_ascii_digit() || *d == '.') {
                chars.next();
            }
            out.push_str("<n>");
            prev = Some('>');
            continue;
        }
        out.push(c);
        prev = Some(c);
    }
    out
}

/// `{ a, b, a }` → `{ a, b }`: an inline set's or map's elements by their distinct shapes, so
/// a Service with three endpoints and one with two share a template.
fn collapse_sets(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { break };
        out.push_str(&rest[..=open]);
        let mut elements: Vec<&str> = rest[open + 1..open + close].split(',').map(str::trim).collect();
        elements.sort_unstable();
        elements.dedup();
        out.push_str(&format!(" {} ", elements.join(", ")));
        out.push('}');
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_services_of_one_shape_share_an_iptables_template() {
        let a = template(
            "KUBE-SERVICES",
            r#"-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-ERIFXISQEP7F7OF4"#,
        );
        let b = template(
            "KUBE-SERVICES",
            r#"-A KUBE-SERVICES -d 10.96.12.7/32 -p tcp -m comment --comment "kube-system/dns:tcp-53 cluster IP" -m tcp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU"#,
        );
        assert_eq!(a, b);
        assert_eq!(
            a.1,
            r#"-A KUBE-SERVICES -d <ip>/<n> -p tcp -m comment --comment "<name> cluster IP" -m tcp --dport <n> -j KUBE-SVC-<hash>"#
        );
    }

    #[test]
    fn the_endpoint_chains_share_one_template() {
        let (chain, rule) = template(
            "KUBE-SEP-ZXMNUKOKXUTL2MK2",
            "-A KUBE-SEP-ZXMNUKOKXUTL2MK2 -p tcp -m tcp -j DNAT --to-destination 10.244.1.5:8080",
        );
        assert_eq!(chain, "KUBE-SEP-<hash>");
        assert_eq!(rule, "-A KUBE-SEP-<hash> -p tcp -m tcp -j DNAT --to-destination <ip>:<n>");
        let (_, v6) = template("KUBE-SEP-X", "-j DNAT --to-destination [fd00:10:244::5]:8080");
        assert_eq!(v6, "-j DNAT --to-destination [<ip>]:<n>");
    }

    #[test]
    fn nftables_named_chains_and_maps_collapse() {
        let (chain, rule) = template(
            "service-ULMVA6XW-ns1/svc1/tcp/p80",
            "ip daddr 10.96.0.1 numgen random mod 3 vmap { 0 : goto endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80, \
             1 : goto endpoint-XYZ23ABC-ns1/svc1/tcp/p80__10.180.0.2/80, 2 : goto endpoint-QQQQ2222-ns1/svc1/tcp/p80__10.180.0.3/80 }",
        );
        assert_eq!(chain, "service-<name>");
        assert_eq!(rule, "ip daddr <ip> numgen random mod <n> vmap { <n> : goto endpoint-<name> }");
        let (_, set) = template("c", "ip saddr != { 10.0.0.0/8, 192.168.0.0/16 } drop");
        assert_eq!(set, "ip saddr != { <ip>/<n> } drop");
    }

    #[test]
    fn fixed_names_marks_and_interfaces_stay() {
        let (_, rule) = template(
            "KUBE-POSTROUTING",
            "-A KUBE-POSTROUTING -m mark --mark 0x4000/0x4000 -o cni0 -j MASQUERADE --random-fully",
        );
        assert_eq!(
            rule,
            "-A KUBE-POSTROUTING -m mark --mark 0x4000/0x4000 -o cni0 -j MASQUERADE --random-fully"
        );
        let (_, ranges) =
            template("KUBE-NODEPORTS", "-A KUBE-NODEPORTS -p tcp --dport 30000:32767 -j ACCEPT");
        assert_eq!(ranges, "-A KUBE-NODEPORTS -p tcp --dport <n>:<n> -j ACCEPT");
        let (_, probability) =
            template("KUBE-SVC-X", "-m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-X");
        assert_eq!(probability, "-m statistic --mode random --probability <n> -j KUBE-SEP-X");
    }
}
