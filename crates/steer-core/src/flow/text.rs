//! A flow key as text, for operators and files: `udp 10.0.0.1:5000 ->
//! 10.0.0.2:53`, `tcp [2001:db8::1]:443 -> [2001:db8::2]:51000`, and for a
//! protocol without ports (or a fragment's key) `proto 47 10.0.0.1 ->
//! 10.0.0.2`.
//!
//! Invariant: what [`FlowKey`]'s `Display` prints parses back
//! ([`FlowKey::from_str`](std::str::FromStr)) to the same key; a parse
//! error is one line that says what was expected.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use super::{FlowAddrs, FlowKey, Ports};

const TCP: u8 = 6;
const UDP: u8 = 17;

/// Why a flow key did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowKeyParseError(String);

impl fmt::Display for FlowKeyParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: write a flow as `udp|tcp SRC:PORT -> DST:PORT` (IPv6 as [ADDR]:PORT) \
             or `proto N SRC -> DST`",
            self.0
        )
    }
}

impl std::error::Error for FlowKeyParseError {}

fn err(what: impl Into<String>) -> FlowKeyParseError {
    FlowKeyParseError(what.into())
}

impl fmt::Display for FlowKey {
    /// ```
    /// use std::net::Ipv4Addr;
    /// use steer_core::flow::{FlowAddrs, FlowKey, Ports};
    /// let key = FlowKey {
    ///     addrs: FlowAddrs::V4 { src: Ipv4Addr::new(10, 0, 0, 1), dst: Ipv4Addr::new(10, 0, 0, 2) },
    ///     protocol: 17,
    ///     ports: Some(Ports { src: 5000, dst: 53 }),
    /// };
    /// assert_eq!(key.to_string(), "udp 10.0.0.1:5000 -> 10.0.0.2:53");
    /// assert_eq!(key.to_string().parse::<FlowKey>().unwrap(), key);
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (src, dst): (IpAddr, IpAddr) = match self.addrs {
            FlowAddrs::V4 { src, dst } => (src.into(), dst.into()),
            FlowAddrs::V6 { src, dst } => (src.into(), dst.into()),
        };
        match (self.protocol, self.ports) {
            (TCP | UDP, Some(p)) => write!(
                f,
                "{} {} -> {}",
                if self.protocol == TCP { "tcp" } else { "udp" },
                SocketAddr::new(src, p.src),
                SocketAddr::new(dst, p.dst)
            ),
            (proto, Some(p)) => write!(
                f,
                "proto {proto} {} -> {}",
                SocketAddr::new(src, p.src),
                SocketAddr::new(dst, p.dst)
            ),
            (proto, None) => write!(f, "proto {proto} {src} -> {dst}"),
        }
    }
}

/// One end: `ADDR:PORT`, `[ADDR6]:PORT`, or a bare address.
fn endpoint(s: &str) -> Result<(IpAddr, Option<u16>), FlowKeyParseError> {
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Ok((sa.ip(), Some(sa.port())));
    }
    s.parse::<IpAddr>()
        .map(|ip| (ip, None))
        .map_err(|_| err(format!("`{s}` is not an address or address:port")))
}

impl FromStr for FlowKey {
    type Err = FlowKeyParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let words: Vec<&str> = s.split_whitespace().collect();
        // `named`: udp or tcp by name, which needs ports; `proto N` may
        // have none (a fragment's key, a protocol without ports).
        let (protocol, named, rest) = match words.as_slice() {
            ["udp", rest @ ..] => (UDP, true, rest),
            ["tcp", rest @ ..] => (TCP, true, rest),
            ["proto", n, rest @ ..] => (
                n.parse::<u8>()
                    .map_err(|_| err(format!("protocol `{n}` is not a number from 0 to 255")))?,
                false,
                rest,
            ),
            [first, ..] => return Err(err(format!("unknown protocol `{first}`"))),
            [] => return Err(err("empty flow")),
        };
        let [src, "->", dst] = rest else {
            return Err(err(format!("`{s}` has no `SRC -> DST`")));
        };
        let (src, sport) = endpoint(src)?;
        let (dst, dport) = endpoint(dst)?;
        let addrs = match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => FlowAddrs::V4 { src, dst },
            (IpAddr::V6(src), IpAddr::V6(dst)) => FlowAddrs::V6 { src, dst },
            _ => return Err(err("the two ends are of different IP versions")),
        };
        let ports = match (sport, dport) {
            (Some(src), Some(dst)) => Some(Ports { src, dst }),
            (None, None) if !named => None,
            (None, None) => return Err(err("a udp or tcp flow needs both ports")),
            _ => return Err(err("give both ports or neither")),
        };
        Ok(FlowKey {
            addrs,
            protocol,
            ports,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) {
        let key: FlowKey = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(key.to_string(), text);
        assert_eq!(key.to_string().parse::<FlowKey>().unwrap(), key);
    }

    #[test]
    fn every_shape_prints_back_as_it_was_written() {
        round_trip("udp 10.0.0.1:5000 -> 10.0.0.2:53");
        round_trip("tcp [2001:db8::1]:443 -> [2001:db8::2]:51000");
        round_trip("proto 47 10.0.0.1 -> 10.0.0.2");
        round_trip("proto 132 10.0.0.1:9 -> 10.0.0.2:10");
        round_trip("proto 17 fe80::1 -> fe80::2");
    }

    #[test]
    fn bad_flows_say_what_is_wrong_in_one_line() {
        for (bad, says) in [
            ("", "empty flow"),
            ("sctp 1.2.3.4:1 -> 1.2.3.5:2", "unknown protocol `sctp`"),
            ("proto 300 1.2.3.4 -> 1.2.3.5", "from 0 to 255"),
            ("udp 1.2.3.4:1 1.2.3.5:2", "no `SRC -> DST`"),
            ("udp 1.2.3.4:1 -> 1.2.3:2", "not an address"),
            ("udp 1.2.3.4:1 -> [::1]:2", "different IP versions"),
            ("udp 1.2.3.4 -> 1.2.3.5", "needs both ports"),
            ("proto 47 1.2.3.4:1 -> 1.2.3.5", "both ports or neither"),
            ("udp 1.2.3.4:99999 -> 1.2.3.5:1", "not an address"),
        ] {
            let e = bad.parse::<FlowKey>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
            assert!(!e.contains('\n'));
        }
    }
}
