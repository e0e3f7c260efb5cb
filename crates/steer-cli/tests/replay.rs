//! `steer replay` end to end: the binary on small traces over the seed
//! machine (`pack:2 l3:16 core:8 pu:1`: 256 CPUs, 32 LLCs of 8 CPUs each),
//! exact JSON numbers under both policies, and bad input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_steer");

/// Runs the binary with `args`, feeding `stdin`.
fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .arg("replay")
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn steer replay");
    // The binary may exit (bad flags, bad file) before reading its stdin: a
    // broken pipe is then expected, not a test failure.
    let mut stdin_pipe = child.stdin.take().expect("stdin");
    if let Err(e) = stdin_pipe.write_all(stdin.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write trace: {e}");
    }
    drop(stdin_pipe);
    child.wait_with_output().expect("wait")
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// Intra- and cross-LLC moves, hotplug, affinity and a slot collision.
const TRACE: &str = "\
# the seed machine
topology pack:2 l3:16 core:8 pu:1
table 1024
c 0xA0000001 0      # A: new
c 0xA0000001 0      # A: same CPU, nothing written
c 0xA0000001 3      # A: intra-LLC (0-7)
c 0xA0000001 7      # A: intra-LLC
c 0xA0000001 8      # A: cross-LLC
c 0xA0000001 130    # A: cross-LLC, other package
c 0xB0000002 16     # B: new
off 16
c 0xB0000002 17     # B: old CPU offline
on 16
c 0xB0000002 18 allowed=18-23   # B: no longer allowed on 17
c 0xB0000002 19     # B: intra-LLC (16-23)
c 3221225473 131    # C = 0xC0000001: A's slot, another flow
c 0xA0000001 130    # A: its slot now holds C
";

#[test]
fn llc_policy_counts() {
    let v = json(&run(&["--policy", "llc"], TRACE));
    assert_eq!(v["policy"], "llc");
    assert_eq!(v["cpus"], 256);
    assert_eq!(v["llcs"], 32);
    assert_eq!(v["table"], 1024);
    assert_eq!(v["records"], 12);
    assert_eq!(v["updates"], 8);
    assert_eq!(v["suppressed"], 3);
    assert_eq!(v["unchanged"], 1);
    assert_eq!(v["new_or_other_flow"], 4);
    assert_eq!(v["forced_offline"], 1);
    assert_eq!(v["forced_affinity"], 1);
    assert_eq!(v["cross_llc"], 2);
}

#[test]
fn always_policy_counts() {
    let v = json(&run(&["--policy", "always"], TRACE));
    assert_eq!(v["policy"], "always");
    assert_eq!(v["records"], 12);
    assert_eq!(v["updates"], 11);
    assert_eq!(v["suppressed"], 0);
    assert_eq!(v["unchanged"], 1);
    assert_eq!(v["new_or_other_flow"], 4);
    assert_eq!(v["changed"], 7);
    assert!(v.get("cross_llc").is_none());
}

