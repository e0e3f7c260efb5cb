//! sockperf 3.7 client reports: parsing, aggregation over concurrent
//! clients, and the steer-vs-kernel comparison report (table and JSON) that
//! `steer-bench compare-kernel` prints. That command runs the servers and
//! clients and leaves each client's output in a work directory; this module
//! only reads it.
//!
//! Parsing rules (one line at a time, ANSI colours stripped, first matching
//! rule wins): `[Total Run]` and `[Valid Duration]` lines give run times and
//! message counts; `avg-latency=` / `Summary: Latency is` the mean;
//! `---> percentile P = V` the percentiles (key `p` + P without trailing
//! zeros, `.` as `_`: `p99_9`); `# dropped messages = ...` the drop,
//! duplicate and out-of-order counts; `Summary: Message Rate is` the
//! throughput-mode rate; `ERROR:` lines and sockperf's "no messages" notes
//! the reason there are no results. A report is ok when it has received
//! messages and p50 and p99, or a throughput rate.
//!
//! Aggregation (per mode, over the clients that are ok): msg/s is the sum of
//! received/s (ping-pong) or of sent/s times the share of sampled replies
//! that came back (under-load: received+ooo over received+ooo+dropped);
//! p50, p99 and the mean are medians over the clients; counts are sums.

use crate::table::Layout;
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

use crate::num::{fixed, median_of, ratio};

/// The keys a report can yield, in print order.
pub const KEYS: &[&str] = &[
    "total_runtime",
    "total_sent",
    "total_received",
    "skipped",
    "valid_runtime",
    "valid_sent",
    "valid_received",
    "avg_usec",
    "observations",
    "min",
    "max",
    "p25",
    "p50",
    "p75",
    "p90",
    "p99",
    "p99_9",
    "p99_99",
    "p99_999",
    "dropped",
    "duplicated",
    "ooo",
    "msg_rate",
];

/// What one client's report says: values as printed (numbers as text).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Extracted values by key.
    pub values: BTreeMap<String, String>,
    /// Why there are no results, when there are none.
    pub error: Option<String>,
    /// Whether results were found.
    pub ok: bool,
}

impl Report {
    /// The value of `key` as a number.
    pub fn num(&self, key: &str) -> Option<f64> {
        self.values.get(key).and_then(|v| v.parse().ok())
    }

    /// `key=value` lines, as `steer-bench sockperf parse` prints them.
    pub fn to_kv(&self) -> String {
        let mut s = String::new();
        for k in KEYS {
            if let Some(v) = self.values.get(*k) {
                let _ = writeln!(s, "{k}={v}");
            }
        }
        if let Some(e) = &self.error {
            let _ = writeln!(s, "error={e}");
        }
        let _ = writeln!(s, "ok={}", u8::from(self.ok));
        s
    }

