//! The scheduling slice (Linux >= 6.12, EEVDF) of another process's
//! threads: `steer-bench compare-kernel` gives `sockperf server` the slice
//! steer's workers ask for (100 us by default), so both servers are
//! scheduled alike.
//!
//! Each thread goes through [`steer_xdp::sched::set_thread_slice`], the one
//! place that speaks `sched_setattr` (only the slice changes; real-time
//! threads are left alone); this module only walks a process's threads.

use std::{fs, time::Duration};

use anyhow::{Context, Result};
use steer_xdp::sched::set_thread_slice;

/// Gives every thread of process `pid` the slice `slice`; how many were
/// changed (real-time threads are left alone). Fails on the first thread
/// that refuses.
pub fn set_process_slice(pid: u32, slice: Duration) -> Result<usize> {
    let dir = format!("/proc/{pid}/task");
    let mut changed = 0;
    for e in fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let Some(tid) = e?.file_name().to_str().and_then(|t| t.parse::<i32>().ok()) else {
            continue;
        };
        if set_thread_slice(tid, slice)
            .with_context(|| format!("sched_setattr on thread {tid} of {pid}"))?
        {
            changed += 1;
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slice thread `tid` of process `pid` runs with, ns (`se.slice` of
    /// /proc/PID/task/TID/sched), when the kernel shows it.
    fn thread_slice_ns(pid: u32, tid: i32) -> Option<u64> {
        let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/sched")).ok()?;
        text.lines()
            .find(|l| l.starts_with("se.slice"))?
            .split(':')
            .nth(1)?
            .trim()
            .parse()
            .ok()
    }

    #[test]
    fn every_thread_of_a_child_gets_the_slice() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let changed = set_process_slice(pid, Duration::from_micros(300));
        let tid = i32::try_from(pid).unwrap();
        let now = thread_slice_ns(pid, tid);
        let attr = steer_xdp::sched::thread_slice(tid);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(changed.unwrap(), 1);
        assert_eq!(attr.unwrap(), Some(Duration::from_micros(300)));
        // The kernel shows the slice it uses (when it has EEVDF slices).
        if let Some(ns) = now {
            assert_eq!(ns, 300_000);
        }
        assert!(set_process_slice(u32::MAX, Duration::from_micros(300)).is_err());
    }
}
