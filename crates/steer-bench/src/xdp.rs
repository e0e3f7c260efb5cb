//! steer-bench's two XDP programs, compiled by build.rs: the generator's
//! receive path (`bpf/gen_rx.c`: stamps arrival times, redirects replies to
//! its AF_XDP sockets) and the reflector (`bpf/reflect.c`: the floor, XDP_TX).

use anyhow::{Context, Result};
use steer_xdp::{object::XdpObject, XdpMode};

static GEN_RX: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/gen_rx.o"));
static REFLECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/reflect.o"));

/// `struct bench_config` of bpf/bench.h.
fn config(port: u16) -> [u8; 4] {
    let mut v = [0u8; 4];
    v[..2].copy_from_slice(&port.to_be_bytes());
    v
}

/// Attaches gen_rx to `interface` (native mode: the reflector's XDP_TX
/// needs NAPI on this end) for replies from UDP port `server_port`.
pub fn attach_gen_rx(interface: &str, server_port: u16) -> Result<XdpObject> {
    let obj = XdpObject::attach(GEN_RX, "gen_rx", interface, XdpMode::Native)
        .with_context(|| format!("attaching the generator's XDP program to {interface}"))?;
    obj.update("config", &0u32.to_ne_bytes(), &config(server_port))?;
    Ok(obj)
}

/// Attaches the reflector to `interface` for UDP port `port`.
pub fn attach_reflector(interface: &str, port: u16) -> Result<XdpObject> {
    let obj = XdpObject::attach(REFLECT, "reflect", interface, XdpMode::Native)
        .with_context(|| format!("attaching the XDP reflector to {interface}"))?;
    obj.update("config", &0u32.to_ne_bytes(), &config(port))?;
    Ok(obj)
}

/// The `stats` counters of either program: (hit, passed, failed).
pub fn stats(obj: &XdpObject) -> Result<(u64, u64, u64)> {
    Ok((
        obj.percpu_sum("stats", 0)?,
        obj.percpu_sum("stats", 1)?,
        obj.percpu_sum("stats", 2)?,
    ))
}
