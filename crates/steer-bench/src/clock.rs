//! CLOCK_MONOTONIC in nanoseconds (the clock `bpf_ktime_get_ns` reads, so
//! send times taken here and arrival times stamped in XDP compare), absolute
//! sleeps on it, and thread pinning.

use std::io;

/// Now, in nanoseconds of CLOCK_MONOTONIC.
#[inline]
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` (returns at once when past).
pub fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

/// Lets this thread's timed sleeps end within a microsecond (the default
/// timer slack is 50 us).
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPU the calling thread runs on.
pub fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_sleeps() {
        let a = mono_ns();
        sleep_until(a + 2_000_000);
        let b = mono_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
        sleep_until(0);
    }
}
