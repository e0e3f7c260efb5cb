//! Unique names for what the test bed makes. A tag is the process id
//! (its last five digits) and a counter of this process, so no two tags of
//! one process are equal, and two processes alive together have different
//! pids. Names built from a short prefix and a tag fit an interface name
//! (15 bytes): prefixes are at most four bytes.

use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A tag no other call in this process returns (`<pid % 100000><n>`).
pub fn tag() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}{}", std::process::id() % 100_000, n)
}

/// A small number in `0..m` that differs between the calls of one process
/// and between processes with nearby pids, for picking address slots.
pub fn slot(m: u32) -> u32 {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    (std::process::id().wrapping_mul(7).wrapping_add(n)) % m.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_do_not_repeat_and_fit_an_interface_name() {
        let tags: std::collections::HashSet<String> = (0..1000).map(|_| tag()).collect();
        assert_eq!(tags.len(), 1000);
        assert!(tags.iter().all(|t| 4 + t.len() <= 15));
        assert!((0..100).all(|_| slot(63) < 63));
    }
}
