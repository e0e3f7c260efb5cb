//! The scheduling slice (Linux >= 6.12, EEVDF) of another process's
//! threads: `steer-bench compare-kernel` gives `sockperf server` the slice
//! steer's workers ask for (100 us by default), so both servers are
//! scheduled alike.
//!
//! Only the slice changes: each thread's policy and nice value are read
//! with `sched_getattr` and written back; threads under a real-time or
//! deadline policy are left alone.

#![allow(unsafe_code)] // sched_getattr/sched_setattr: no safe wrapper exists

use std::{fs, io, time::Duration};

use anyhow::{Context, Result};

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

/// Gives thread `tid` the slice `slice`; `false` (nothing changed) when
/// it is not in the fair class.
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

/// The slice thread `tid` of process `pid` runs with, ns (`se.slice` of
/// /proc/PID/task/TID/sched), when the kernel shows it.
pub fn thread_slice_ns(pid: u32, tid: i32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/sched")).ok()?;
    text.lines()
        .find(|l| l.starts_with("se.slice"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

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
        let attr = get_attr(tid);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(changed.unwrap(), 1);
        assert_eq!(attr.unwrap().sched_runtime, 300_000);
        // The kernel shows the slice it uses (when it has EEVDF slices).
        if let Some(ns) = now {
            assert_eq!(ns, 300_000);
        }
        assert!(set_process_slice(u32::MAX, Duration::from_micros(300)).is_err());
    }
}
