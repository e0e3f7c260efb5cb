//! Fuzzes the trace parser and printer, line by line as the replay reads a
//! file: no line may panic the parser, and
//! - an event that parses prints to one line (no newline, no comment)
//!   that parses to the same event, and prints the same again;
//! - the counts an `engine` line gives stay within the parser's bounds (a
//!   trace must not make the replay allocate without bound);
//! - an error is one line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use steer_replay::trace::{parse_line, Event, MAX_QUEUES, MAX_RING, MAX_RX_TABLE};

fuzz_target!(|data: &[u8]| {
    // The replay reads lines of UTF-8 (`BufRead::lines`).
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        match parse_line(line) {
            Ok(None) => {}
            Ok(Some(event)) => check(line, &event),
            Err(e) => assert!(!e.contains('\n'), "{line:?}: {e:?}"),
        }
    }
});

fn check(line: &str, event: &Event) {
    if let Event::Engine(e) = event {
        assert!(e.queues.is_none_or(|n| (1..=MAX_QUEUES).contains(&n)));
        assert!(e.rx_table.is_none_or(|n| (1..=MAX_RX_TABLE).contains(&n)));
        assert!(e.ring.is_none_or(|n| (1..=MAX_RING).contains(&n)));
    }
    let printed = event.to_string();
    assert!(
        !printed.contains('\n') && !printed.contains('#'),
        "{line:?} printed as {printed:?}"
    );
    let reparsed = parse_line(&printed);
    assert_eq!(
        reparsed.as_ref().ok().and_then(Option::as_ref),
        Some(event),
        "{line:?} printed as {printed:?}, which parses to {reparsed:?}"
    );
    assert_eq!(reparsed.unwrap().unwrap().to_string(), printed);
}
