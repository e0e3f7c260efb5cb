//! Parsing one trace line into an [`Event`].

use std::net::SocketAddr;

use steer_core::cpu::{CpuId, CpuSet};
use steer_core::flow::{FlowAddrs, FlowKey, Ports};
use steer_core::runtime::RpsMode;

use super::{EngineLine, Event, Flow};

/// A flow hash: a non-zero u32 in decimal or 0x hex.
pub fn parse_hash(s: &str) -> Result<u32, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse::<u32>(),
    };
    match parsed {
        Ok(0) => Err("flow hash 0 means \"no hash\" and cannot be recorded".into()),
        Ok(h) => Ok(h),
        Err(_) => Err(format!(
            "bad flow hash {s:?}: expected a non-zero u32 in decimal or 0x hex"
        )),
    }
}

/// A flow: a hash, or `proto/src:port/dst:port`.
fn parse_flow(s: &str) -> Result<Flow, String> {
    let Some((proto, rest)) = s.split_once('/') else {
        return parse_hash(s).map(Flow::Hash);
    };
    let bad = || {
        format!(
            "bad flow {s:?}: expected a hash or `udp|tcp/<src>:<port>/<dst>:<port>` \
             (IPv6 in brackets)"
        )
    };
    let protocol = match proto {
        "udp" => 17,
        "tcp" => 6,
        _ => return Err(bad()),
    };
    let (src, dst) = rest.split_once('/').ok_or_else(bad)?;
    let src: SocketAddr = src.parse().map_err(|_| bad())?;
    let dst: SocketAddr = dst.parse().map_err(|_| bad())?;
    let addrs = match (src, dst) {
        (SocketAddr::V4(a), SocketAddr::V4(b)) => FlowAddrs::V4 {
            src: *a.ip(),
            dst: *b.ip(),
        },
        (SocketAddr::V6(a), SocketAddr::V6(b)) => FlowAddrs::V6 {
            src: *a.ip(),
            dst: *b.ip(),
        },
        _ => return Err(format!("bad flow {s:?}: mixes IPv4 and IPv6")),
    };
    Ok(Flow::Tuple(FlowKey {
        addrs,
        protocol,
        ports: Some(Ports {
            src: src.port(),
            dst: dst.port(),
        }),
    }))
}

/// A CPU number.
pub fn parse_cpu(s: &str) -> Result<CpuId, String> {
    s.parse::<CpuId>()
        .map_err(|_| format!("bad CPU {s:?}: expected a CPU number"))
}

fn parse_list(s: &str, what: &str) -> Result<CpuSet, String> {
    let set = s
        .parse::<CpuSet>()
        .map_err(|e| format!("bad {what} list: {e}"))?;
    if set.is_empty() {
        return Err(format!("the {what} list is empty"));
    }
    Ok(set)
}

/// A count from 1 to `max` (a trace must not make the replay allocate
/// without bound).
fn parse_count(s: &str, what: &str, max: usize) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "bad {what} {s:?}: expected a number from 1 to {max}"
        )),
    }
}

/// Most rx queues a trace may name (a NIC's channels are far fewer).
pub const MAX_QUEUES: usize = 1024;
/// Largest rx table a trace may ask for (the engine's own limit is lower).
pub const MAX_RX_TABLE: usize = 1 << 24;
/// Largest worker ring a trace may ask for.
pub const MAX_RING: usize = 1 << 20;

/// The `key=value` options after an event's fields: `t=` always, plus
/// `allowed=` where `allow_allowed`.
fn parse_options(
    extra: &[&str],
    allow_allowed: bool,
    usage: &str,
) -> Result<(Option<CpuSet>, Option<u64>), String> {
    let (mut allowed, mut t) = (None, None);
    for a in extra {
        match a.split_once('=') {
            Some(("allowed", list)) if allow_allowed && allowed.is_none() => {
                allowed = Some(parse_list(list, "allowed")?);
            }
            Some(("t", ns)) if t.is_none() => {
                t = Some(
                    ns.parse::<u64>()
                        .map_err(|_| format!("bad time {ns:?}: expected t=<ns>"))?,
                );
            }
            _ => return Err(format!("unexpected {a:?}: expected `{usage}`")),
        }
    }
    Ok((allowed, t))
}

