//! Where the CPU time went: whole-machine and per-CPU busy time and the
//! machine's context switches from /proc/stat, which CPUs a process's
//! threads ran on and how often they were switched out (/proc/PID/task).
//!
//! Busy time is user + nice + system + irq + softirq: every context that
//! runs on the machine's behalf (guest time is already inside user); idle,
//! iowait and steal (the hypervisor's) are not busy.

use std::{fs, io};

use serde::Serialize;

/// One /proc/stat reading: busy and total ticks (USER_HZ) per CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSample {
    /// (busy, softirq, total) ticks of each CPU, by CPU number.
    pub cpus: Vec<(u64, u64, u64)>,
    /// Context switches on all CPUs since boot (`ctxt`).
    pub ctxt: u64,
}

/// Parses /proc/stat text.
pub fn parse_stat(text: &str) -> CpuSample {
    let mut cpus = Vec::new();
    let mut ctxt = 0;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let Some(name) = it.next() else { continue };
        if name == "ctxt" {
            ctxt = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            continue;
        }
        let Some(num) = name.strip_prefix("cpu").filter(|n| !n.is_empty()) else {
            continue;
        };
        let Ok(cpu) = num.parse::<usize>() else {
            continue;
        };
        let v: Vec<u64> = it.filter_map(|x| x.parse().ok()).collect();
        let get = |i: usize| v.get(i).copied().unwrap_or(0);
        // user nice system idle iowait irq softirq steal guest guest_nice
        let busy = get(0) + get(1) + get(2) + get(5) + get(6);
        let total = busy + get(3) + get(4) + get(7);
        if cpus.len() <= cpu {
            cpus.resize(cpu + 1, (0, 0, 0));
        }
        cpus[cpu] = (busy, get(6), total);
    }
    CpuSample { cpus, ctxt }
}

/// Reads /proc/stat now.
pub fn sample() -> io::Result<CpuSample> {
    Ok(parse_stat(&fs::read_to_string("/proc/stat")?))
}

pub use crate::sys::ticks_per_sec;

/// CPU use between two samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CpuUse {
    /// Busy CPU-seconds over all CPUs.
    pub busy_secs: f64,
    /// Busy share of each CPU (0..1).
    pub per_cpu_busy: Vec<f64>,
    /// Softirq share of each CPU (0..1).
    pub per_cpu_softirq: Vec<f64>,
    /// Context switches on all CPUs.
    pub context_switches: u64,
}

/// What happened between `a` and `b`.
pub fn delta(a: &CpuSample, b: &CpuSample, hz: f64) -> CpuUse {
    let mut out = CpuUse {
        context_switches: b.ctxt.saturating_sub(a.ctxt),
        ..CpuUse::default()
    };
    for (x, y) in a.cpus.iter().zip(&b.cpus) {
        let busy = y.0.saturating_sub(x.0) as f64;
        let soft = y.1.saturating_sub(x.1) as f64;
        let total = y.2.saturating_sub(x.2) as f64;
        out.busy_secs += busy / hz;
        out.per_cpu_busy
            .push(if total > 0.0 { busy / total } else { 0.0 });
        out.per_cpu_softirq
            .push(if total > 0.0 { soft / total } else { 0.0 });
    }
    out
}

/// CPU seconds (user + system) used so far by every user-space process
/// that is neither this process nor one of its children: other people's
/// work, which a whole-machine measurement cannot tell from ours. Kernel
/// threads (softirq, workers) are part of the path and not counted.
pub fn foreign_cpu_secs() -> f64 {
    let me = std::process::id();
    let hz = ticks_per_sec();
    let Ok(dir) = fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for e in dir.filter_map(|e| e.ok()) {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(text) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = text.rfind(')') else {
            continue;
        };
        let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
        let field = |n: usize| rest.get(n - 3).and_then(|s| s.parse::<u64>().ok());
        const PF_KTHREAD: u64 = 0x0020_0000;
        let (Some(ppid), Some(flags), Some(ut), Some(st)) =
            (field(4), field(9), field(14), field(15))
        else {
            continue;
        };
        if pid == me || ppid == u64::from(me) || flags & PF_KTHREAD != 0 {
            continue;
        }
        ticks += ut + st;
    }
    ticks as f64 / hz
}

/// One thread of a process: its name, the CPU it last ran on, its CPU time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadCpu {
    /// Thread id.
    pub tid: u32,
    /// `comm`.
    pub name: String,
    /// The CPU it last ran on.
    pub last_cpu: u32,
    /// user + system seconds so far.
    pub cpu_secs: f64,
}

/// Parses one /proc/PID/task/TID/stat line.
pub fn parse_task_stat(text: &str, hz: f64) -> Option<ThreadCpu> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let tid = text[..open].trim().parse().ok()?;
    let name = text[open + 1..close].to_owned();
    // Fields after the name, numbered from 3 (state) in proc(5).
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).and_then(|s| s.parse::<u64>().ok());
    Some(ThreadCpu {
        tid,
        name,
        last_cpu: u32::try_from(field(39)?).ok()?,
        cpu_secs: (field(14)? + field(15)?) as f64 / hz,
    })
}

