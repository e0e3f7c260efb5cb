//! The replay on small traces: today's format gives today's numbers, bad
//! lines name their number, packets go through the whole decision, and a
//! capture merges with a trace by time.

use std::io::Cursor;

use super::*;

/// `topology` lines in these tests name a uniform layout: `<cpus>x<per_llc>`.
fn uniform(spec: &str) -> Result<Arc<CpuLayout>, String> {
    let (n, per) = spec.split_once('x').ok_or("bad test spec")?;
    let (n, per) = (n.parse().map_err(|_| "n")?, per.parse().map_err(|_| "per")?);
    CpuLayout::uniform(n, per)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

fn run_opts(trace: &str, opts: Options) -> anyhow::Result<Value> {
    let input: Box<dyn BufRead> = Box::new(Cursor::new(trace.to_string()));
    replay(opts, Some(input), None, &uniform).map(|o| o.json())
}

fn run(trace: &str, policy: Policy) -> anyhow::Result<Value> {
    run_opts(trace, Options::new(vec![policy]))
}

#[test]
fn counts_under_both_policies() {
    // 8 CPUs, LLCs {0-3}, {4-7}.
    let trace = "topology 8x4\n\
                 c 0x100 1\n\
                 c 0x100 1\n\
                 c 0x100 2\n\
                 c 0x100 6\n\
                 c 0x100 6\n";
    let llc = run(trace, Policy::LlcAffinity).unwrap();
    assert_eq!(llc["records"], 5);
    assert_eq!(llc["updates"], 2);
    assert_eq!(llc["suppressed"], 1);
    assert_eq!(llc["unchanged"], 2);
    assert_eq!(llc["new_or_other_flow"], 1);
    assert_eq!(llc["cross_llc"], 1);
    let always = run(trace, Policy::Always).unwrap();
    assert_eq!(always["updates"], 3);
    assert_eq!(always["changed"], 2);
    assert_eq!(always["suppressed"], 0);
    assert!(always.get("cross_llc").is_none());
    // Today's keys, in today's order, and nothing else.
    let keys: Vec<&str> = llc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "policy",
            "cpus",
            "llcs",
            "table",
            "records",
            "updates",
            "suppressed",
            "unchanged",
            "new_or_other_flow",
            "forced_offline",
            "forced_affinity",
            "cross_llc"
        ]
    );
}

#[test]
fn bad_lines_name_their_number() {
    for (trace, line) in [
        ("c 1 1\n", 1),
        ("topology 4x2\n\nc 1 9\n", 3),
        ("topology 4x2\nc 1 1\ntable 64\n", 3),
        ("topology 4x2\np 1 0\nengine queues=2\n", 3),
        ("topology 4x2\ntable 48\n", 2),
        ("topology 4x2\ntopology 4x2\n", 2),
        ("topology 4x2\nllcs 0-3\n", 2),
        ("topology 4x2\nc 1 1 allowed=0-7\n", 2),
        ("topology 4x2\noff 4\n", 2),
        ("# empty\ntopology nonsense\n", 2),
        ("topology 4x2\nc 1 1 t=5\nc 1 2 t=4\n", 3),
        ("topology 4x2\nengine queues=2\np 1 2\n", 3),
        ("llcs 0-1 1-2\n", 1),
    ] {
        let err = run(trace, Policy::LlcAffinity).unwrap_err();
        let le = err.downcast_ref::<LineError>().expect("a line error");
        assert_eq!(le.line, line, "{trace:?}: {le}");
    }
    assert!(run("# nothing\n", Policy::Always).is_err());
}

#[test]
fn offline_and_affinity_reasons() {
    let trace = "topology 8x4\n\
                 c 7 1\n\
                 off 1\n\
                 c 7 2          # forced_offline\n\
                 on 1\n\
                 c 7 3 allowed=3 # forced_affinity (2 not allowed)\n\
                 c 7 0          # suppressed\n";
    let r = run(trace, Policy::LlcAffinity).unwrap();
    assert_eq!(r["forced_offline"], 1);
    assert_eq!(r["forced_affinity"], 1);
    assert_eq!(r["suppressed"], 1);
    assert_eq!(r["updates"], 3);
}

/// A flow placed on CPU 1 by its consumer, which moves to CPU 6 (another
/// LLC) while two packets wait on CPU 1: the move waits for them.
const PACKETS: &str = "\
llcs 0-3 4-7
engine workers=0-7 queues=1 rps=spread fast_path=on
c 0x100 1 t=0
p 0x100 0 t=0
p 0x100 0 t=0
c 0x100 6 t=10
p 0x100 0 t=20        # held back: CPU 1 handles the first two at 1000, 2000
p 0x100 0 t=5000      # moved
c 0x100 7 t=6000      # same LLC as 6
p 0x100 0 t=7000
";

#[test]
fn packets_go_through_the_whole_decision() {
    let v = run(PACKETS, Policy::LlcAffinity).unwrap();
    assert_eq!(v["packets"], 5);
    assert_eq!(v["flows"], 1);
    assert_eq!(v["steering_updates"], 2, "{v}");
    assert_eq!(
        (v["first_placements"].as_u64(), v["moves"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(v["held_back"], 1);
    assert_eq!(v["steered_out"], 5);
    assert_eq!(v["suppressed"], 1);
    assert_eq!(v["setup"]["queues"], 1);
    assert_eq!(v["setup"]["topology"], "llcs");
    assert_eq!(v["cpus"], 8);
    let always = run(PACKETS, Policy::Always).unwrap();
    assert_eq!(always["steering_updates"], 3);
    // Both at once: side by side, and what the LLC rule saved.
    let both = run_opts(
        PACKETS,
        Options::new(vec![Policy::Always, Policy::LlcAffinity]),
    )
    .unwrap();
    assert_eq!(both["policy"], "both");
    assert_eq!(both["always"]["steering_updates"], 3);
    assert_eq!(both["llc"]["steering_updates"], 2);
    assert_eq!(both["saved_by_llc"]["steering_updates"]["count"], 1);
    assert_eq!(both["saved_by_llc"]["steering_updates"]["percent"], 33.3);
}

#[test]
fn flags_override_the_trace_and_the_table_prints() {
    let mut opts = Options::new(vec![Policy::Always, Policy::LlcAffinity]);
    opts.fast_path = Some(false);
    opts.topology = Some((uniform("8x8").unwrap(), "8x8".into()));
    let input: Box<dyn BufRead> = Box::new(Cursor::new(PACKETS.to_string()));
    let o = replay(opts, Some(input), None, &uniform).unwrap();
    // One LLC: the move to CPU 6 is suppressed, no steering update.
    assert_eq!(o.json()["llc"]["steering_updates"], 1);
    assert_eq!(o.json()["setup"]["fast_path"], false);
    let table = o.table();
    assert!(table.contains("steering updates"), "{table}");
    assert!(table.contains("llc saves"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("steering updates") && l.contains("66.7%")),
        "{table}"
    );
}

#[test]
fn model_consumers_replace_the_traces() {
    let mut opts = Options::new(vec![Policy::LlcAffinity]);
    opts.consumer = Some(ConsumerModel::Hash);
    let v = run_opts(PACKETS, opts).unwrap();
    // Every handled packet is read once by the model; the trace's c lines are not used.
    assert_eq!(v["records"], 5);
    assert_eq!(v["setup"]["consumer"], "hash");
}