#[test]
fn reads_a_file_and_dash_means_stdin() {
    let path = std::env::temp_dir().join(format!("steer-replay-{}.trace", std::process::id()));
    std::fs::write(&path, TRACE).expect("write trace file");
    let from_file = json(&run(
        &["--policy", "llc", path.to_str().expect("utf-8")],
        "",
    ));
    let _ = std::fs::remove_file(&path);
    let from_dash = json(&run(&["--policy", "llc", "-"], TRACE));
    assert_eq!(from_file, from_dash);
    // One JSON object on one line.
    let out = run(&["--policy", "llc"], TRACE);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

#[test]
fn default_table_and_empty_trace_body() {
    let v = json(&run(
        &["--policy", "llc"],
        "topology pack:2 l3:16 core:8 pu:1\n",
    ));
    assert_eq!(v["table"], 4096);
    assert_eq!(v["records"], 0);
    assert_eq!(v["updates"], 0);
}

/// Runs a bad trace; returns stderr after checking the exit status.
fn fails(trace: &str) -> String {
    let out = run(&["--policy", "llc"], trace);
    assert!(!out.status.success(), "should fail: {trace:?}");
    assert!(out.stdout.is_empty());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_lines_exit_non_zero_naming_the_line() {
    let topo = "topology pack:2 l3:16 core:8 pu:1\n";
    for (body, line) in [
        ("c 0x5 1\n", 1),                     // no topology first
        ("topology pack:2 l3:x\n", 1),        // hwloc rejects the spec
        (&format!("{topo}# ok\nc 0 1\n"), 3), // hash 0
        (&format!("{topo}c 5 256\n"), 2),     // CPU out of range
        (&format!("{topo}c 5 1 allowed=0-300\n"), 2),
        (&format!("{topo}c 5\n"), 2),
        (&format!("{topo}table 1000\n"), 2), // not a power of two
        (&format!("{topo}c 5 1\ntable 64\n"), 3),
        (&format!("{topo}off 999\n"), 2),
        (&format!("{topo}migrate 5 1\n"), 2),
        (&format!("{topo}{topo}"), 2),
    ] {
        let err = fails(body);
        assert!(
            err.contains(&format!("line {line}:")),
            "{body:?}: stderr {err:?} should name line {line}"
        );
    }
}

#[test]
fn missing_topology_file_or_policy_fail() {
    assert!(fails("# only a comment\n").contains("topology"));
    let out = run(&["/nonexistent/steer.trace"], "");
    assert!(!out.status.success());
    let out = run(&["--policy", "sometimes"], TRACE);
    assert!(!out.status.success());
}

/// A generated trace: 100 flows whose consumers wander over all 8 CPUs of
/// LLC 0, then jump to LLC 1. `always` writes every hop; `llc` writes the
/// first placement and the LLC jump only.
#[test]
fn wandering_consumers_llc_saves_intra_llc_updates() {
    let mut trace = String::from("topology pack:2 l3:16 core:8 pu:1\ntable 4096\n");
    for f in 1..=100u32 {
        let hash = f.wrapping_mul(0x9e37_79b9) | 1 << 31;
        for cpu in 0..8 {
            trace.push_str(&format!("c {hash:#x} {cpu}\n"));
        }
        trace.push_str(&format!("c {hash:#x} 8\n"));
    }
    let always = json(&run(&["--policy", "always"], &trace));
    let llc = json(&run(&["--policy", "llc"], &trace));
    assert_eq!(always["records"], 900);
    assert_eq!(llc["records"], 900);
    assert_eq!(always["new_or_other_flow"], 100);
    assert_eq!(always["changed"], 800);
    assert_eq!(always["updates"], 900);
    assert_eq!(llc["new_or_other_flow"], 100);
    assert_eq!(llc["cross_llc"], 100);
    assert_eq!(llc["suppressed"], 700);
    assert_eq!(llc["updates"], 200);
}

/// The trace shown in docs/replay.md gives the numbers that page states.
#[test]
fn readme_example_trace() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/replay.md"))
            .unwrap();
    let start = readme
        .find("<<'TRACE'\n")
        .expect("docs/replay.md has the example trace")
        + "<<'TRACE'\n".len();
    let len = readme[start..].find("TRACE\n").unwrap();
    let trace = &readme[start..start + len];
    let always = json(&run(&["--policy", "always"], trace));
    assert_eq!(
        (always["updates"].as_u64(), always["suppressed"].as_u64()),
        (Some(6), Some(0))
    );
    let llc = json(&run(&["--policy", "llc"], trace));
    assert_eq!(
        (llc["updates"].as_u64(), llc["suppressed"].as_u64()),
        (Some(5), Some(1))
    );
    for reason in [
        "new_or_other_flow",
        "forced_offline",
        "forced_affinity",
        "cross_llc",
    ] {
        assert!(llc[reason].as_u64().unwrap() >= 1, "{reason}");
    }
}

/// Writes a classic pcap (Ethernet, microsecond stamps) of `frames`.
fn write_pcap(path: &std::path::Path, frames: &[(u64, Vec<u8>)]) {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]); // thiszone, sigfigs
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
    for (us, f) in frames {
        out.extend_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).expect("write pcap");
}

/// Writes the same frames as pcapng (one Ethernet interface, microseconds).
fn write_pcapng(path: &std::path::Path, frames: &[(u64, Vec<u8>)]) {
    fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
        let pad = (4 - body.len() % 4) % 4;
        let len = (12 + body.len() + pad) as u32;
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(&vec![0; pad]);
        out.extend_from_slice(&len.to_le_bytes());
    }
    let mut out = Vec::new();
    let mut shb = 0x1A2B_3C4Du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut out, 0x0A0D_0D0A, &shb);
    let mut idb = 1u16.to_le_bytes().to_vec();
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&65535u32.to_le_bytes());
    block(&mut out, 1, &idb);
    for (us, f) in frames {
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&((us >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(*us as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(f);
        epb.extend_from_slice(&vec![0; (4 - f.len() % 4) % 4]);
        block(&mut out, 6, &epb);
    }
    std::fs::write(path, out).expect("write pcapng");
}

/// 24 UDP flows to port 53 (IPv4 and IPv6), a packet each every 200 us
/// for 100 ms, plus one flow to port 80 and an ARP frame now and then.
fn capture() -> Vec<(u64, Vec<u8>)> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use steer_core::packet::build::FrameBuilder;
    let mut frames = Vec::new();
    for step in 0..500u64 {
        for f in 0..24u16 {
            let (src, dst): (IpAddr, IpAddr) = if f % 2 == 0 {
                (
                    Ipv4Addr::new(10, 0, 0, 1 + f as u8).into(),
                    Ipv4Addr::new(10, 0, 1, 1).into(),
                )
            } else {
                (
                    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1 + f).into(),
                    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 1, 1).into(),
                )
            };
            let frame = FrameBuilder::udp(src, dst, 40000 + f, 53)
                .payload(b"query")
                .build();
            frames.push((1_700_000_000_000_000 + step * 200 + u64::from(f), frame));
        }
        if step % 50 == 0 {
            let web = FrameBuilder::tcp(
                Ipv4Addr::new(10, 0, 0, 99).into(),
                Ipv4Addr::new(10, 0, 1, 1).into(),
                5555,
                80,
            )
            .build();
            frames.push((1_700_000_000_000_000 + step * 200 + 50, web));
            let mut arp = vec![0xff; 12];
            arp.extend_from_slice(&[0x08, 0x06]);
            arp.extend_from_slice(&[0; 28]);
            frames.push((1_700_000_000_000_000 + step * 200 + 60, arp));
        }
    }
    frames
}

