//! The replies of the stats socket and `/metrics` to what a client sent,
//! with no socket and no engine: the entry points of the fuzz targets
//! `stats` and `metrics` (hidden from the documentation; not a user API).
//!
//! Each is the function the observer calls on a connection's bytes so far
//! (`closed`: the client will send no more), returning `None` while the
//! request may still be coming, else the whole reply. Invariants (the fuzz
//! targets check them, for any bytes): no panic; a stats reply is one line
//! of JSON, the snapshot or `{"error": ...}`; a metrics reply is an
//! HTTP/1.1 response whose `Content-Length` is its body's; an error reply
//! is small whatever was sent.

use super::live::LiveStats;
use super::{endpoint, metrics};

/// The stats socket's reply to `received` (one request line).
pub fn stats(received: &[u8], closed: bool, snapshot: &dyn Fn() -> LiveStats) -> Option<Vec<u8>> {
    endpoint::reply_to(received, closed, &|| snapshot(), false)
}

/// The `/metrics` server's response to `received` (an HTTP request head).
pub fn metrics(received: &[u8], closed: bool, snapshot: &dyn Fn() -> LiveStats) -> Option<Vec<u8>> {
    metrics::reply_to(received, closed, &|| metrics::encode(&snapshot()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> LiveStats {
        LiveStats::empty("veth0")
    }

    #[test]
    fn whole_requests_get_whole_replies() {
        assert_eq!(stats(b"sta", false, &live), None);
        let r = stats(b"stats\n", false, &live).unwrap();
        assert!(r.ends_with(b"\n") && r.starts_with(b"{"));
        assert_eq!(metrics(b"GET /metrics HTTP/1.1\r\n", false, &live), None);
        let r = metrics(b"GET /nope HTTP/1.1\r\n\r\n", false, &live).unwrap();
        assert!(r.starts_with(b"HTTP/1.1 404 Not Found\r\n"));
    }

    /// The stats error quotes the request, escaped twice (Rust's `{:?}`,
    /// then JSON): a line of control bytes grows sevenfold, and stays
    /// bounded (the fuzz target `stats` found 524 bytes from 64).
    #[test]
    fn error_replies_stay_small() {
        use super::super::endpoint::MAX_REQUEST;
        let mut worst = vec![0x1e; MAX_REQUEST - 2];
        worst.insert(0, b'\\');
        worst.push(b'\\');
        let r = stats(&worst, true, &live).unwrap();
        assert!(r.len() > 7 * (MAX_REQUEST - 2), "{}", r.len());
        assert!(r.len() <= 8 * MAX_REQUEST + 128, "{}", r.len());
        let long = vec![b'x'; 10 * MAX_REQUEST];
        let r = stats(&long, false, &live).unwrap();
        assert!(r.len() < 128, "{}", String::from_utf8_lossy(&r));
    }
}