    /// The value printed for `key` in `to_kv` form (`error`, `ok` included).
    pub fn kv(&self, key: &str) -> Option<String> {
        match key {
            "ok" => Some(u8::from(self.ok).to_string()),
            "error" => self.error.clone(),
            k => self.values.get(k).cloned(),
        }
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            while let Some(&d) = chars.peek() {
                chars.next();
                if !(d.is_ascii_digit() || d == ';') {
                    break;
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The number at the start of `s` after blanks and `=`.
fn leading_number(s: &str) -> Option<String> {
    let s = s.trim_start_matches([' ', '\t', '=']);
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if i == int_start {
        return None;
    }
    if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    Some(s[..i].to_owned())
}

/// The number right after `key` in `line`.
fn after(line: &str, key: &str) -> Option<String> {
    let i = line.find(key)?;
    leading_number(&line[i + key.len()..])
}

fn percentile_key(p: &str) -> String {
    let p = if p.contains('.') {
        p.trim_end_matches('0').trim_end_matches('.')
    } else {
        p
    };
    format!("p{}", p.replace('.', "_"))
}

/// Parses one client's output (stdout and stderr).
pub fn parse(text: &str) -> Report {
    let mut r = Report::default();
    let put = |r: &mut Report, k: &str, v: Option<String>| {
        if let Some(v) = v {
            r.values.insert(k.to_owned(), v);
        }
    };
    let mut err: Option<String> = None;
    for raw in text.lines() {
        let line = strip_ansi(raw);
        let l = line.as_str();
        if l.contains("[Total Run]") {
            put(&mut r, "total_runtime", after(l, "RunTime="));
            put(&mut r, "total_sent", after(l, "SentMessages="));
            put(&mut r, "total_received", after(l, "ReceivedMessages="));
            put(&mut r, "skipped", after(l, "SkippedMessages="));
        } else if l.contains("[Valid Duration]") {
            put(&mut r, "valid_runtime", after(l, "RunTime="));
            put(&mut r, "valid_sent", after(l, "SentMessages="));
            put(&mut r, "valid_received", after(l, "ReceivedMessages="));
        } else if let Some(i) = l
            .find("====> avg-latency=")
            .or_else(|| l.find("====> avg-rtt="))
        {
            if !r.values.contains_key("avg_usec") {
                let rest = &l[i..];
                let eq = rest.find('=').map(|e| e + 1).unwrap_or(0);
                put(&mut r, "avg_usec", leading_number(&rest[eq..]));
            }
        } else if l.contains("Summary: Latency") || l.contains("Summary: Round trip") {
            if let Some(i) = l.find(" is ") {
                put(&mut r, "avg_usec", leading_number(&l[i + 4..]));
            }
        } else if l.contains("Summary: Message Rate is ") {
            put(&mut r, "msg_rate", after(l, "Message Rate is"));
        } else if l.contains("# dropped messages") {
            put(&mut r, "dropped", after(l, "dropped messages"));
            put(&mut r, "duplicated", after(l, "duplicated messages"));
            put(&mut r, "ooo", after(l, "out-of-order messages"));
        } else if l.contains("Total ") && l.contains(" observations") && after(l, "Total").is_some()
        {
            put(&mut r, "observations", after(l, "Total"));
        } else if l.contains("---> <MAX> observation") {
            put(&mut r, "max", after(l, "observation"));
        } else if l.contains("---> <MIN> observation") {
            put(&mut r, "min", after(l, "observation"));
        } else if let Some(i) = l.find("---> percentile ") {
            let rest = &l[i + "---> percentile ".len()..];
            let p: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let after_p = rest.trim_start()[p.len()..].to_owned();
            if let (false, Some(v)) = (p.is_empty(), leading_number(&after_p)) {
                put(&mut r, &percentile_key(&p), Some(v));
            }
        } else if l.contains("No messages were received from the server") {
            err = Some("no replies from the server".into());
        } else if l.contains("No valid observations found") {
            err = Some("no valid observations".into());
        } else if (l.contains("ERROR:") || l.contains("error:")) && err.is_none() {
            let s = l.strip_prefix("sockperf: ").unwrap_or(l);
            err = Some(s.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    let received = r.num("valid_received").unwrap_or(0.0);
    r.ok = received > 0.0 && r.values.contains_key("p50") && r.values.contains_key("p99");
    if !r.ok && r.values.contains_key("msg_rate") {
        r.ok = true;
    }
    if !r.ok && err.is_none() {
        err = Some("no results in the output".into());
    }
    r.error = err;
    r
}

/// The two sockperf modes the comparison runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `sockperf under-load`.
    UnderLoad,
    /// `sockperf ping-pong`.
    PingPong,
}

impl Mode {
    /// The name sockperf and the reports use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::UnderLoad => "under-load",
            Mode::PingPong => "ping-pong",
        }
    }

    /// Parses `under-load`/`ul` or `ping-pong`/`pp`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "under-load" | "ul" => Some(Mode::UnderLoad),
            "ping-pong" | "pp" => Some(Mode::PingPong),
            _ => None,
        }
    }
}

/// One mode's numbers over its clients.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Aggregate {
    /// Reports given.
    pub clients: usize,
    /// Reports with results.
    pub ok_clients: usize,
    /// Every report has results.
    pub ok: bool,
    /// Sum of sent/s.
    pub sent_per_sec: Option<f64>,
    /// Sum of handled msg/s.
    pub msg_per_sec: Option<f64>,
    /// Median p50, usec.
    pub p50: Option<f64>,
    /// Median p99, usec.
    pub p99: Option<f64>,
    /// Median mean, usec.
    pub avg_usec: Option<f64>,
    /// Sum of dropped.
    pub dropped: u64,
    /// Sum of duplicated.
    pub duplicated: u64,
    /// Sum of out-of-order.
    pub ooo: u64,
    /// Sum of valid sent.
    pub valid_sent: u64,
    /// Sum of valid received.
    pub valid_received: u64,
}

/// Aggregates the reports of one mode's clients.
pub fn aggregate(mode: Mode, reports: &[Report]) -> Aggregate {
    let mut a = Aggregate {
        clients: reports.len(),
        ..Aggregate::default()
    };
    let (mut sps, mut mps) = (0.0, 0.0);
    let (mut p50, mut p99, mut avg) = (Vec::new(), Vec::new(), Vec::new());
    for r in reports {
        let rt = r.num("valid_runtime").unwrap_or(0.0);
        if !r.ok || rt <= 0.0 {
            continue;
        }
        a.ok_clients += 1;
        let sent = r.num("valid_sent").unwrap_or(0.0);
        let rcv = r.num("valid_received").unwrap_or(0.0);
        let drop = r.num("dropped").unwrap_or(0.0);
        let ooo = r.num("ooo").unwrap_or(0.0);
        let s = sent / rt;
        let m = match mode {
            Mode::UnderLoad => {
                let expected = rcv + ooo + drop;
                if expected > 0.0 {
                    s * (rcv + ooo) / expected
                } else {
                    0.0
                }
            }
            Mode::PingPong => rcv / rt,
        };
        sps += s;
        mps += m;
        p50.extend(r.num("p50"));
        p99.extend(r.num("p99"));
        avg.extend(r.num("avg_usec"));
        a.dropped += drop as u64;
        a.duplicated += r.num("duplicated").unwrap_or(0.0) as u64;
        a.ooo += ooo as u64;
        a.valid_sent += sent as u64;
        a.valid_received += rcv as u64;
    }
    a.ok = a.clients > 0 && a.ok_clients == a.clients;
    if a.ok_clients > 0 {
        a.sent_per_sec = Some(sps);
        a.msg_per_sec = Some(mps);
        a.p50 = median_of(&p50);
        a.p99 = median_of(&p99);
        a.avg_usec = median_of(&avg);
    }
    a
}

impl Aggregate {
    /// The value of `key` as `sockperf_aggregate` printed it.
    pub fn kv(&self, key: &str) -> Option<f64> {
        Some(match key {
            "clients" => self.clients as f64,
            "ok_clients" => self.ok_clients as f64,
            "ok" => f64::from(u8::from(self.ok)),
            "sent_per_sec" => self.sent_per_sec?,
            "msg_per_sec" => self.msg_per_sec?,
            "p50" => self.p50?,
            "p99" => self.p99?,
            "avg_usec" => self.avg_usec?,
            "dropped" => self.dropped as f64,
            "duplicated" => self.duplicated as f64,
            "ooo" => self.ooo as f64,
            "valid_sent" => self.valid_sent as f64,
            "valid_received" => self.valid_received as f64,
            _ => return None,
        })
    }
}

fn expectations(path: &Path) -> Result<Vec<(String, String)>> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

fn same_value(got: &str, want: &str) -> bool {
    got == want || matches!((got.parse::<f64>(), want.parse::<f64>()), (Ok(a), Ok(b)) if a == b)
}

/// Checks the captured outputs in `dir` against their expectations:
/// `sockperf-NAME.txt` against `sockperf-NAME.expected` (key=value; an empty
/// value means the key must be absent), and the four clients of
/// `sockperf-{ul,pp}-veth-client?.txt` aggregated against
/// `aggregate-{ul,pp}-veth.expected` (within 0.05). Returns the number of
/// checks and the failures.
pub fn check_fixtures(dir: &Path) -> Result<(usize, Vec<String>)> {
    let mut checks = 0;
    let mut fails = Vec::new();
    let mut expected: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            n.starts_with("sockperf-") && n.ends_with(".expected")
        })
        .collect();
    expected.sort();
    anyhow::ensure!(
        !expected.is_empty(),
        "no sockperf-*.expected fixtures in {}",
        dir.display()
    );
    for exp in &expected {
        let name = exp
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let txt = dir.join(format!("{name}.txt"));
        let Ok(text) = fs::read_to_string(&txt) else {
            fails.push(format!("{name}: {} missing", txt.display()));
            continue;
        };
        let report = parse(&text);
        for (key, want) in expectations(exp)? {
            checks += 1;
            let got = report.kv(&key);
            let good = match (&got, want.is_empty()) {
                (None, true) => true,
                (Some(g), false) => same_value(g, &want),
                _ => false,
            };
            if !good {
                fails.push(format!(
                    "{name}: {key}: want {:?}, got {:?}",
                    if want.is_empty() { "<absent>" } else { &want },
                    got.as_deref().unwrap_or("<absent>")
                ));
            }
        }
    }
    for (tag, mode) in [("ul", Mode::UnderLoad), ("pp", Mode::PingPong)] {
        let exp = dir.join(format!("aggregate-{tag}-veth.expected"));
        if !exp.exists() {
            continue;
        }
        let mut reports = Vec::new();
        for i in 0..10 {
            let p = dir.join(format!("sockperf-{tag}-veth-client{i}.txt"));
            if let Ok(t) = fs::read_to_string(&p) {
                reports.push(parse(&t));
            }
        }
        let agg = aggregate(mode, &reports);
        for (key, want) in expectations(&exp)? {
            checks += 1;
            let w: f64 = want.parse().unwrap_or(f64::NAN);
            match agg.kv(&key) {
                Some(g) if (g - w).abs() <= 0.05 => {}
                g => fails.push(format!(
                    "aggregate-{tag}-veth: {key}: want {want}, got {g:?}"
                )),
            }
        }
    }
    Ok((checks, fails))
}

