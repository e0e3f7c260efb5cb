//! Fuzzes the stats socket's request parser and reply, as the observer
//! calls it on a connection's bytes so far: no bytes may panic it, and
//! - it waits (no reply) only while the request line may still come: no
//!   newline yet, the client still there, at most `MAX_REQUEST` bytes;
//! - a reply is one line of JSON: the snapshot exactly when the first line
//!   is `stats` (spaces allowed), else `{"error": "<one line>"}`, small
//!   whatever was sent;
//! - once the line has ended, what follows it changes nothing;
//! - a control line (`steer ctl`) that parses prints to one line that
//!   parses to the same control, and, from a client that may not control
//!   the engine, gets an error and nothing else.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use steer_engine::engine::Control;
use steer_engine::observe::endpoint::MAX_REQUEST;
use steer_engine::observe::replies::stats;
use steer_engine::observe::LiveStats;
use steer_engine::observe::{parse_request, Request};

/// The longest error reply: the request (at most `MAX_REQUEST` bytes) is
/// quoted in it, each byte at most 7 once escaped twice (`\x1e` is
/// `\u{1e}` quoted, `\\u{1e}` in JSON), with a few words around it.
const MAX_ERROR: usize = 8 * MAX_REQUEST + 128;

fn snapshot() -> LiveStats {
    LiveStats::empty("fuzz0")
}

/// The snapshot's JSON, encoded once.
fn encoded() -> &'static str {
    static ENCODED: OnceLock<String> = OnceLock::new();
    ENCODED.get_or_init(|| serde_json::to_string(&snapshot()).unwrap())
}

fuzz_target!(|data: &[u8]| {
    // The observer reads at most 16 KiB from a client.
    let data = &data[..data.len().min(16 * 1024)];
    for closed in [false, true] {
        let Some(reply) = stats(data, closed, &snapshot) else {
            assert!(!closed, "a closed client gets a reply");
            assert!(!data.contains(&b'\n') && data.len() <= MAX_REQUEST);
            continue;
        };
        let text = std::str::from_utf8(&reply).expect("the reply is UTF-8");
        let body = text.strip_suffix('\n').expect("the reply ends its line");
        assert!(!body.contains('\n'), "one line: {text:?}");
        let v: Value = serde_json::from_str(body).expect("the reply is JSON");
        let line = match data.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let line = &data[..=i];
                assert_eq!(stats(line, false, &snapshot).as_ref(), Some(&reply));
                line
            }
            None => data,
        };
        let is_stats = line.len() <= MAX_REQUEST
            && std::str::from_utf8(line).is_ok_and(|l| l.trim() == "stats");
        if let Ok(Request::Control(c)) = parse_request(line) {
            control_prints_back(&c);
        }
        if is_stats {
            assert_eq!(body, encoded());
        } else {
            let e = v["error"].as_str().expect("an error reply");
            assert!(!e.contains('\n'));
            assert!(reply.len() <= MAX_ERROR, "{} bytes", reply.len());
        }
    }
});

/// A control prints to one line that parses to it, as a request too.
fn control_prints_back(c: &Control) {
    let printed = c.to_string();
    assert!(!printed.contains('\n'), "{printed:?}");
    assert_eq!(printed.parse::<Control>().as_ref(), Ok(c), "{printed:?}");
    let line = printed + "\n";
    if line.len() <= MAX_REQUEST {
        assert_eq!(
            parse_request(line.as_bytes()),
            Ok(Request::Control(c.clone()))
        );
    }
}
