//! Fuzzes the `/metrics` server's request parsing and response, as the
//! observer calls it on a connection's bytes so far: no bytes may panic it,
//! and
//! - it waits (no response) only while the head may still come: no blank
//!   line yet, the client still there, at most 8 KiB;
//! - a response is HTTP/1.1: a status line with a three-digit status,
//!   headers, a blank line, and a body of exactly `Content-Length` bytes
//!   (none for HEAD);
//! - 200 only for `GET` or `HEAD` of `/metrics`, its body the encoded
//!   snapshot; any other response is small whatever was sent.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use steer_engine::observe::replies::metrics;
use steer_engine::observe::{metrics::encode, CpuCounters, LiveStats};

/// The longest head the server waits for.
const MAX_HEAD: usize = 8192;
/// The longest response other than the metrics.
const MAX_ERROR: usize = 1024;

fn snapshot() -> LiveStats {
    let mut live = LiveStats::empty("fuzz0");
    for cpu in 0..2 {
        let mut row = CpuCounters {
            cpu,
            ..Default::default()
        };
        row.core.processed = 42 + cpu as u64;
        live.per_cpu.push(row);
    }
    live
}

/// The snapshot's metrics, encoded once.
fn encoded() -> &'static [u8] {
    static ENCODED: OnceLock<Vec<u8>> = OnceLock::new();
    ENCODED.get_or_init(|| encode(&snapshot()).unwrap().into_bytes())
}

fuzz_target!(|data: &[u8]| {
    // The observer reads at most 16 KiB from a client.
    let data = &data[..data.len().min(16 * 1024)];
    let ended = data.windows(4).any(|w| w == b"\r\n\r\n") || data.windows(2).any(|w| w == b"\n\n");
    for closed in [false, true] {
        let Some(response) = metrics(data, closed, &snapshot) else {
            assert!(!closed && !ended && data.len() <= MAX_HEAD);
            continue;
        };
        check(data, &response);
    }
});

/// The response to `request` is well formed, and 200 only with the
/// metrics, to a GET (with them) or a HEAD (without) of `/metrics`.
fn check(request: &[u8], response: &[u8]) {
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head ended by a blank line");
    let head = std::str::from_utf8(&response[..split]).expect("the head is text");
    let body = &response[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let rest = status_line
        .strip_prefix("HTTP/1.1 ")
        .unwrap_or_else(|| panic!("status line {status_line:?}"));
    let (code, reason) = rest.split_once(' ').expect("status and reason");
    assert!(
        code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit()),
        "{code:?}"
    );
    assert!(!reason.is_empty());
    let mut length = None;
    for header in lines {
        let (name, value) = header.split_once(": ").expect("name: value");
        assert!(!name.is_empty() && !name.contains(char::is_whitespace));
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().expect("a length"));
        }
    }
    let length = length.expect("a Content-Length");
    // HEAD: the length of the body a GET would have, and no body.
    assert!(
        body.len() == length || body.is_empty(),
        "{} of {length} bytes",
        body.len()
    );
    if code == "200" {
        // httparse skips blank lines before the request line.
        let start = request
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .unwrap_or(0);
        let line = &request[start..];
        let path_ok = |rest: &[u8]| rest.starts_with(b"/metrics");
        if let Some(rest) = line.strip_prefix(b"GET ") {
            assert!(path_ok(rest));
            assert_eq!(body, encoded());
        } else if let Some(rest) = line.strip_prefix(b"HEAD ") {
            assert!(path_ok(rest) && body.is_empty());
            assert_eq!(length, encoded().len());
        } else {
            panic!("200 to {:?}", String::from_utf8_lossy(request));
        }
    } else {
        assert!(response.len() <= MAX_ERROR, "{} bytes", response.len());
        assert_eq!(body.len(), length, "only a 200 to HEAD has no body");
    }
}
