//! Printing an [`Event`] as the trace line that parses back to it.

use std::fmt;
use std::net::SocketAddr;

use steer_core::flow::FlowAddrs;
use steer_core::runtime::RpsMode;

use super::{EngineLine, Event, Flow};

impl fmt::Display for Flow {
    /// A hash in 0x hex; a UDP or TCP 5-tuple as
    /// `udp|tcp/<src>:<port>/<dst>:<port>` (what the parser makes). A key
    /// of another protocol prints its number, which does not parse back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = match self {
            Flow::Hash(h) => return write!(f, "{h:#010x}"),
            Flow::Tuple(key) => key,
        };
        match key.protocol {
            17 => f.write_str("udp")?,
            6 => f.write_str("tcp")?,
            p => write!(f, "{p}")?,
        }
        let (src, dst) = match key.addrs {
            FlowAddrs::V4 { src, dst } => (src.into(), dst.into()),
            FlowAddrs::V6 { src, dst } => (src.into(), dst.into()),
        };
        let src = SocketAddr::new(src, key.src_port());
        let dst = SocketAddr::new(dst, key.dst_port());
        write!(f, "/{src}/{dst}")
    }
}

impl fmt::Display for EngineLine {
    /// The settings given, as `key=value` in a fixed order, space
    /// separated (nothing when none is).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        let mut field = |f: &mut fmt::Formatter<'_>, key: &str, value: &dyn fmt::Display| {
            let r = write!(f, "{sep}{key}={value}");
            sep = " ";
            r
        };
        let on_off = |b: bool| if b { "on" } else { "off" };
        if let Some(w) = &self.workers {
            field(f, "workers", w)?;
        }
        if let Some(q) = self.queues {
            field(f, "queues", &q)?;
        }
        if let Some(r) = self.rps {
            let name = match r {
                RpsMode::Local => "local",
                RpsMode::Spread => "spread",
            };
            field(f, "rps", &name)?;
        }
        if let Some(p) = self.fast_path {
            field(f, "fast_path", &on_off(p))?;
        }
        if let Some(n) = self.rx_table {
            field(f, "rx_table", &n)?;
        }
        if let Some(n) = self.ring {
            field(f, "ring", &n)?;
        }
        if let Some(n) = self.idle_ms {
            field(f, "idle_ms", &n)?;
        }
        Ok(())
    }
}

/// ` t=<ns>` when there is a time.
struct Time(Option<u64>);

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(t) => write!(f, " t={t}"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Event {
    /// The event as one trace line, without its newline.
    ///
    /// ```
    /// use steer_replay::trace::parse_line;
    /// let line = "c udp/10.0.0.1:5000/10.0.0.2:53 3 allowed=0-3 t=99";
    /// let event = parse_line(line).unwrap().unwrap();
    /// assert_eq!(event.to_string(), line);
    /// let p = parse_line("p 7 1").unwrap().unwrap();
    /// assert_eq!(p.to_string(), "p 0x00000007 1");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Topology(spec) => write!(f, "topology {spec}"),
            Event::Llcs(llcs) => {
                f.write_str("llcs")?;
                for l in llcs {
                    write!(f, " {l}")?;
                }
                Ok(())
            }
            Event::Table(n) => write!(f, "table {n}"),
            Event::Engine(e) => {
                let settings = e.to_string();
                if settings.is_empty() {
                    f.write_str("engine")
                } else {
                    write!(f, "engine {settings}")
                }
            }
            Event::Consume {
                flow,
                cpu,
                allowed,
                t,
            } => {
                write!(f, "c {flow} {cpu}")?;
                if let Some(a) = allowed {
                    write!(f, " allowed={a}")?;
                }
                write!(f, "{}", Time(*t))
            }
            Event::Packet { flow, rxq, t } => write!(f, "p {flow} {rxq}{}", Time(*t)),
            Event::Off(cpu, t) => write!(f, "off {cpu}{}", Time(*t)),
            Event::On(cpu, t) => write!(f, "on {cpu}{}", Time(*t)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_line;

    /// Each line prints as itself (the recorder's form) and reparses to
    /// the same event.
    #[test]
    fn events_print_back_to_what_parses_to_them() {
        for line in [
            "topology pack:2 l3:16 core:8 pu:1",
            "llcs 0-3 4-7",
            "table 4096",
            "engine",
            "engine workers=0-7 queues=8 rps=local fast_path=on rx_table=4096 ring=1024 idle_ms=5",
            "engine rps=spread fast_path=off",
            "p 0x9e3779b9 2 t=1500",
            "c 0x9e3779b9 3 t=2100",
            "c udp/10.0.0.1:5000/10.0.0.2:53 17 allowed=16-31",
            "c tcp/[2001:db8::1]:1/[::ffff:1.2.3.4]:65535 0 allowed=0,2,4 t=0",
            "off 3 t=9000",
            "on 3",
        ] {
            let event = parse_line(line).unwrap().unwrap();
            assert_eq!(event.to_string(), line);
            assert_eq!(parse_line(&event.to_string()), Ok(Some(event)));
        }
    }

    /// What the parser accepts in other spellings prints in one.
    #[test]
    fn other_spellings_print_in_the_canonical_one() {
        for (line, printed) in [
            (
                "  c 16 3 t=5 allowed=1,2,3   # note",
                "c 0x00000010 3 allowed=1-3 t=5",
            ),
            ("p 0XFF 0", "p 0x000000ff 0"),
            ("engine ring=64 queues=2", "engine queues=2 ring=64"),
            (
                "c udp/[fe80::1%2]:5/[fe80::2]:6 1",
                "c udp/[fe80::1]:5/[fe80::2]:6 1",
            ),
            ("topology\tpack:2  l3:16", "topology pack:2  l3:16"),
        ] {
            let event = parse_line(line).unwrap().unwrap();
            assert_eq!(event.to_string(), printed, "{line:?}");
            assert_eq!(parse_line(printed), Ok(Some(event)));
        }
    }
}