/// The comparison asked for: where the logs are and what ran.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Work directory: `<side>-<mode>-client<i>.log`, `<side>-<mode>-exit`,
    /// `<side>-<mode>-stats.json`.
    pub work: PathBuf,
    /// Modes run, in order.
    pub modes: Vec<Mode>,
    /// Clients per mode.
    pub clients: usize,
    /// The run's settings, for the JSON `config` object and the header.
    pub config: Vec<(String, String)>,
}

/// One side (kernel or steer) of one mode, read from the work directory.
#[derive(Debug, Clone)]
pub struct Side {
    /// Each client's report (`None`: no log).
    pub reports: Vec<Option<Report>>,
    /// Aggregate of those present.
    pub agg: Aggregate,
    /// The steer server's exit status, when recorded.
    pub exit: Option<i64>,
    /// The steer server's --stats-json, when present and valid.
    pub stats: Option<Value>,
}

/// Reads one side of one mode; `None` when it did not run.
pub fn read_side(work: &Path, side: &str, mode: Mode, clients: usize) -> Option<Side> {
    let reports: Vec<Option<Report>> = (0..clients)
        .map(|i| {
            fs::read_to_string(work.join(format!("{side}-{}-client{i}.log", mode.name())))
                .ok()
                .map(|t| parse(&t))
        })
        .collect();
    if reports.iter().all(Option::is_none) {
        return None;
    }
    let present: Vec<Report> = reports.iter().flatten().cloned().collect();
    let mut agg = aggregate(mode, &present);
    agg.clients = clients;
    agg.ok = agg.ok_clients == clients;
    let exit = fs::read_to_string(work.join(format!("{side}-{}-exit", mode.name())))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let stats = fs::read_to_string(work.join(format!("{side}-{}-stats.json", mode.name())))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    Some(Side {
        reports,
        agg,
        exit,
        stats,
    })
}

