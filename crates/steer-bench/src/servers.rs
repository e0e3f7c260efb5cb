//! The servers under test, each started on the server's veth end and
//! stopped again: steer's echo server (an external command), the kernel
//! echo (this binary's `kernel-echo`), `sockperf server`, the XDP_TX
//! reflector (attached in process), the raw AF_XDP turnaround (this
//! binary's `afxdp-echo`), and two UDP proxies forwarding to a kernel echo
//! on loopback: `steer proxy` and its plain-tokio twin `steer proxy --io
//! kernel`.
//!
//! Invariants: a [`Running`](crate::servers::Running) server owns what it started (child process,
//! XDP program, RPS settings) and `Drop` ends and removes it, also on error
//! or Ctrl-C; processes are pinned to the server CPUs before they exec.
//! Started processes print a line with the word `ready` when they serve
//! (sockperf prints nothing: the generator's probe decides).

use std::{
    fs::{self, File},
    io::Read,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use steer_xdp::object::XdpObject;
use tracing::{debug, warn};

use crate::{cpustat, netns::RpsGuard, procs::tail, xdp};

/// A server kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// XDP_TX in the driver: the path with no server.
    Reflector,
    /// The raw AF_XDP rx->tx turnaround.
    Afxdp,
    /// steer's echo server.
    Steer,
    /// The recvmmsg/sendmmsg kernel echo with RPS/RFS.
    KernelEcho,
    /// `sockperf server` with RPS/RFS.
    Sockperf,
    /// `steer proxy` (flows to tokio tasks) in front of a loopback echo,
    /// in the layout `--proxy-runtime` names.
    SteerProxy,
    /// `steer proxy --runtime per-core` (each flow's task on a pinned
    /// current_thread runtime, one thread hop from steer's worker) in front
    /// of the same echo: the layout to compare with.
    SteerProxyPerCore,
    /// `steer proxy --io kernel` (plain tokio, SO_REUSEPORT, RPS/RFS) in
    /// front of the same echo.
    KernelProxy,
}

impl Kind {
    /// Every kind, in the order a run visits them.
    pub const ALL: [Kind; 8] = [
        Kind::Reflector,
        Kind::Afxdp,
        Kind::Steer,
        Kind::KernelEcho,
        Kind::Sockperf,
        Kind::SteerProxy,
        Kind::SteerProxyPerCore,
        Kind::KernelProxy,
    ];

    /// Short name (table rows, JSON keys, `--servers`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Reflector => "reflector",
            Kind::Afxdp => "afxdp",
            Kind::Steer => "steer",
            Kind::KernelEcho => "kernel-echo",
            Kind::Sockperf => "sockperf",
            Kind::SteerProxy => "steer-proxy",
            Kind::SteerProxyPerCore => "steer-proxy-per-core",
            Kind::KernelProxy => "kernel-proxy",
        }
    }

    /// Parses a short name.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether the kernel's socket path serves (RPS/RFS configured).
    pub fn is_kernel(self) -> bool {
        matches!(self, Kind::KernelEcho | Kind::Sockperf | Kind::KernelProxy)
    }

    /// Whether it forwards to a backend (a proxy) rather than answering.
    pub fn is_proxy(self) -> bool {
        matches!(
            self,
            Kind::SteerProxy | Kind::SteerProxyPerCore | Kind::KernelProxy
        )
    }
}

/// What the servers need to know.
#[derive(Debug, Clone)]
pub struct ServerEnv {
    /// The server's veth end.
    pub interface: String,
    /// Its address.
    pub addr: std::net::Ipv4Addr,
    /// The UDP port served.
    pub port: u16,
    /// Server CPUs.
    pub cpus: Vec<usize>,
    /// steer's echo command (words), `--interface ...` appended.
    pub steer_cmd: Vec<String>,
    /// The `steer` binary (the proxies are its `proxy` subcommand).
    pub steer_bin: String,
    /// This binary.
    pub self_exe: PathBuf,
    /// Where logs go.
    pub log_dir: PathBuf,
    /// Run the server end's NAPI in threads on the server CPUs (when the
    /// server attaches an XDP program).
    pub rx_on_server: bool,
    /// `steer proxy --runtime` of the steer proxy.
    pub proxy_runtime: String,
    /// Extra arguments of the kernel echo (e.g. `--busy-poll-us 50`).
    pub kernel_echo_args: Vec<String>,
}

/// A started server.
pub struct Running {
    /// Its kind.
    pub kind: Kind,
    child: Option<Child>,
    log: PathBuf,
    // Dropped after the child is stopped (see Drop).
    reflector: Option<XdpObject>,
    rps: Option<RpsGuard>,
    stats_json: Option<PathBuf>,
    /// The server end, when its NAPI runs in threads (`--rx-on receiver`).
    napi_if: Option<String>,
    /// A proxy's backend (a kernel echo on loopback).
    backend: Option<Child>,
}

impl ServerEnv {
    /// Where a steer server serves: `--interface IF --port P --cpus LIST`.
    fn serve_args(&self) -> [String; 6] {
        [
            "--interface".into(),
            self.interface.clone(),
            "--port".into(),
            self.port.to_string(),
            "--cpus".into(),
            cpu_list(&self.cpus),
        ]
    }
}

fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn spawn_pinned(argv: &[String], cpus: &[usize], log: &Path) -> Result<Child> {
    let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    crate::sys::pin_child(&mut cmd, cpus);
    cmd.spawn()
        .with_context(|| format!("starting {} (is it installed?)", argv[0]))
}

/// Waits until `child` writes a line with the word `ready` to `log` (at
/// most 60 s); an early exit is an error with its last words.
fn wait_ready(log: &Path, child: Option<&mut Child>, what: &str) -> Result<()> {
    let Some(child) = child else { return Ok(()) };
    let t = Instant::now();
    loop {
        if log_text(log).split_whitespace().any(|w| w == "ready") {
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            bail!("{what} exited early ({st}): {}", tail(log, 3));
        }
        if t.elapsed() > Duration::from_secs(60) {
            bail!("{what} did not say `ready` within 60 s: {}", tail(log, 3));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn log_text(log: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(log) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

impl Running {
    /// Starts `kind` and waits until it says it is ready (at most 60 s).
    pub fn start(kind: Kind, env: &ServerEnv) -> Result<Self> {
        let log = env.log_dir.join(format!("{}.log", kind.name()));
        let mut r = Running {
            kind,
            child: None,
            log: log.clone(),
            reflector: None,
            rps: None,
            stats_json: None,
            napi_if: None,
            backend: None,
        };
        if kind.is_kernel() {
            r.rps = Some(RpsGuard::configure(
                &env.interface,
                &crate::netns::cpu_mask(&env.cpus),
            )?);
        }
        let addr = format!("{}:{}", env.addr, env.port);
        let exe = env.self_exe.to_string_lossy().into_owned();
        let argv: Vec<String> = match kind {
            Kind::Reflector => {
                r.reflector = Some(xdp::attach_reflector(&env.interface, env.port)?);
                r.napi(env)?;
                return Ok(r);
            }
            Kind::Afxdp => vec![
                exe,
                "afxdp-echo".into(),
                "--interface".into(),
                env.interface.clone(),
                "--port".into(),
                env.port.to_string(),
                "--cpu".into(),
                env.cpus[0].to_string(),
            ],
            Kind::KernelEcho => {
                let mut v = vec![
                    exe,
                    "kernel-echo".into(),
                    "--addr".into(),
                    addr,
                    "--cpus".into(),
                    cpu_list(&env.cpus),
                ];
                v.extend(env.kernel_echo_args.iter().cloned());
                v
            }
            Kind::Sockperf => vec![
                "sockperf".into(),
                "server".into(),
                "-i".into(),
                env.addr.to_string(),
                "-p".into(),
                env.port.to_string(),
            ],
            Kind::SteerProxy | Kind::SteerProxyPerCore | Kind::KernelProxy => {
                let backend = format!("127.0.0.1:{}", env.port.wrapping_add(1));
                let echo = [
                    exe,
                    "kernel-echo".into(),
                    "--addr".into(),
                    backend.clone(),
                    "--cpus".into(),
                    cpu_list(&env.cpus),
                ];
                let echo_log = env.log_dir.join(format!("{}-backend.log", kind.name()));
                r.backend = Some(spawn_pinned(&echo, &env.cpus, &echo_log)?);
                wait_ready(&echo_log, r.backend.as_mut(), "the proxy's backend")?;
                let stats = env.log_dir.join(format!("{}-stats.json", kind.name()));
                r.stats_json = Some(stats.clone());
                let mut v = vec![env.steer_bin.clone(), "proxy".into()];
                match kind {
                    Kind::KernelProxy => v.extend(["--io".into(), "kernel".into()]),
                    Kind::SteerProxyPerCore => v.extend(["--runtime".into(), "per-core".into()]),
                    _ => v.extend(["--runtime".into(), env.proxy_runtime.clone()]),
                }
                v.extend(env.serve_args());
                v.extend(["--backend".into(), backend]);
                v.extend(["--stats-json".into(), stats.to_string_lossy().into_owned()]);
                v
            }
            Kind::Steer => {
                let stats = env.log_dir.join("steer-stats.json");
                r.stats_json = Some(stats.clone());
                let mut v = env.steer_cmd.clone();
                v.extend(env.serve_args());
                v.extend(["--no-table".into(), "--stats-json".into()]);
                v.push(stats.to_string_lossy().into_owned());
                v
            }
        };
        debug!(?argv, "starting {}", kind.name());
        r.child = Some(spawn_pinned(&argv, &env.cpus, &log)?);
        if kind == Kind::Sockperf {
            // It prints nothing useful when ready: the probe decides.
            std::thread::sleep(Duration::from_millis(300));
            r.check_alive()?;
            return Ok(r);
        }
        wait_ready(&log, r.child.as_mut(), kind.name())?;
        r.napi(env)?;
        Ok(r)
    }

    /// `--rx-on receiver`: the server end's NAPI threads on the server CPUs.
    fn napi(&mut self, env: &ServerEnv) -> Result<()> {
        if env.rx_on_server && !self.kind.is_kernel() {
            crate::napi::thread_and_pin(None, &env.interface, &env.cpus)?;
            self.napi_if = Some(env.interface.clone());
        }
        Ok(())
    }

    fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = &mut self.child {
            if let Some(st) = c.try_wait()? {
                bail!(
                    "{} exited early ({st}): {}",
                    self.kind.name(),
                    tail(&self.log, 3)
                );
            }
        }
        Ok(())
    }

    /// The process id of the server process (none for the reflector).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The process id of a proxy's backend.
    pub fn backend_pid(&self) -> Option<u32> {
        self.backend.as_ref().map(Child::id)
    }

    /// Where its threads ran and how much CPU each used, e.g.
    /// `pid 123 allowed 1: steer-w1@cpu1 (1.20 s)`.
    pub fn where_it_ran(&self) -> String {
        let napi = self
            .napi_if
            .as_deref()
            .and_then(crate::napi::describe)
            .map(|d| format!("; receive path (NAPI threads): {d}"))
            .unwrap_or_default();
        let main = match self.pid() {
            None if self.napi_if.is_some() => "XDP program in the driver".into(),
            None => "XDP program in the driver: runs in the softirq of the CPU that sends".into(),
            Some(pid) => format!(
                "pid {pid}, allowed CPUs {}: {}",
                cpustat::allowed_cpus(pid).unwrap_or_else(|| "?".into()),
                cpustat::describe(&cpustat::threads(pid), 0.05)
            ),
        };
        main + &napi
    }

    /// Stops it: SIGINT, then SIGKILL after 10 s. Returns its last output
    /// line and, for steer, its `--stats-json`; or why it failed.
    pub fn stop(mut self) -> Result<(String, Option<serde_json::Value>)> {
        let out = self.stop_child();
        self.reflector = None;
        self.rps = None;
        let stats = self.stats_json.as_deref().and_then(read_json);
        out.map(|last| (last, stats))
    }

    fn stop_child(&mut self) -> Result<String> {
        let out = self.stop_server();
        // A proxy's backend goes after the proxy, whatever the proxy did.
        if let Some(b) = self.backend.take() {
            let _ = stop_process(b, "the proxy's backend");
        }
        out
    }

    fn stop_server(&mut self) -> Result<String> {
        let Some(c) = self.child.take() else {
            return Ok(String::new());
        };
        let status = stop_process(c, self.kind.name())?;
        let last = tail(&self.log, 1);
        // sockperf server exits with a signal status; steer's echo must exit 0.
        if !status.success() && self.kind != Kind::Sockperf {
            bail!(
                "{} exited with {status}: {}",
                self.kind.name(),
                tail(&self.log, 3)
            );
        }
        Ok(last)
    }
}

/// SIGINT, then SIGKILL after 10 s; the exit status.
fn stop_process(mut c: Child, what: &str) -> Result<std::process::ExitStatus> {
    let _ = crate::sys::interrupt(c.id());
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait()? {
            return Ok(st);
        }
        if t.elapsed() > Duration::from_secs(10) {
            warn!("{what} ignored SIGINT for 10 s: killing it");
            let _ = c.kill();
            return Ok(c.wait()?);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Err(e) = self.stop_child() {
            warn!("{e:#}");
        }
    }
}

/// Reads a file into a JSON value, if it is one.
pub fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&fs::read_to_string(path).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_by_name_and_what_they_are() {
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.name()), Some(k));
        }
        assert_eq!(
            Kind::parse("steer-proxy-per-core"),
            Some(Kind::SteerProxyPerCore)
        );
        assert_eq!(Kind::parse("Steer"), None);
        let proxies: Vec<&str> = Kind::ALL
            .iter()
            .filter(|k| k.is_proxy())
            .map(|k| k.name())
            .collect();
        assert_eq!(
            proxies,
            ["steer-proxy", "steer-proxy-per-core", "kernel-proxy"]
        );
        let kernel: Vec<&str> = Kind::ALL
            .iter()
            .filter(|k| k.is_kernel())
            .map(|k| k.name())
            .collect();
        assert_eq!(kernel, ["kernel-echo", "sockperf", "kernel-proxy"]);
    }

    #[test]
    fn steer_servers_are_told_where_to_serve() {
        let env = ServerEnv {
            interface: "sb1h".into(),
            addr: std::net::Ipv4Addr::new(198, 18, 0, 1),
            port: 11111,
            cpus: vec![0, 1, 3],
            steer_cmd: vec!["steer".into(), "echo".into()],
            steer_bin: "steer".into(),
            self_exe: PathBuf::from("steer-bench"),
            log_dir: PathBuf::from("/tmp"),
            rx_on_server: false,
            proxy_runtime: "worker".into(),
            kernel_echo_args: Vec::new(),
        };
        assert_eq!(
            env.serve_args(),
            ["--interface", "sb1h", "--port", "11111", "--cpus", "0,1,3"]
        );
        assert_eq!(cpu_list(&[]), "");
    }
}
