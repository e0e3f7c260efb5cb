//! A thread's scheduling slice (Linux >= 6.12, EEVDF): the one place that
//! speaks `sched_getattr`/`sched_setattr`. The engine's workers ask for a
//! short slice for themselves; `steer-bench` gives the same slice to
//! another server's threads so both are scheduled alike.
//!
//! The kernel processes packets in softirq context, ahead of every task; a
//! steer worker is an ordinary task. On a CPU it shares with other busy
//! tasks, a worker woken by new packets waits until the running task's
//! slice ends (1.4 ms here by default) before it runs: under load its
//! packets queue for about that long. Since 6.12 a `SCHED_OTHER` thread may
//! ask for a shorter slice (`sched_attr.sched_runtime`, which the kernel
//! clamps to 100 us .. 100 ms); a shorter slice gives it an earlier
//! virtual deadline, so its wake-ups preempt the running task, without
//! giving it a larger share of the CPU (that is what `nice` changes).
//! Older kernels accept the call and ignore the field.
//!
//! Invariant: only the slice is changed: the policy, nice value and flags
//! read back with `sched_getattr` are written back as they were, and
//! threads under a real-time or deadline policy are left alone.

use std::io;
use std::time::Duration;

/// `struct sched_attr` (include/uapi/linux/sched/types.h), version 1.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// `SCHED_OTHER` and `SCHED_BATCH`: the fair class, where the slice applies.
const FAIR_POLICIES: [u32; 2] = [0, 3];

/// The slice thread `tid` (0: the calling thread) asks the scheduler for,
/// or `None` when it runs under a policy without slices (real-time,
/// deadline, idle).
///
/// ```
/// let slice = steer_xdp::sched::thread_slice(0).unwrap();
/// assert!(slice.is_some());
/// ```
pub fn thread_slice(tid: i32) -> io::Result<Option<Duration>> {
    let attr = get_attr(tid)?;
    Ok(FAIR_POLICIES
        .contains(&attr.sched_policy)
        .then(|| Duration::from_nanos(attr.sched_runtime)))
}

/// Asks for `slice` for thread `tid` (0: the calling thread), keeping its
/// policy and nice value. Returns `false` (and changes nothing) when the
/// thread is not in the fair class.
///
/// ```no_run
/// use std::time::Duration;
/// // A worker thread asks for 100 us slices for itself.
/// steer_xdp::sched::set_thread_slice(0, Duration::from_micros(100))?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn set_thread_slice(tid: i32, slice: Duration) -> io::Result<bool> {
    let mut attr = get_attr(tid)?;
    if !FAIR_POLICIES.contains(&attr.sched_policy) {
        return Ok(false);
    }
    attr.size = size_of::<SchedAttr>() as u32;
    attr.sched_runtime = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    // Flags read back may include ones that are not valid on a write.
    attr.sched_flags = 0;
    // SAFETY: sched_setattr(2) reads a `struct sched_attr` of `attr.size`
    // bytes from a valid pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid,
            std::ptr::from_ref(&attr),
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

fn get_attr(tid: i32) -> io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: sched_getattr(2) writes at most `size` bytes into the struct
    // the pointer names.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            std::ptr::from_mut(&mut attr),
            size_of::<SchedAttr>() as u32,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a fresh thread, so the test thread keeps its settings.
    fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn the_slice_is_set_and_read_back_keeping_nice() {
        on_thread(|| {
            // A nice value the write must not reset (raising it needs no
            // privilege).
            // SAFETY: setpriority(2) on the calling thread (who = 0).
            assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 5) }, 0);
            assert!(set_thread_slice(0, Duration::from_micros(300)).unwrap());
            assert_eq!(thread_slice(0).unwrap(), Some(Duration::from_micros(300)));
            assert_eq!(get_attr(0).unwrap().sched_nice, 5);
            let proc = std::fs::read_to_string("/proc/thread-self/sched").unwrap();
            let line = proc.lines().find(|l| l.starts_with("se.slice")).unwrap();
            assert!(line.ends_with(" 300000"), "{line}");
        });
    }

    #[test]
    fn the_kernel_clamps_short_slices() {
        on_thread(|| {
            assert!(set_thread_slice(0, Duration::from_micros(1)).unwrap());
            assert_eq!(thread_slice(0).unwrap(), Some(Duration::from_micros(100)));
        });
    }

    #[test]
    fn another_threads_slice_is_set_by_its_id() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let tid = i32::try_from(child.id()).unwrap();
        let set = set_thread_slice(tid, Duration::from_micros(300));
        let now = thread_slice(tid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(set.unwrap());
        assert_eq!(now.unwrap(), Some(Duration::from_micros(300)));
        assert!(set_thread_slice(i32::MAX, Duration::from_micros(300)).is_err());
    }

    #[test]
    fn real_time_threads_are_left_alone() {
        on_thread(|| {
            let param = libc::sched_param { sched_priority: 1 };
            // SAFETY: sched_setscheduler(2) on the calling thread with a
            // valid sched_param.
            let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
            assert_eq!(rc, 0, "SCHED_FIFO needs root or CAP_SYS_NICE");
            assert_eq!(thread_slice(0).unwrap(), None);
            assert!(!set_thread_slice(0, Duration::from_micros(100)).unwrap());
            assert_eq!(get_attr(0).unwrap().sched_policy, libc::SCHED_FIFO as u32);
        });
    }
}