/// A capture written with steer-core's frame builder, replayed end to end:
/// pcap and pcapng give the same answer, the port filter and non-IP frames
/// are counted, and with consumers migrating like tokio's threads the LLC
/// rule makes fewer steering updates than `always`.
#[test]
fn replays_a_pcap_capture() {
    let dir = std::env::temp_dir();
    let pcap = dir.join(format!("steer-replay-{}.pcap", std::process::id()));
    let pcapng = dir.join(format!("steer-replay-{}.pcapng", std::process::id()));
    let frames = capture();
    write_pcap(&pcap, &frames);
    write_pcapng(&pcapng, &frames);
    let topo = ["--topology", "pack:1 l3:2 core:4 pu:1"];
    let args = |file: &std::path::Path, consumer: &str| {
        vec![
            "--policy".to_string(),
            "both".into(),
            "--pcap".into(),
            file.to_str().unwrap().into(),
            "--port".into(),
            "53".into(),
            "--consumer".into(),
            consumer.into(),
            topo[0].into(),
            topo[1].into(),
        ]
    };
    let run_args = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        json(&run(&a, ""))
    };
    let v = run_args(args(&pcap, "migrate:1:0.9"));
    let ng = run_args(args(&pcapng, "migrate:1:0.9"));
    let _ = std::fs::remove_file(&pcapng);
    assert_eq!(v, ng, "pcap and pcapng replay alike");
    assert_eq!(v["pcap"]["frames"], 12_000 + 20);
    assert_eq!(v["pcap"]["packets"], 12_000);
    assert_eq!(v["pcap"]["other_port"], 10);
    assert_eq!(v["pcap"]["not_ip"], 10);
    assert_eq!(v["cpus"], 8);
    assert_eq!(v["table"], 65536);
    for p in ["always", "llc"] {
        assert_eq!(v[p]["packets"], 12_000, "{v:#}");
        assert_eq!(v[p]["flows"], 24);
        assert_eq!(v[p]["records"], 12_000, "every handled packet is read");
        assert!(v[p]["duration_ns"].as_u64().unwrap() >= 99_000_000);
    }
    let (a, l) = (
        v["always"]["steering_updates"].as_u64().unwrap(),
        v["llc"]["steering_updates"].as_u64().unwrap(),
    );
    assert!(a > 24 && l * 2 < a, "always {a}, llc {l}");
    assert_eq!(v["saved_by_llc"]["steering_updates"]["count"], a - l);
    assert_eq!(v["setup"]["queues"], 8);
    assert_eq!(v["setup"]["consumer"], "migrate:1:0.9");

    // Consumers that never move: both rules place each flow once.
    let h = run_args(args(&pcap, "hash"));
    assert_eq!(
        h["always"]["steering_updates"],
        h["llc"]["steering_updates"]
    );
    // The table says the same as the JSON.
    let mut with_table = args(&pcap, "migrate:1:0.9");
    with_table.push("--table".into());
    let with_table: Vec<&str> = with_table.iter().map(String::as_str).collect();
    let out = run(&with_table, "");
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("steering updates"))
        .expect("a steering updates row")
        .split_whitespace()
        .collect();
    assert_eq!(row[2..4], [a.to_string(), l.to_string()], "{table}");
    // Without a consumer model or trace: a one-line error that says what to give.
    let out = run(&["--pcap", pcap.to_str().unwrap(), topo[0], topo[1]], "");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--consumer"));
    let out = run(
        &[
            "--pcap",
            "/nonexistent.pcap",
            "--consumer",
            "hash",
            topo[0],
            topo[1],
        ],
        "",
    );
    assert!(!out.status.success());
    let _ = std::fs::remove_file(&pcap);
}