/// Goal: steer msg/s >= 3x kernel, steer p99 <= kernel p99, 0 out-of-order.
pub fn goal_met(kernel: &Aggregate, steer: &Aggregate) -> bool {
    match (kernel.msg_per_sec, steer.msg_per_sec, kernel.p99, steer.p99) {
        (Some(km), Some(sm), Some(kp), Some(sp)) => {
            kernel.ok && steer.ok && km > 0.0 && sm >= 3.0 * km && sp <= kp && steer.ooo == 0
        }
        _ => false,
    }
}

/// What the comparison found: the table text, the JSON, and the exit status
/// (0; 2 when a side lacks results; 3 when `require_goal` and it is missed).
pub fn compare(c: &Comparison, require_goal: bool) -> (String, Value, i32) {
    let get = |k: &str| {
        c.config
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or("?")
    };
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nsteer vs kernel: {} sockperf clients from netns {} to {}:{} ({}), CPUs {}, {}s per run, {}-byte messages, server slice {}",
        c.clients, get("namespace"), get("server_ip"), get("port"), get("interface"), get("cpus"),
        get("seconds"), get("msg_size"),
        match get("server_slice_us") { "0" => "kernel default".to_owned(), s => format!("{s} us") }
    );
    let _ = writeln!(t, "latency: one-way (RTT/2) usec, median over clients; msg/s summed (under-load: sent/s x share of sampled replies back)");
    let _ = writeln!(
        t,
        "ratio = steer/kernel (msg/s: higher is better; latency: lower is better)"
    );
    let layout = Layout::new(&[10, 7], &[7, 11, 11, 9, 9, 9, 6, 6]);
    let row = |t: &mut String, cols: [&str; 10]| t.push_str(&layout.line(&cols));
    row(
        &mut t,
        [
            "mode", "server", "clients", "sent/s", "msg/s", "p50", "p99", "dropped", "dup", "ooo",
        ],
    );
    let mut status = 0;
    let mut modes_json = Map::new();
    for &mode in &c.modes {
        let m = mode.name();
        let kernel = read_side(&c.work, "kernel", mode, c.clients);
        let steer = read_side(&c.work, "steer", mode, c.clients);
        for (name, side) in [("kernel", &kernel), ("steer", &steer)] {
            let Some(s) = side else { continue };
            let a = &s.agg;
            if !a.ok {
                status = status.max(2);
            }
            if a.ok_clients == 0 {
                row(
                    &mut t,
                    [
                        m,
                        name,
                        &format!("0/{}", a.clients),
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-  (no results)",
                    ],
                );
                continue;
            }
            row(
                &mut t,
                [
                    m,
                    name,
                    &format!("{}/{}", a.ok_clients, a.clients),
                    &fixed(a.sent_per_sec, 0),
                    &fixed(a.msg_per_sec, 0),
                    &fixed(a.p50, 1),
                    &fixed(a.p99, 1),
                    &a.dropped.to_string(),
                    &a.duplicated.to_string(),
                    &a.ooo.to_string(),
                ],
            );
        }
        let mut mj = Map::new();
        mj.insert(
            "kernel".into(),
            kernel.as_ref().map_or(Value::Null, |s| side_json(s, false)),
        );
        mj.insert(
            "steer".into(),
            steer.as_ref().map_or(Value::Null, |s| side_json(s, true)),
        );
        if let (Some(k), Some(s)) = (&kernel, &steer) {
            let (k, s) = (&k.agg, &s.agg);
            let r = |a, b| ratio(a, b).map(|v| (v * 100.0).round() / 100.0);
            row(
                &mut t,
                [
                    m,
                    "ratio",
                    "",
                    &fixed(r(s.sent_per_sec, k.sent_per_sec), 2),
                    &fixed(r(s.msg_per_sec, k.msg_per_sec), 2),
                    &fixed(r(s.p50, k.p50), 2),
                    &fixed(r(s.p99, k.p99), 2),
                    "",
                    "",
                    "",
                ],
            );
            let met = goal_met(k, s);
            let _ = writeln!(
                t,
                "{m}: goal {} (steer msg/s >= 3x kernel, p99 <= kernel, 0 out-of-order)",
                if met { "met" } else { "NOT met" }
            );
            if require_goal && !met {
                status = 3;
            }
            mj.insert(
                "ratio".into(),
                json!({
                    "msg_per_sec": r(s.msg_per_sec, k.msg_per_sec),
                    "p50": r(s.p50, k.p50),
                    "p99": r(s.p99, k.p99),
                }),
            );
            mj.insert("goal_met".into(), json!(met));
        } else {
            mj.insert("ratio".into(), Value::Null);
            mj.insert("goal_met".into(), Value::Null);
            if require_goal {
                status = 3;
            }
        }
        modes_json.insert(m.into(), Value::Object(mj));
    }
    let mut config = Map::new();
    for (k, v) in &c.config {
        // CPU lists and masks stay text ("0-1", hex "3").
        let value = match (v.parse::<i64>(), v.parse::<f64>()) {
            _ if k.ends_with("cpus") => json!(v),
            (Ok(n), _) => json!(n),
            (_, Ok(n)) if n.is_finite() => json!(n),
            _ => json!(v),
        };
        config.insert(k.clone(), value);
    }
    config.insert(
        "latency".into(),
        json!("one-way usec (RTT/2), median over clients"),
    );
    let j = json!({
        "tool": "steer-bench compare-kernel",
        "format": 2,
        "config": config,
        "modes": modes_json,
    });
    (t, j, status)
}

