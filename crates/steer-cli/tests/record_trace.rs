//! A running engine records the trace `steer replay` reads: `steer proxy
//! --record-trace` on a 2-queue veth in a namespace, clients driving it,
//! then `steer replay` on the file. The trace holds one `p` line per frame
//! the engine received and one `c` line per datagram the proxy read, after
//! a header naming the machine and the engine's settings; the replay takes
//! them all and reproduces the engine's setup. Needs root, as CI runs it.

mod running;
mod support;

use std::io::Write;
use std::time::Duration;

use running::steer_ok;
use steer_testbed::{Spawned, TestNet};
use support::{drive_flows, kernel_backend, proxy_command};

#[test]
fn proxy_records_a_trace_that_replays() {
    let net = TestNet::new();
    let backend = kernel_backend();
    let id = std::process::id();
    let trace = std::env::temp_dir().join(format!("steer-recorded-{id}.trace"));
    let json = std::env::temp_dir().join(format!("steer-recorded-{id}.json"));
    let mut cmd = proxy_command(&net, backend, &json);
    cmd.args(["--record-trace", trace.to_str().unwrap()]);
    let mut child = Spawned::start("steer proxy", cmd);
    let mut stdin = child.child.stdin.take().unwrap();
    let ready = child.next_line().unwrap();
    assert!(ready.contains("ready"), "{ready}");
    let (flows, per_flow) = (4, 60);
    let got = drive_flows(&net, flows, per_flow, 10);
    assert!(got.iter().all(|g| g.len() == per_flow as usize), "{got:?}");
    writeln!(stdin, "quit").unwrap();
    let status = child.wait();
    assert!(status.success(), "steer proxy exited with {status}");
    let said = child.rest();
    assert!(
        said.iter()
            .any(|l| l.contains("trace") && l.contains("steer replay")),
        "{said:?}"
    );

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let text = std::fs::read_to_string(&trace).unwrap();
    let count = |prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count() as u64;
    let (packets, consumed) = (count("p "), count("c "));
    let rx = report["total"]["rx"].as_u64().unwrap();
    let read = report["proxy"]["to_backend"].as_u64().unwrap();
    assert_eq!(read, u64::from(per_flow) * flows as u64, "{report:#}");
    assert_eq!(packets, rx, "one p line per frame received\n{text}");
    assert_eq!(consumed, read, "one c line per datagram read");
    assert_eq!(report["trace"]["events"], packets + consumed, "{report:#}");
    assert_eq!(report["trace"]["dropped"], 0);
    assert!(text.lines().any(|l| l.starts_with("llcs ")), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("engine ") && l.contains("queues=2")),
        "{text}"
    );
    assert!(text.lines().last().unwrap().starts_with("# recorded"));

    // The replay reads it all back, under both rules.
    let out = steer_ok(&["replay", "--policy", "both", trace.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for p in ["always", "llc"] {
        assert_eq!(v[p]["packets"], packets, "{v:#}");
        assert_eq!(v[p]["records"], consumed, "{v:#}");
        assert_eq!(v[p]["flows"], flows as u64, "{v:#}");
        // Each flow placed at least once; every packet somewhere.
        let r = &v[p];
        assert!(
            r["steering_updates"].as_u64().unwrap() >= flows as u64,
            "{v:#}"
        );
        let placed = [
            "fast_path",
            "queued_local",
            "steered_out",
            "ring_drops",
            "no_target",
        ]
        .iter()
        .map(|k| r[k].as_u64().unwrap())
        .sum::<u64>();
        assert_eq!(placed, packets, "{v:#}");
    }
    assert_eq!(v["setup"]["queues"], 2, "{v:#}");
    assert_eq!(v["table"], 65536, "the engine's table size, from the trace");
    // The same trace with a consumer model instead of the recorded reads.
    let out = steer_ok(&[
        "replay",
        "--policy",
        "both",
        "--consumer",
        "migrate:1",
        "--table",
        trace.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("steering updates"));
    let _ = std::fs::remove_file(&trace);
    // Nothing left attached.
    std::thread::sleep(Duration::from_millis(10));
    assert!(!net.link_show().contains("xdp"), "{}", net.link_show());
}
