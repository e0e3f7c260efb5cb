//! Live control of a running engine (`steer ctl`): the changes an operator
//! may make ([`Control`], one text line each) and how the engine applies
//! them ([`Controls`]), on the same shared state the library's setters
//! write.
//!
//! The grammar, one request per line:
//!
//! | line | effect |
//! |---|---|
//! | `policy llc` / `policy always` | the desired table's update policy |
//! | `fast-path on` / `off` | the same-CPU fast path |
//! | `flow-limit on` / `off` | the per-CPU flow limit |
//! | `balance on` / `off` | the load balancer |
//! | `pin CPU flow FLOW` | steer one flow to a worker CPU (FLOW as [`FlowKey`](steer_core::flow::FlowKey) prints it) |
//! | `unpin flow FLOW` | let it follow its consumer again |
//! | `pin CPU port PORT` / `unpin port PORT` | the same for every flow to a local port |
//!
//! Invariants: parsing never touches the engine; a change is applied only
//! when it is valid (a pin names a worker CPU of this engine); every
//! outcome is one line, the applied state on success, what to do on error.
//! Who may send these is the stats socket's business
//! ([`crate::observe::endpoint`]: root or the engine's own user, by `SO_PEERCRED`).

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::Ordering;

use steer_core::cpu::{CpuId, CpuSet};
use steer_core::dispatch::Shared;
use steer_core::flow::{AnyHasher, FlowHasher, FlowKey};
use steer_core::policy::Policy;

/// One change to a running engine (see the module docs for the grammar).
///
/// ```
/// use steer_engine::engine::Control;
/// let c: Control = "pin 1 flow udp 10.0.0.1:5000 -> 10.0.0.2:53".parse().unwrap();
/// assert_eq!(c.to_string(), "pin 1 flow udp 10.0.0.1:5000 -> 10.0.0.2:53");
/// assert!("policy sometimes".parse::<Control>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// The desired table's update policy for later records.
    Policy(Policy),
    /// The same-CPU fast path on or off.
    FastPath(bool),
    /// The per-CPU flow limit on or off.
    FlowLimit(bool),
    /// The load balancer on or off.
    Balance(bool),
    /// Steer this flow to this worker CPU whatever its consumer does.
    PinFlow(FlowKey, CpuId),
    /// Let this flow follow its consumer again.
    UnpinFlow(FlowKey),
    /// Steer every flow to this local port to this worker CPU.
    PinPort(u16, CpuId),
    /// Let the flows to this port follow their consumers again.
    UnpinPort(u16),
}

/// Why a control line did not parse (one line, with what to write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlParseError(String);

impl fmt::Display for ControlParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ControlParseError {}

const USAGE: &str = "write `policy llc|always`, `fast-path on|off`, `flow-limit on|off`, \
     `balance on|off`, `pin CPU flow FLOW`, `unpin flow FLOW`, `pin CPU port PORT` or \
     `unpin port PORT`";

fn bad(what: impl fmt::Display) -> ControlParseError {
    ControlParseError(format!("{what}: {USAGE}"))
}

fn switch(word: Option<&str>, name: &str) -> Result<bool, ControlParseError> {
    match word {
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(w) => Err(bad(format!("`{name} {w}`: {name} is on or off"))),
        None => Err(bad(format!("`{name}` needs on or off"))),
    }
}

fn port(word: Option<&str>) -> Result<u16, ControlParseError> {
    let w = word.ok_or_else(|| bad("no port given"))?;
    w.parse::<u16>()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| bad(format!("port `{w}` is not a number from 1 to 65535")))
}

fn flow(words: &[&str]) -> Result<FlowKey, ControlParseError> {
    words
        .join(" ")
        .parse::<FlowKey>()
        .map_err(|e| ControlParseError(e.to_string()))
}

impl FromStr for Control {
    type Err = ControlParseError;

    fn from_str(line: &str) -> Result<Self, Self::Err> {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["policy", "llc"] => Ok(Self::Policy(Policy::LlcAffinity)),
            ["policy", "always"] => Ok(Self::Policy(Policy::Always)),
            ["policy", rest @ ..] => Err(bad(format!(
                "`policy {}`: the policy is llc or always",
                rest.join(" ")
            ))),
            ["fast-path", rest @ ..] if rest.len() <= 1 => {
                switch(rest.first().copied(), "fast-path").map(Self::FastPath)
            }
            ["flow-limit", rest @ ..] if rest.len() <= 1 => {
                switch(rest.first().copied(), "flow-limit").map(Self::FlowLimit)
            }
            ["balance", rest @ ..] if rest.len() <= 1 => {
                switch(rest.first().copied(), "balance").map(Self::Balance)
            }
            ["pin", cpu, what, rest @ ..] => {
                let cpu: CpuId = cpu
                    .parse()
                    .map_err(|_| bad(format!("CPU `{cpu}` is not a number")))?;
                match (*what, rest) {
                    ("flow", rest) => Ok(Self::PinFlow(flow(rest)?, cpu)),
                    ("port", [p]) => Ok(Self::PinPort(port(Some(p))?, cpu)),
                    _ => Err(bad(format!("`pin {cpu} {what}`: pin a flow or a port"))),
                }
            }
            ["unpin", "flow", rest @ ..] => Ok(Self::UnpinFlow(flow(rest)?)),
            ["unpin", "port", p] => Ok(Self::UnpinPort(port(Some(p))?)),
            [] => Err(bad("empty request")),
            _ => Err(bad(format!("`{}` is no control", line.trim()))),
        }
    }
}