fn side_json(s: &Side, steer: bool) -> Value {
    let a = &s.agg;
    let mut v = json!({
        "ok": a.ok, "clients": a.clients, "ok_clients": a.ok_clients,
        "sent_per_sec": a.sent_per_sec, "msg_per_sec": a.msg_per_sec,
        "p50_usec": a.p50, "p99_usec": a.p99, "avg_usec": a.avg_usec,
        "dropped": a.dropped, "duplicated": a.duplicated, "out_of_order": a.ooo,
    });
    if steer {
        v["server_exit"] = json!(s.exit);
        if let Some(st) = &s.stats {
            v["server_stats"] = st.clone();
        }
    }
    v["per_client"] = Value::Array(
        s.reports
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (i, r)))
            .map(|(i, r)| {
                json!({
                    "client": i, "ok": r.ok, "error": r.error,
                    "valid_runtime_sec": r.num("valid_runtime"), "valid_sent": r.num("valid_sent"),
                    "valid_received": r.num("valid_received"), "p50_usec": r.num("p50"),
                    "p99_usec": r.num("p99"), "max_usec": r.num("max"), "avg_usec": r.num("avg_usec"),
                    "dropped": r.num("dropped"), "duplicated": r.num("duplicated"),
                    "out_of_order": r.num("ooo"),
                })
            })
            .collect(),
    );
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/fixtures")
    }

    #[test]
    fn every_fixture_parses_as_expected() {
        let (checks, fails) = check_fixtures(&fixtures()).unwrap();
        assert!(
            fails.is_empty(),
            "{} of {checks} checks failed:\n{}",
            fails.len(),
            fails.join("\n")
        );
        assert!(checks > 100, "only {checks} checks: fixtures missing?");
    }

    #[test]
    fn under_load_with_drops() {
        let t = fs::read_to_string(fixtures().join("sockperf-ul-loopback-drops.txt")).unwrap();
        let r = parse(&t);
        assert!(r.ok);
        assert_eq!(r.num("dropped"), Some(1089.0));
        assert_eq!(r.kv("p99_9").as_deref(), Some("15125.903"));
        let a = aggregate(Mode::UnderLoad, &[r.clone(), r]);
        assert_eq!(a.dropped, 2178);
        // sent/s x share of the sampled replies that came back.
        let sps = 227401.0 / 1.548;
        let want = 2.0 * sps * 1186.0 / (1186.0 + 1089.0);
        assert!((a.msg_per_sec.unwrap() - want).abs() < 1e-6);
    }

    #[test]
    fn failures_say_why() {
        let r = parse("sockperf: ERROR:   bind  failed\n");
        assert!(!r.ok);
        assert_eq!(r.error.as_deref(), Some("ERROR: bind failed"));
        let r = parse("");
        assert_eq!(r.error.as_deref(), Some("no results in the output"));
        assert!(r.to_kv().ends_with("ok=0\n"));
        let a = aggregate(Mode::PingPong, &[r]);
        assert!(!a.ok && a.msg_per_sec.is_none());
    }

    #[test]
    fn medians_and_keys() {
        assert_eq!(median_of(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_of(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median_of(&[]), None);
        assert_eq!(percentile_key("99.900"), "p99_9");
        assert_eq!(percentile_key("50.000"), "p50");
        assert_eq!(percentile_key("99.999"), "p99_999");
        assert_eq!(strip_ansi("\x1b[2;35mTotal 5\x1b[0m x"), "Total 5 x");
    }

    #[test]
    fn comparison_reads_a_work_directory() {
        let dir = std::env::temp_dir().join(format!("sb-cmp-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for side in ["kernel", "steer"] {
            for i in 0..4 {
                let src = fixtures().join(format!("sockperf-pp-veth-client{i}.txt"));
                fs::copy(src, dir.join(format!("{side}-ping-pong-client{i}.log"))).unwrap();
            }
        }
        fs::write(dir.join("steer-ping-pong-exit"), "0\n").unwrap();
        let c = Comparison {
            work: dir.clone(),
            modes: vec![Mode::PingPong],
            clients: 4,
            config: vec![
                ("seconds".into(), "3".into()),
                ("cpus".into(), "0-1".into()),
            ],
        };
        let (table, j, status) = compare(&c, true);
        let (_, _, lenient) = compare(&c, false);
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(lenient, 0, "every client has results");
        assert_eq!(status, 3, "equal servers miss the 3x goal");
        assert!(table.contains("ping-pong: goal NOT met"), "{table}");
        assert_eq!(j["modes"]["ping-pong"]["ratio"]["msg_per_sec"], json!(1.0));
        assert_eq!(j["modes"]["ping-pong"]["steer"]["server_exit"], json!(0));
        assert_eq!(j["config"]["cpus"], json!("0-1"));
        assert_eq!(j["config"]["seconds"], json!(3));
    }
}