fn parse_engine(args: &[&str]) -> Result<EngineLine, String> {
    let mut e = EngineLine::default();
    for a in args {
        let Some((k, v)) = a.split_once('=') else {
            return Err(format!("unexpected {a:?}: expected key=value"));
        };
        match k {
            "workers" => e.workers = Some(parse_list(v, "workers")?),
            "queues" => e.queues = Some(parse_count(v, "queue count", MAX_QUEUES)?),
            "rps" => {
                e.rps = Some(match v {
                    "local" => RpsMode::Local,
                    "spread" => RpsMode::Spread,
                    _ => return Err(format!("bad rps {v:?}: expected local or spread")),
                })
            }
            "fast_path" => {
                e.fast_path = Some(match v {
                    "on" => true,
                    "off" => false,
                    _ => return Err(format!("bad fast_path {v:?}: expected on or off")),
                })
            }
            "rx_table" => e.rx_table = Some(parse_count(v, "rx table size", MAX_RX_TABLE)?),
            "ring" => e.ring = Some(parse_count(v, "ring size", MAX_RING)?),
            "idle_ms" => {
                e.idle_ms = Some(
                    v.parse::<u32>()
                        .map_err(|_| format!("bad idle_ms {v:?}: expected milliseconds"))?,
                )
            }
            _ => {
                return Err(format!(
                    "unknown engine setting {k:?}: expected workers, queues, rps, fast_path, \
                     rx_table, ring or idle_ms"
                ))
            }
        }
    }
    Ok(e)
}

const C_USAGE: &str = "c <flow> <cpu> [allowed=<cpulist>] [t=<ns>]";

