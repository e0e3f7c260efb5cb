//! The monotonic clock in nanoseconds, as BPF programs read it
//! (`bpf_ktime_get_ns` is `CLOCK_MONOTONIC`), for timestamps steer writes
//! into maps that programs compare with their own.

/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // It cannot fail with a valid pointer and clock id; 0 would only make a
    // timestamp look old.
    if rc != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_ns_advances() {
        let a = super::monotonic_ns();
        let b = super::monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
