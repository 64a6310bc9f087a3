//! The one-line answer a pod's server sends: which pod answered and which source it saw.
//! Both server and client use this, so the format lives in one place.

use std::net::SocketAddr;

const MAGIC: &str = "packetproof";

/// `packetproof pod=<name> saw=<ip:port>\n`
pub fn encode(pod: &str, peer: SocketAddr) -> String {
    format!("{MAGIC} pod={pod} saw={peer}\n")
}

/// The pod name and the source it saw, or `None` for anything else.
pub fn decode(text: &str) -> Option<(String, SocketAddr)> {
    let mut words = text.trim_end().split(' ');
    if words.next()? != MAGIC {
        return None;
    }
    let pod = words.next()?.strip_prefix("pod=")?.to_string();
    let seen = words.next()?.strip_prefix("saw=")?.parse().ok()?;
    words.next().is_none().then_some((pod, seen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let peer: SocketAddr = "10.244.1.5:40000".parse().unwrap();
        assert_eq!(decode(&encode("web-0", peer)), Some(("web-0".into(), peer)));
    }

    #[test]
    fn rejects_foreign_text() {
        assert_eq!(decode("HTTP/1.1 200 OK"), None);
        assert_eq!(decode("packetproof pod=a saw=nonsense"), None);
        assert_eq!(decode("packetproof pod=a saw=1.2.3.4:5 extra"), None);
    }
}