/// The threads of process `pid` (empty when it is gone).
pub fn threads(pid: u32) -> Vec<ThreadCpu> {
    let hz = ticks_per_sec();
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<ThreadCpu> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| parse_task_stat(&s, hz))
        .collect();
    out.sort_by_key(|t| t.tid);
    out
}

/// What the threads of a process did so far: their context switches
/// (voluntary: a thread blocked or slept; involuntary: it was preempted,
/// e.g. by other processes) and their CPU time (the scheduler's exact
/// `sum_exec_runtime`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskTotals {
    /// Voluntary context switches.
    pub voluntary: u64,
    /// Involuntary context switches.
    pub involuntary: u64,
    /// CPU time, nanoseconds.
    pub cpu_ns: u64,
}

impl TaskTotals {
    /// What happened between `self` (earlier) and `later`.
    pub fn since(self, later: TaskTotals) -> TaskTotals {
        TaskTotals {
            voluntary: later.voluntary.saturating_sub(self.voluntary),
            involuntary: later.involuntary.saturating_sub(self.involuntary),
            cpu_ns: later.cpu_ns.saturating_sub(self.cpu_ns),
        }
    }
}

/// The totals of every thread of process `pid`, from /proc/PID/task/*/status
/// and schedstat (zero when it is gone). Threads that ended in between are
/// not counted.
pub fn task_totals(pid: u32) -> TaskTotals {
    let mut t = TaskTotals::default();
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return t;
    };
    for e in dir.filter_map(|e| e.ok()) {
        if let Ok(status) = fs::read_to_string(e.path().join("status")) {
            let (v, i) = parse_switches(&status);
            t.voluntary += v;
            t.involuntary += i;
        }
        if let Ok(sched) = fs::read_to_string(e.path().join("schedstat")) {
            t.cpu_ns += sched
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    t
}

/// (voluntary, involuntary) context switches in a `status` file's text.
pub fn parse_switches(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    (
        field("voluntary_ctxt_switches:"),
        field("nonvoluntary_ctxt_switches:"),
    )
}

/// `Cpus_allowed_list` of process `pid`.
pub fn allowed_cpus(pid: u32) -> Option<String> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_owned())
}

/// "name@cpuN (1.23 s)" for the threads that used at least `min_secs`.
pub fn describe(threads: &[ThreadCpu], min_secs: f64) -> String {
    let busy: Vec<String> = threads
        .iter()
        .filter(|t| t.cpu_secs >= min_secs)
        .map(|t| format!("{}@cpu{} ({:.2} s)", t.name, t.last_cpu, t.cpu_secs))
        .collect();
    if busy.is_empty() {
        "no thread used CPU".into()
    } else {
        busy.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_and_deltas() {
        let a = parse_stat(
            "cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 5 0 5 50 0 0 0 0 0 0\ncpu1 5 0 5 50 0 0 0 0 0 0\nintr 1\nctxt 1000\n",
        );
        let b = parse_stat(
            "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 55 0 5 50 0 0 50 0 0 0\ncpu1 5 0 5 150 0 0 0 7 0 0\nctxt 1500\n",
        );
        assert_eq!(a.cpus.len(), 2);
        let d = delta(&a, &b, 100.0);
        assert!((d.busy_secs - 1.0).abs() < 1e-9, "{d:?}");
        assert_eq!(d.per_cpu_busy, vec![1.0, 0.0]);
        assert_eq!(d.per_cpu_softirq, vec![0.5, 0.0]);
        assert_eq!(d.context_switches, 500);
    }

    #[test]
    fn switches_of_a_status_file_and_of_this_process() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(parse_switches(status), (12, 3));
        let a = task_totals(std::process::id());
        std::thread::sleep(std::time::Duration::from_millis(2));
        // Spin until the process's CPU time has grown by 4 ms (on a loaded
        // machine that takes longer than 4 ms of wall time); if it never
        // grows, the wall-clock bound ends the loop and the check fails.
        let spin = std::time::Instant::now();
        let mut d = a.since(task_totals(std::process::id()));
        while d.cpu_ns < 4_000_000 && spin.elapsed() < std::time::Duration::from_secs(10) {
            for _ in 0..10_000 {
                std::hint::spin_loop();
            }
            d = a.since(task_totals(std::process::id()));
        }
        assert!(d.voluntary >= 1, "{d:?}");
        assert!(d.cpu_ns >= 4_000_000, "{d:?}");
    }

    #[test]
    fn task_stat_with_spaces_in_the_name() {
        let line = "4242 (steer w 1) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0 20 0 1 0 100 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0 0";
        let t = parse_task_stat(line, 100.0).unwrap();
        assert_eq!((t.tid, t.name.as_str(), t.last_cpu), (4242, "steer w 1", 1));
        assert!((t.cpu_secs - 2.0).abs() < 1e-9);
        assert!(threads(std::process::id())
            .iter()
            .any(|t| t.tid == std::process::id()));
    }
}
