//! The fuzz targets' seeds (the workspace's `fuzz/seeds/pcap` and
//! `fuzz/seeds/trace`, and any crash reproducer added there) on stable,
//! without cargo-fuzz: the captures read whole with the frames they were
//! written with, and every trace line parses and prints back to itself.

use std::fs;
use std::path::PathBuf;

use steer_replay::capture::read_frames;
use steer_replay::packets::read_packets;
use steer_replay::trace::parse_line;

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut out: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn capture_seeds_read_whole() {
    let mut read = Vec::new();
    for (name, data) in seeds("pcap") {
        let mut frames = 0;
        read_frames(data.as_slice(), |f| {
            assert!(f.data.len() <= f.caplen as usize);
            frames += 1;
            Ok::<(), ()>(())
        })
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let stats = read_packets(data.as_slice(), &[], |_, _| Ok::<(), ()>(()))
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        read.push((name, frames, stats.packets));
    }
    let expected = [
        ("binary_time.pcapng", 1, 1),
        ("ethernet.pcap", 3, 2),
        ("raw_ns.pcap", 2, 2),
        ("two_interfaces.pcapng", 4, 3),
    ];
    for (name, frames, packets) in expected {
        assert!(
            read.iter()
                .any(|(n, f, p)| n == name && *f == frames && *p == packets),
            "{name}: {read:?}"
        );
    }
}

#[test]
fn trace_seeds_parse_and_print_back() {
    for (name, data) in seeds("trace") {
        let text = String::from_utf8(data).unwrap();
        for (i, line) in text.lines().enumerate() {
            let parsed = parse_line(line).unwrap_or_else(|e| panic!("{name}:{}: {e}", i + 1));
            if let Some(event) = parsed {
                assert_eq!(
                    parse_line(&event.to_string()),
                    Ok(Some(event)),
                    "{name}:{}",
                    i + 1
                );
            }
        }
    }
}
