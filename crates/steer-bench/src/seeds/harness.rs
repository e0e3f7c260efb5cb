//! What every seed run shares: one measurement at a time (the seeds lock),
//! a work directory for logs (kept with `--keep-logs`, else removed), log
//! lines with the time since start, sleeps that end on Ctrl-C, where the
//! `steer` command and the source tree are, the machine as JSON, and small
//! checks (CPUs online, a free UDP or TCP port).
//!
//! Invariants: the lock is held for the life of the [`Harness`] (runs
//! sharing the two CPUs would measure each other); the work directory is
//! removed when the harness is dropped, after copying it to the
//! `--keep-logs` directory if one was given.

use std::{
    fs::{self, File},
    net::Ipv4Addr,
    os::fd::AsFd,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// The lock every seed run takes.
pub const LOCK_PATH: &str = "/run/lock/steer-seeds.lock";

/// One seed run's shared state.
pub struct Harness {
    /// Log prefix (`llc-updates`).
    pub name: &'static str,
    /// Logs and intermediate files.
    pub work: PathBuf,
    keep: Option<PathBuf>,
    start: Instant,
    stop: &'static AtomicBool,
    _lock: File,
}

impl Harness {
    /// Takes the seeds lock (waiting up to 10 min when another run holds
    /// it) and makes a work directory.
    pub fn new(name: &'static str, keep_logs: Option<PathBuf>) -> Result<Self> {
        Self::locked(
            name,
            keep_logs,
            Path::new(LOCK_PATH),
            Duration::from_secs(600),
        )
    }

    /// Takes the lock `lock_path` (waiting up to `wait` when another run
    /// holds it) and makes a work directory.
    pub fn locked(
        name: &'static str,
        keep_logs: Option<PathBuf>,
        lock_path: &Path,
        wait: Duration,
    ) -> Result<Self> {
        let stop = steer_xdp::shutdown::install().context("installing signal handlers")?;
        let lock = lock(lock_path, name, stop, wait)?;
        let work = std::env::temp_dir().join(format!("steer-{name}.{}", std::process::id()));
        let _ = fs::remove_dir_all(&work);
        fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        Ok(Harness {
            name,
            work,
            keep: keep_logs,
            start: Instant::now(),
            stop,
            _lock: lock,
        })
    }

    /// A path in the work directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.work.join(file)
    }

    /// `llc-updates [+12s]: msg` on stderr.
    pub fn log(&self, msg: &str) {
        eprintln!(
            "{} [+{}s]: {msg}",
            self.name,
            self.start.elapsed().as_secs()
        );
    }

    /// Fails with "interrupted" once SIGINT or SIGTERM arrived.
    pub fn check(&self) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            bail!("{}: interrupted", self.name);
        }
        Ok(())
    }

    /// The flag SIGINT and SIGTERM set.
    pub fn stop_flag(&self) -> &'static AtomicBool {
        self.stop
    }

    /// Sleeps `d`, ending early with an error on SIGINT/SIGTERM.
    pub fn sleep(&self, d: Duration) -> Result<()> {
        let end = Instant::now() + d;
        loop {
            self.check()?;
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            std::thread::sleep((end - now).min(Duration::from_millis(50)));
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(keep) = &self.keep {
            match copy_dir(&self.work, keep) {
                Ok(()) => self.log(&format!("logs kept in {}", keep.display())),
                Err(e) => self.log(&format!(
                    "could not keep the logs in {}: {e:#}",
                    keep.display()
                )),
            }
        }
        let _ = fs::remove_dir_all(&self.work);
    }
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for e in fs::read_dir(from)? {
        let e = e?;
        if e.file_type()?.is_file() {
            fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// One measurement at a time: takes the exclusive lock on the file `path`
/// (made when missing), waiting up to `wait` while another process holds
/// it; fails when `stop` is set while waiting (SIGINT, SIGTERM) or the wait
/// runs out. The lock lasts as long as the returned file is open. `name`
/// starts the messages.
pub fn lock(path: &Path, name: &str, stop: &AtomicBool, wait: Duration) -> Result<File> {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening the lock file {}", path.display()))?;
    if crate::sys::lock_exclusive(f.as_fd(), false)? {
        return Ok(f);
    }
    eprintln!(
        "{name}: another measurement holds {}: waiting (up to {} min)",
        path.display(),
        wait.as_secs() / 60
    );
    let t = Instant::now();
    while t.elapsed() < wait {
        if stop.load(Ordering::Relaxed) {
            bail!("{name}: interrupted while waiting for {}", path.display());
        }
        std::thread::sleep(Duration::from_millis(200));
        if crate::sys::lock_exclusive(f.as_fd(), false)? {
            return Ok(f);
        }
    }
    bail!("{name}: gave up waiting for {}", path.display())
}

/// Fails with what to do unless the process runs as root.
pub fn require_root(what: &str) -> Result<()> {
    if !crate::sys::is_root() {
        bail!("run as root ({what}): sudo steer-bench seed ...");
    }
    Ok(())
}

/// Fails unless `tool` is an executable in PATH.
pub fn require_tool(tool: &str) -> Result<()> {
    if crate::procs::find_in_path(tool).is_none() {
        bail!("'{tool}' not found (apt-get install it; scripts/setup.sh installs what the repository needs)");
    }
    Ok(())
}

/// Fails unless CPUs 0 and 1 are online (the seeds pin to them).
pub fn require_cpus_0_1(what: &str) -> Result<()> {
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let cpus = crate::args::parse_cpu_list(&online).unwrap_or_default();
    if !(cpus.contains(&0) && cpus.contains(&1)) {
        bail!(
            "needs CPUs 0 and 1 online ({what}; online: {})",
            online.trim()
        );
    }
    Ok(())
}

/// The `steer` command: `explicit` (`--steer`, `$STEER`), else the `steer`
/// binary next to this one.
pub fn steer_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("finding this binary")?
            .with_file_name("steer"),
    };
    if !path.is_file() {
        bail!(
            "the steer command {} not found: build it (cargo build --release -p flowsteer-cli) or name it with --steer / STEER",
            path.display()
        );
    }
    Ok(path)
}

/// The source tree the criterion benches build and run in: `explicit`
/// (`--src`, `$STEER_SRC`), else the workspace this binary was built from.
pub fn source_tree(explicit: Option<&Path>) -> Result<PathBuf> {
    let dir = match explicit {
        Some(p) => p.to_path_buf(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    };
    let dir = dir
        .canonicalize()
        .with_context(|| format!("the source tree {}", dir.display()))?;
    if !dir.join("Cargo.toml").is_file() {
        bail!(
            "{} has no Cargo.toml: name steer's source tree with --src / STEER_SRC",
            dir.display()
        );
    }
    Ok(dir)
}

/// Whether a UDP socket in this network namespace has `port` bound (any
/// address), from /proc/net/udp and udp6.
pub fn udp_bound(port: u16) -> bool {
    ["/proc/net/udp", "/proc/net/udp6"].iter().any(|f| {
        bound_ports(&fs::read_to_string(f).unwrap_or_default())
            .iter()
            .any(|&(_, p)| p == port)
    })
}

/// Whether a UDP socket in this network namespace is bound to exactly
/// `addr`:`port` (a wildcard socket on `port` does not count).
pub fn udp_bound_on(addr: Ipv4Addr, port: u16) -> bool {
    bound_ports(&fs::read_to_string("/proc/net/udp").unwrap_or_default())
        .contains(&(Some(addr), port))
}

/// The local addresses of a /proc/net/udp (or udp6) table:
/// `local_address` is `HEXADDR:HEXPORT`, the IPv4 address as the kernel
/// holds it (network order, printed as a native-endian word); IPv6
/// addresses come back as `None`.
pub fn bound_ports(table: &str) -> Vec<(Option<Ipv4Addr>, u16)> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|a| a.rsplit_once(':'))
        .filter_map(|(a, p)| {
            let port = u16::from_str_radix(p, 16).ok()?;
            let v4 = (a.len() == 8)
                .then(|| u32::from_str_radix(a, 16).ok())
                .flatten()
                .map(|w| Ipv4Addr::from(w.to_ne_bytes()));
            Some((v4, port))
        })
        .collect()
}

