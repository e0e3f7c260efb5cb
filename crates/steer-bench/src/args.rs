//! The values the command line takes, parsed: packet rates (`50k`, `1.2m`,
//! `max`), CPU lists (`0-3,5`), CPU pairs (`0,1`), sockperf's `--mps`,
//! `key=value` settings and server kinds. Each parser returns the message
//! clap shows on bad input; none panics.

use crate::servers::Kind;

/// A rate: packets per second, or as fast as possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// As fast as the generator can.
    Max,
    /// This many packets per second.
    Pps(u64),
}

impl Rate {
    /// The fixed rate, `None` for `max`.
    pub fn pps(self) -> Option<u64> {
        match self {
            Rate::Max => None,
            Rate::Pps(p) => Some(p),
        }
    }
}

/// Packets per second: a number with an optional `k` or `m` suffix, 1 to
/// 100m.
pub fn parse_pps(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = if let Some(n) = t.strip_suffix('k') {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 1e6)
    } else {
        (t.as_str(), 1.0)
    };
    let v: f64 = num.parse().map_err(|_| {
        format!("{s:?} is not a rate: give packets per second, e.g. 50000, 50k or 1.2m")
    })?;
    let pps = (v * mult).round();
    if !(1.0..=100e6).contains(&pps) {
        return Err(format!("{s:?}: the rate must be between 1 and 100m pps"));
    }
    Ok(pps as u64)
}

/// `max` or a rate ([`parse_pps`]).
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    if s == "max" {
        Ok(Rate::Max)
    } else {
        parse_pps(s).map(Rate::Pps)
    }
}

/// A server by name.
pub fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::parse(s).ok_or_else(|| {
        format!(
            "unknown server {s:?}: one of {}",
            Kind::ALL.map(Kind::name).join(", ")
        )
    })
}

/// `key=value` (the value may hold more `=`).
pub fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?}: want key=value"))
}

/// A CPU list as the kernel writes one (`0-1,3`, surrounding white space
/// ignored); `None` when malformed or a range runs backwards.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// A non-empty CPU list (`1`, `0-3,5`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// A CPU list option: [`parse_cpu_list`], at least one CPU.
pub fn parse_cpus(s: &str) -> Result<CpuList, String> {
    parse_cpu_list(s)
        .filter(|c| !c.is_empty())
        .map(CpuList)
        .ok_or_else(|| format!("{s:?} is not a CPU list (e.g. 1 or 0-3,5)"))
}

/// Two different CPUs, `LOAD,SERVER`.
pub fn parse_cpu_pair(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("`{s}`: give two CPU numbers, LOAD,SERVER (for example 0,1)");
    let (a, b) = s.split_once(',').ok_or_else(bad)?;
    let (a, b) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if a == b {
        return Err(format!(
            "`{s}`: the load and the server need different CPUs"
        ));
    }
    Ok((a, b))
}

/// A sockperf `--mps` value: `max` or a positive number.
pub fn parse_mps(s: &str) -> Result<String, String> {
    if s == "max" || s.parse::<u32>().is_ok_and(|n| n > 0) {
        Ok(s.into())
    } else {
        Err(format!("{s:?}: want a number or max"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_with_suffixes_and_bounds() {
        assert_eq!(parse_pps("50000"), Ok(50_000));
        assert_eq!(parse_pps("50k"), Ok(50_000));
        assert_eq!(parse_pps(" 1.2M "), Ok(1_200_000));
        assert_eq!(parse_pps("0.5k"), Ok(500));
        assert!(parse_pps("0").unwrap_err().contains("between 1 and 100m"));
        assert!(parse_pps("101m").is_err());
        assert!(parse_pps("fast").unwrap_err().contains("not a rate"));
        assert!(parse_pps("k").is_err());
        assert_eq!(parse_rate("max"), Ok(Rate::Max));
        assert_eq!(parse_rate("10k"), Ok(Rate::Pps(10_000)));
        assert_eq!(Rate::Max.pps(), None);
        assert_eq!(Rate::Pps(7).pps(), Some(7));
    }

    #[test]
    fn cpu_lists_pairs_and_settings() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpus("1"), Ok(CpuList(vec![1])));
        assert!(parse_cpus("").is_err());
        assert!(parse_cpus("1-").is_err());
        assert_eq!(parse_cpu_pair("0, 1"), Ok((0, 1)));
        assert!(parse_cpu_pair("1,1").unwrap_err().contains("different"));
        assert!(parse_cpu_pair("1").is_err());
        assert_eq!(parse_kv("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert!(parse_kv("ab").is_err());
        assert_eq!(parse_mps("max").as_deref(), Ok("max"));
        assert_eq!(parse_mps("100").as_deref(), Ok("100"));
        assert!(parse_mps("0").is_err() && parse_mps("-1").is_err());
    }

    #[test]
    fn servers_by_name() {
        for k in Kind::ALL {
            assert_eq!(parse_kind(k.name()), Ok(k));
        }
        assert!(parse_kind("nginx")
            .unwrap_err()
            .contains("one of reflector"));
    }
}
