//! The one-line answer a pod's server sends: which pod answered and which source it saw, and
//! for UDP, which request it answers. Both server and client use this, so the format lives in
//! one place.

use std::net::SocketAddr;

const MAGIC: &str = "packetproof";

/// `packetproof pod=<name> saw=<ip:port>\n`
pub fn encode(pod: &str, peer: SocketAddr) -> String {
    format!("{MAGIC} pod={pod} saw={peer}\n")
}

/// `packetproof pod=<name> saw=<ip:port> re=<id>\n`: the answer to request `id`. UDP attempts
/// from one fixed source port share a flow, so only the id tells whose answer a datagram is.
pub fn encode_answer_to(pod: &str, peer: SocketAddr, id: u64) -> String {
    format!("{MAGIC} pod={pod} saw={peer} re={id}\n")
}

/// `packetproof probe id=<id>\n`: what a UDP attempt sends.
pub fn request(id: u64) -> String {
    format!("{MAGIC} probe id={id}\n")
}

/// The id a request carries, if `payload` is one of ours that carries one.
pub fn request_id(payload: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut words = text.trim_end().split(' ');
    (words.next()? == MAGIC && words.next()? == "probe").then_some(())?;
    let id = words.next()?.strip_prefix("id=")?.parse().ok()?;
    words.next().is_none().then_some(id)
}

/// An answer as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub pod: String,
    pub seen: SocketAddr,
    /// The request it answers, when the request carried an id.
    pub re: Option<u64>,
}

/// The answer in `text`, or `None` for anything else.
pub fn parse(text: &str) -> Option<Answer> {
    let mut words = text.trim_end().split(' ');
    if words.next()? != MAGIC {
        return None;
    }
    let pod = words.next()?.strip_prefix("pod=")?.to_string();
    let seen = words.next()?.strip_prefix("saw=")?.parse().ok()?;
    let re = match words.next() {
        None => None,
        Some(word) => Some(word.strip_prefix("re=")?.parse().ok()?),
    };
    words.next().is_none().then_some(Answer { pod, seen, re })
}

/// The pod name and the source it saw, or `None` for anything else.
pub fn decode(text: &str) -> Option<(String, SocketAddr)> {
    parse(text).map(|a| (a.pod, a.seen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let peer: SocketAddr = "10.244.1.5:40000".parse().unwrap();
        assert_eq!(decode(&encode("web-0", peer)), Some(("web-0".into(), peer)));
        let answer = Answer { pod: "web-0".into(), seen: peer, re: Some(7) };
        assert_eq!(parse(&encode_answer_to("web-0", peer, 7)), Some(answer));
        assert_eq!(request_id(request(42).as_bytes()), Some(42));
    }

    #[test]
    fn rejects_foreign_text() {
        assert_eq!(decode("HTTP/1.1 200 OK"), None);
        assert_eq!(decode("packetproof pod=a saw=nonsense"), None);
        assert_eq!(decode("packetproof pod=a saw=1.2.3.4:5 extra"), None);
        assert_eq!(decode("packetproof pod=a saw=1.2.3.4:5 re=1 extra"), None);
        assert_eq!(request_id(b"packetproof probe\n"), None);
        assert_eq!(request_id(b"packetproof probe id=x\n"), None);
        assert_eq!(request_id(&[0xff, 0xfe]), None);
    }
}