/// The first UDP port from `base` up that nothing in this network namespace
/// has bound.
pub fn free_udp_port(base: u16) -> Result<u16> {
    (base..=u16::MAX)
        .find(|&p| !udp_bound(p))
        .with_context(|| format!("no free UDP port from {base} up"))
}

/// Whether a TCP socket in this network namespace (listening or
/// connected, any address) has local port `port`, from /proc/net/tcp and
/// tcp6.
pub fn tcp_bound(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        bound_ports(&fs::read_to_string(f).unwrap_or_default())
            .iter()
            .any(|&(_, p)| p == port)
    })
}

/// The first TCP port from `base` up that no socket in this network
/// namespace uses.
pub fn free_tcp_port(base: u16) -> Result<u16> {
    (base..=u16::MAX)
        .find(|&p| !tcp_bound(p))
        .with_context(|| format!("no free TCP port from {base} up"))
}

/// Waits until something has `addr`:`port` (UDP) bound (at most
/// `timeout`), while `alive` says its owner still runs.
pub fn wait_udp_bound(
    addr: Ipv4Addr,
    port: u16,
    timeout: Duration,
    mut alive: impl FnMut() -> bool,
) -> bool {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if udp_bound_on(addr, port) {
            return true;
        }
        if !alive() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Writes `value` to the sysfs file `path` as seen inside namespace `ns`
/// (`ip netns exec` mounts the namespace's /sys).
pub fn write_in_ns(ns: &str, path: &str, value: &str) -> Result<()> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "sh",
            "-c",
            "echo \"$1\" > \"$2\"",
            "sh",
            value,
            path,
        ])
        .output()
        .context("running ip netns exec")?;
    if !out.status.success() {
        bail!(
            "writing {value} to {path} in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The machine and its load now, and the tree measured, as the seeds
/// record it: `{kernel, cpus, loadavg_1_5_15, steer_src, steer_commit}`.
pub fn host_json(src: &Path) -> Value {
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    json!({
        "kernel": kernel.trim(),
        "cpus": cpus,
        "loadavg_1_5_15": load.join(" "),
        "steer_src": src.to_string_lossy(),
        "steer_commit": commit(src),
    })
}

/// `git rev-parse HEAD` of `src` (`+dirty` when it has changes), else the
/// contents of `src/.commit`, else empty.
fn commit(src: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(src)
            .args(args)
            .output()
            .ok()
    };
    match git(&["rev-parse", "HEAD"]).filter(|o| o.status.success()) {
        Some(o) => {
            let mut c = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            let clean = git(&["diff", "--quiet", "HEAD", "--"]).is_some_and(|o| o.status.success());
            if !clean {
                c.push_str("+dirty");
            }
            c
        }
        None => fs::read_to_string(src.join(".commit"))
            .unwrap_or_default()
            .trim()
            .to_owned(),
    }
}

/// The output of `steer topology` (empty when it fails).
pub fn steer_topology(steer: &Path) -> String {
    Command::new(steer)
        .arg("topology")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// The CPU clock tick (/proc/PID/stat units).
pub fn clk_tck() -> f64 {
    crate::sys::ticks_per_sec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_held_lock_is_waited_for_then_given_up_or_interrupted() {
        let path = std::env::temp_dir().join(format!("sb-lock-{}", std::process::id()));
        let calm = AtomicBool::new(false);
        let held = lock(&path, "t", &calm, Duration::ZERO).unwrap();
        let e = lock(&path, "t", &calm, Duration::from_millis(300)).unwrap_err();
        assert!(e.to_string().contains("gave up waiting"), "{e}");
        let stopped = AtomicBool::new(true);
        let e = lock(&path, "t", &stopped, Duration::from_secs(60)).unwrap_err();
        assert!(e.to_string().contains("interrupted"), "{e}");
        drop(held);
        assert!(
            lock(&path, "t", &calm, Duration::ZERO).is_ok(),
            "free again"
        );
        let _ = fs::remove_file(&path);
    }

    #[test]
    fn free_ports_are_free() {
        let table = "  sl  local_address rem_address   st\n\
             \x20  1: 0100007F:1B58 00000000:0000 07\n\
             \x20  2: 00000000:4269 00000000:0000 07\n";
        let lo = Ipv4Addr::LOCALHOST;
        if cfg!(target_endian = "little") {
            assert_eq!(
                bound_ports(table),
                vec![(Some(lo), 7000), (Some(Ipv4Addr::UNSPECIFIED), 17001)]
            );
        }
        // A port below the ephemeral range (32768 and up by default):
        // nothing binds it by chance, so once dropped it stays free (an
        // ephemeral one was taken again by another test now and then).
        let first = 20_000 + (std::process::id() % 10_000) as u16;
        let held = (first..32_000)
            .find_map(|p| UdpSocket::bind(("127.0.0.1", p)).ok())
            .unwrap();
        let p = held.local_addr().unwrap().port();
        assert!(udp_bound(p));
        assert!(udp_bound_on(lo, p));
        assert!(!udp_bound_on(Ipv4Addr::new(127, 0, 0, 2), p));
        assert_ne!(free_udp_port(p).unwrap(), p, "a bound port is not free");
        assert!(wait_udp_bound(lo, p, Duration::from_millis(100), || true));
        drop(held);
        assert!(!wait_udp_bound(lo, p, Duration::from_millis(100), || false));
    }

    #[test]
    fn free_tcp_ports_are_free() {
        let held = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let p = held.local_addr().unwrap().port();
        assert!(tcp_bound(p), "a listening socket's port is in use");
        assert!(free_tcp_port(p).unwrap() > p, "the next one up, not {p}");
    }

    #[test]
    fn the_host_names_the_tree() {
        let src = source_tree(None).unwrap();
        let h = host_json(&src);
        assert!(h["cpus"].as_u64().unwrap() >= 1);
        assert_eq!(h["loadavg_1_5_15"].as_str().unwrap().split(' ').count(), 3);
        assert!(h["steer_commit"].is_string(), "{h}");
        assert_eq!(h["steer_src"].as_str(), src.to_str());
    }
}