impl fmt::Display for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = |b: bool| if b { "on" } else { "off" };
        match self {
            Self::Policy(p) => write!(f, "policy {p}"),
            Self::FastPath(b) => write!(f, "fast-path {}", on(*b)),
            Self::FlowLimit(b) => write!(f, "flow-limit {}", on(*b)),
            Self::Balance(b) => write!(f, "balance {}", on(*b)),
            Self::PinFlow(k, cpu) => write!(f, "pin {cpu} flow {k}"),
            Self::UnpinFlow(k) => write!(f, "unpin flow {k}"),
            Self::PinPort(p, cpu) => write!(f, "pin {cpu} port {p}"),
            Self::UnpinPort(p) => write!(f, "unpin port {p}"),
        }
    }
}

/// What a running engine applies [`Control`]s to: its shared tables and
/// switches, the hasher its dispatchers classify with (so a pinned flow
/// hashes as its packets do) and its worker CPUs.
#[derive(Clone)]
pub struct Controls {
    shared: Shared,
    hasher: AnyHasher,
    cpus: CpuSet,
}

impl fmt::Debug for Controls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controls")
            .field("cpus", &self.cpus)
            .finish_non_exhaustive()
    }
}

impl Controls {
    /// Controls over `shared`, whose dispatchers hash with `hasher` and
    /// whose workers run on `cpus`.
    pub fn new(shared: Shared, hasher: AnyHasher, cpus: CpuSet) -> Self {
        Self {
            shared,
            hasher,
            cpus,
        }
    }

    /// Applies `control`; returns the state it set, one line, or why it
    /// was refused (nothing changed then).
    pub fn apply(&self, control: &Control) -> Result<String, String> {
        let switches = &self.shared.switches;
        match control {
            Control::Policy(p) => self.shared.desired.policy().set(*p),
            Control::FastPath(on) => switches.fast_path.store(*on, Ordering::Relaxed),
            Control::FlowLimit(on) => switches.flow_limit.store(*on, Ordering::Relaxed),
            Control::Balance(on) => self.shared.balance.set_on(*on),
            Control::PinFlow(key, cpu) => {
                self.worker(*cpu)?;
                self.shared.pins.pin_flow(self.hasher.hash(key), *cpu);
            }
            Control::UnpinFlow(key) => self.shared.pins.unpin_flow(self.hasher.hash(key)),
            Control::PinPort(port, cpu) => {
                self.worker(*cpu)?;
                self.shared.pins.pin_port(*port, *cpu);
            }
            Control::UnpinPort(port) => self.shared.pins.unpin_port(*port),
        }
        Ok(control.to_string())
    }

    fn worker(&self, cpu: CpuId) -> Result<(), String> {
        if self.cpus.contains(cpu) {
            Ok(())
        } else {
            Err(format!(
                "CPU {cpu} runs no worker of this engine: pin to one of {}",
                self.cpus
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use steer_core::cpu::CpuLayout;
    use steer_core::flow::KeyedHasher;

    use super::*;

    #[test]
    fn every_control_prints_back_as_written() {
        for line in [
            "policy llc",
            "policy always",
            "fast-path on",
            "fast-path off",
            "flow-limit on",
            "balance off",
            "pin 1 flow udp 10.0.0.1:5000 -> 10.0.0.2:53",
            "unpin flow tcp [2001:db8::1]:443 -> [2001:db8::2]:9",
            "pin 0 port 7000",
            "unpin port 7000",
        ] {
            let c: Control = line.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(c.to_string(), line);
        }
    }

    #[test]
    fn bad_lines_say_what_to_write() {
        for (line, says) in [
            ("", "empty request"),
            ("policy sometimes", "llc or always"),
            ("fast-path maybe", "on or off"),
            ("balance", "needs on or off"),
            ("pin x port 1", "not a number"),
            ("pin 1 port 0", "from 1 to 65535"),
            ("pin 1 port 70000", "from 1 to 65535"),
            ("pin 1 queue 3", "pin a flow or a port"),
            ("pin 1 flow udp 1.2.3.4 -> 1.2.3.5", "needs both ports"),
            ("reboot", "is no control"),
        ] {
            let e = line.parse::<Control>().unwrap_err().to_string();
            assert!(e.contains(says), "{line:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn controls_change_the_shared_state_and_pins_need_a_worker_cpu() {
        let layout = Arc::new(CpuLayout::uniform(4, 2).unwrap());
        let shared = Shared::new(layout, 256, Policy::Always).unwrap();
        let hasher = AnyHasher::Keyed(KeyedHasher::with_seed(3));
        let controls = Controls::new(shared.clone(), hasher.clone(), CpuSet::first(2));
        let apply = |line: &str| controls.apply(&line.parse().unwrap());
        assert_eq!(apply("policy llc").unwrap(), "policy llc");
        assert_eq!(shared.desired.policy().get(), Policy::LlcAffinity);
        apply("fast-path off").unwrap();
        assert!(!shared.switches.fast_path.load(Ordering::Relaxed));
        apply("balance on").unwrap();
        assert!(shared.balance.is_on());
        let key: FlowKey = "udp 10.0.0.1:5000 -> 10.0.0.2:53".parse().unwrap();
        let mut pins = shared.pins.reader();
        apply("pin 1 flow udp 10.0.0.1:5000 -> 10.0.0.2:53").unwrap();
        pins.refresh();
        assert_eq!(pins.lookup(hasher.hash(&key), 53), Some(1));
        let e = apply("pin 3 port 53").unwrap_err();
        assert!(
            e.contains("CPU 3 runs no worker") && e.contains("0-1"),
            "{e}"
        );
        apply("unpin flow udp 10.0.0.1:5000 -> 10.0.0.2:53").unwrap();
        pins.refresh();
        assert_eq!(pins.lookup(hasher.hash(&key), 53), None);
    }
}
