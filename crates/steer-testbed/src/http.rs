//! Reading what a server under test publishes over HTTP: a one-shot GET
//! (the engine's `/metrics` closes after one response), sums over
//! Prometheus text, and `promtool check metrics` on it. Owns nothing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `GET path` from an HTTP server that closes after one response; returns
/// the status line and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// Runs `promtool check metrics` (Debian's `prometheus` package) on
/// `text`; returns what it said when it refuses it.
pub fn promtool_check(text: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian's prometheus package: scripts/setup.sh installs it)");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The sum of every sample of `family` in Prometheus text.
pub fn metric_sum(text: &str, family: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_count_only_the_family() {
        let text = "# HELP a x\na{cpu=\"0\"} 2\na{cpu=\"1\"} 3\nab 100\na 1\n";
        assert_eq!(metric_sum(text, "a"), 6);
        assert_eq!(metric_sum(text, "ab"), 100);
        assert_eq!(metric_sum(text, "c"), 0);
    }
}