/// Parses one line; `Ok(None)` for blank and comment-only lines.
pub fn parse_line(line: &str) -> Result<Option<Event>, String> {
    let text = line
        .split_once('#')
        .map_or(line, |(before, _)| before)
        .trim();
    let Some((verb, rest)) = text
        .split_once(char::is_whitespace)
        .map(|(v, r)| (v, r.trim()))
        .or_else(|| (!text.is_empty()).then_some((text, "")))
    else {
        return Ok(None);
    };
    let args: Vec<&str> = rest.split_whitespace().collect();
    let event = match (verb, args.as_slice()) {
        ("topology", []) => return Err("`topology` needs an hwloc synthetic spec".into()),
        ("topology", _) => Event::Topology(rest.to_string()),
        ("llcs", []) => return Err("`llcs` needs one CPU list per LLC".into()),
        ("llcs", lists) => Event::Llcs(
            lists
                .iter()
                .map(|l| parse_list(l, "LLC"))
                .collect::<Result<_, _>>()?,
        ),
        ("engine", settings) => Event::Engine(parse_engine(settings)?),
        ("table", [n]) => Event::Table(
            n.parse::<usize>()
                .map_err(|_| format!("bad table size {n:?}: expected a power of two"))?,
        ),
        ("c", [flow, cpu, extra @ ..]) => {
            if extra.len() > 2 {
                return Err(format!("too many fields: `{C_USAGE}`"));
            }
            let (allowed, t) = parse_options(extra, true, C_USAGE)?;
            Event::Consume {
                flow: parse_flow(flow)?,
                cpu: parse_cpu(cpu)?,
                allowed,
                t,
            }
        }
        ("p", [flow, rxq, extra @ ..]) => {
            let (_, t) = parse_options(extra, false, "p <flow> <rxq> [t=<ns>]")?;
            Event::Packet {
                flow: parse_flow(flow)?,
                rxq: rxq
                    .parse::<u32>()
                    .map_err(|_| format!("bad rx queue {rxq:?}: expected a number"))?,
                t,
            }
        }
        ("off", [cpu, extra @ ..]) => Event::Off(
            parse_cpu(cpu)?,
            parse_options(extra, false, "off <cpu> [t=<ns>]")?.1,
        ),
        ("on", [cpu, extra @ ..]) => Event::On(
            parse_cpu(cpu)?,
            parse_options(extra, false, "on <cpu> [t=<ns>]")?.1,
        ),
        ("table" | "c" | "p" | "off" | "on", _) => {
            return Err(format!(
                "wrong fields for `{verb}`: expected `table <entries>`, `{C_USAGE}`, \
                 `p <flow> <rxq> [t=<ns>]`, `off <cpu>` or `on <cpu>`"
            ))
        }
        _ => {
            return Err(format!(
                "unknown event {verb:?}: expected topology, llcs, table, engine, c, p, off or on"
            ))
        }
    };
    Ok(Some(event))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events() {
        assert_eq!(parse_line("  # just a comment"), Ok(None));
        assert_eq!(parse_line(""), Ok(None));
        assert_eq!(
            parse_line("c 0x10 3 allowed=0-3 # note"),
            Ok(Some(Event::Consume {
                flow: Flow::Hash(16),
                cpu: 3,
                allowed: Some("0-3".parse().unwrap()),
                t: None,
            }))
        );
        assert_eq!(
            parse_line("c 0x10 3 t=99 allowed=1"),
            Ok(Some(Event::Consume {
                flow: Flow::Hash(16),
                cpu: 3,
                allowed: Some("1".parse().unwrap()),
                t: Some(99),
            }))
        );
        assert_eq!(
            parse_line("topology pack:2  l3:16 core:8 pu:1"),
            Ok(Some(Event::Topology("pack:2  l3:16 core:8 pu:1".into())))
        );
        assert_eq!(parse_line("table 64"), Ok(Some(Event::Table(64))));
        assert_eq!(parse_line("off 2"), Ok(Some(Event::Off(2, None))));
        assert_eq!(parse_line("on 2 t=5"), Ok(Some(Event::On(2, Some(5)))));
        assert_eq!(
            parse_line("p 7 1 t=10"),
            Ok(Some(Event::Packet {
                flow: Flow::Hash(7),
                rxq: 1,
                t: Some(10)
            }))
        );
        assert_eq!(
            parse_line("llcs 0-1 2,3"),
            Ok(Some(Event::Llcs(vec![
                "0-1".parse().unwrap(),
                "2-3".parse().unwrap()
            ])))
        );
        let Ok(Some(Event::Engine(e))) =
            parse_line("engine workers=0-3 queues=2 rps=spread fast_path=off ring=64")
        else {
            panic!("engine line")
        };
        assert_eq!(
            (e.queues, e.rps, e.fast_path, e.ring, e.rx_table),
            (Some(2), Some(RpsMode::Spread), Some(false), Some(64), None)
        );
        let Ok(Some(Event::Packet {
            flow: Flow::Tuple(k),
            ..
        })) = parse_line("p udp/[2001:db8::1]:5000/[2001:db8::2]:53 0")
        else {
            panic!("tuple flow")
        };
        assert_eq!((k.protocol, k.src_port(), k.dst_port()), (17, 5000, 53));
        for bad in [
            "c 0 1",
            "c 0x1g 1",
            "c 4294967296 1",
            "c 1",
            "c 1 x",
            "c 1 2 cpus=3",
            "c 1 2 allowed=3-1",
            "c 1 2 allowed=",
            "c 1 2 allowed=1 extra",
            "c 1 2 allowed=1 allowed=2",
            "c 1 2 t=-1",
            "c 1 2 t=1 t=2 t=3",
            "c sctp/1.1.1.1:1/2.2.2.2:2 1",
            "c udp/1.1.1.1:1/[::1]:2 1",
            "p 1",
            "p 1 x",
            "p 1 0 allowed=1",
            "table",
            "table -4",
            "off",
            "on 1 2",
            "topology",
            "llcs",
            "llcs 0-1 x",
            "engine queues=x",
            "engine queues=99999999999",
            "engine rx_table=0",
            "engine ring=18446744073709551615",
            "engine speed=9",
            "engine rps=sometimes",
            "jump 3",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?} should fail");
        }
    }
}
