//! Thread helpers on the live machine: pin the calling thread to a CPU, read
//! the CPUs it may run on, and find the CPU it runs on now, cheaply; and
//! [`LiveProbe`], the recorders' view of the calling thread built on them.
//!
//! [`current_cpu`] is glibc's `sched_getcpu`, which reads the kernel-maintained
//! rseq area (glibc >= 2.35) or the vDSO: no system call. Its cost is measured
//! in the `topology` criterion bench (`steer/topology/current_cpu`).

use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet as NixCpuSet};
use nix::unistd::Pid;
use steer_core::cpu::{CpuId, CpuSet, MAX_CPUS};
use steer_core::record::CpuProbe;

/// A failed thread call, with the OS error.
#[derive(Debug, thiserror::Error)]
pub enum ThreadError {
    /// `sched_setaffinity` refused (CPU offline, or outside the cgroup's cpuset).
    #[error("cannot pin thread to CPU {cpu}: {source} (is the CPU online and in this process's cpuset? see `taskset -p $$`)")]
    Pin {
        /// The CPU asked for.
        cpu: CpuId,
        /// The OS error.
        source: nix::Error,
    },
    /// `sched_getaffinity` failed.
    #[error("cannot read the thread's allowed CPUs: {0}")]
    Affinity(nix::Error),
    /// `sched_getcpu` failed.
    #[error("cannot read the current CPU: {0}")]
    CurrentCpu(nix::Error),
    /// An empty CPU set was given.
    #[error("cannot restrict a thread to an empty CPU set")]
    EmptySet,
    /// CPU id beyond what a `cpu_set_t` holds.
    #[error("CPU {0} is beyond the limit of {MAX_CPUS}")]
    OutOfRange(CpuId),
}

/// Pins the calling thread to `cpu` (`sched_setaffinity` on thread id 0).
///
/// ```no_run
/// steer_topology::thread::pin_current(0).unwrap();
/// assert_eq!(steer_topology::thread::current_cpu().unwrap(), 0);
/// ```
pub fn pin_current(cpu: CpuId) -> Result<(), ThreadError> {
    if cpu >= MAX_CPUS {
        return Err(ThreadError::OutOfRange(cpu));
    }
    set_allowed(&[cpu].into_iter().collect::<CpuSet>()).map_err(|e| match e {
        ThreadError::Pin { source, .. } => ThreadError::Pin { cpu, source },
        other => other,
    })
}

/// Restricts the calling thread to the CPUs of `set`.
pub fn set_allowed(set: &CpuSet) -> Result<(), ThreadError> {
    if set.is_empty() {
        return Err(ThreadError::EmptySet);
    }
    let mut raw = NixCpuSet::new();
    for cpu in set.iter() {
        raw.set(cpu).map_err(|_| ThreadError::OutOfRange(cpu))?;
    }
    sched_setaffinity(Pid::from_raw(0), &raw).map_err(|source| ThreadError::Pin {
        cpu: set.nth(0).unwrap_or(0),
        source,
    })
}

/// The CPUs the calling thread may run on (`sched_getaffinity`): what the
/// LLC rule checks as "the consuming thread is still allowed on the old CPU".
pub fn allowed_cpus() -> Result<CpuSet, ThreadError> {
    let raw = sched_getaffinity(Pid::from_raw(0)).map_err(ThreadError::Affinity)?;
    Ok((0..NixCpuSet::count().min(MAX_CPUS))
        .filter(|&cpu| raw.is_set(cpu).unwrap_or(false))
        .collect())
}

/// The CPU the calling thread runs on now. Only a hint: the scheduler may
/// move the thread right after, exactly as with the kernel's
/// `raw_smp_processor_id()` in `rps_record_sock_flow`.
pub fn current_cpu() -> Result<CpuId, ThreadError> {
    sched_getcpu().map_err(ThreadError::CurrentCpu)
}

/// The live [`CpuProbe`] for steer-core's `Recorder`: the current CPU from
/// [`current_cpu`] (rseq/vDSO, no system call) and the allowed set from
/// [`allowed_cpus`] (`sched_getaffinity`).
///
/// ```
/// use steer_core::record::CpuProbe;
/// let probe = steer_topology::thread::LiveProbe;
/// assert!(probe.allowed_cpus().contains(probe.current_cpu()));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveProbe;

impl CpuProbe for LiveProbe {
    fn current_cpu(&self) -> CpuId {
        // sched_getcpu cannot fail on Linux >= 2.6.19; 0 is a safe hint.
        current_cpu().unwrap_or(0)
    }

    fn allowed_cpus(&self) -> CpuSet {
        // On failure allow everything: the affinity rule then never forces.
        allowed_cpus().unwrap_or_else(|_| CpuSet::first(MAX_CPUS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_moves_the_thread_and_restores() {
        std::thread::spawn(|| {
            let before = allowed_cpus().unwrap();
            assert!(!before.is_empty());
            for cpu in before.iter() {
                pin_current(cpu).unwrap();
                assert_eq!(current_cpu().unwrap(), cpu);
                assert_eq!(
                    allowed_cpus().unwrap().iter().collect::<Vec<_>>(),
                    vec![cpu]
                );
            }
            set_allowed(&before).unwrap();
            assert_eq!(allowed_cpus().unwrap(), before);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn pin_to_missing_cpu_is_an_error_naming_it() {
        let err = pin_current(MAX_CPUS - 1).unwrap_err();
        assert!(
            err.to_string().contains(&format!("CPU {}", MAX_CPUS - 1)),
            "{err}"
        );
        assert!(matches!(
            pin_current(MAX_CPUS),
            Err(ThreadError::OutOfRange(_))
        ));
    }
}
