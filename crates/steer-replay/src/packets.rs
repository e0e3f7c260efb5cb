//! A capture's frames as the replay's packet arrivals: each frame's flow
//! key and its time in ns since the capture's first frame.
//!
//! Every link layer [`link`](crate::link) reads is turned into an Ethernet
//! frame so steer-core's own parser (the dispatcher's) finds the flow.
//! Frames that are not IP, or not to one of the owned ports when ports are
//! given, are skipped and counted, like the traffic steer's XDP program
//! leaves to the kernel.
//!
//! Invariants: the times handed out never go backwards (a frame stamped
//! earlier than the one before it is taken at that one's time, and
//! counted; a frame with no time arrives with the one before it); every
//! frame is counted once, so `packets + not_ip + other_port + malformed ==
//! frames`.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use steer_core::flow::{flow_key, FlowKey};

use crate::capture::{read_frames, CaptureError, ReadError};
use crate::link::to_ethernet;

/// What reading a capture counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PcapStats {
    /// Frames in the capture.
    pub frames: u64,
    /// Frames replayed (IP with a flow, to an owned port if ports were given).
    pub packets: u64,
    /// Frames that are not IP (ARP, ...).
    pub not_ip: u64,
    /// IP frames to a port not owned.
    pub other_port: u64,
    /// Frames that did not parse.
    pub malformed: u64,
    /// Frames stamped earlier than the frame before them.
    pub out_of_order: u64,
}

/// Reads the capture `input`, calling `each(t_ns, key)` for every frame
/// replayed (`ports` empty: every frame with a flow; otherwise only those
/// to one of `ports`), in capture order, `t_ns` since the first frame.
pub fn read_packets<R, E>(
    input: R,
    ports: &[u16],
    mut each: impl FnMut(u64, FlowKey) -> Result<(), E>,
) -> Result<PcapStats, ReadError<E>>
where
    R: Read + Send,
{
    let mut stats = PcapStats::default();
    let mut first: Option<u64> = None;
    let mut last = 0u64;
    let mut frame = Vec::new();
    read_frames(input, |f| {
        stats.frames += 1;
        let mut t = f
            .time_ns
            .map_or(last, |ns| ns.saturating_sub(*first.get_or_insert(ns)));
        if t < last {
            stats.out_of_order += 1;
            t = last;
        }
        last = t;
        match to_ethernet(f.link, f.data, &mut frame) {
            Ok(true) => {}
            Ok(false) => {
                stats.not_ip += 1;
                return Ok(());
            }
            Err(e) => return Err(ReadError::Capture(CaptureError::Link(e))),
        }
        match flow_key(&frame) {
            Ok(Some(key)) if ports.is_empty() || ports.contains(&key.dst_port()) => {
                stats.packets += 1;
                each(t, key).map_err(ReadError::Stopped)
            }
            Ok(Some(_)) => {
                stats.other_port += 1;
                Ok(())
            }
            Ok(None) => {
                stats.not_ip += 1;
                Ok(())
            }
            Err(_) => {
                stats.malformed += 1;
                Ok(())
            }
        }
    })
    .map_err(|e| match e {
        ReadError::Capture(e) | ReadError::Stopped(ReadError::Capture(e)) => ReadError::Capture(e),
        ReadError::Stopped(ReadError::Stopped(e)) => ReadError::Stopped(e),
    })?;
    Ok(stats)
}

/// Why [`read_path`] stopped: the capture (with its path, in one line) or
/// the caller's error.
#[derive(Debug)]
pub enum PathError<E> {
    /// The file cannot be opened or read as a capture; the text names it.
    Capture(String),
    /// The caller's function returned this error.
    Stopped(E),
}

/// [`read_packets`] on the capture file at `path`.
pub fn read_path<E>(
    path: &Path,
    ports: &[u16],
    each: impl FnMut(u64, FlowKey) -> Result<(), E>,
) -> Result<PcapStats, PathError<E>> {
    let file = File::open(path)
        .map_err(|e| PathError::Capture(format!("cannot open {}: {e}", path.display())))?;
    read_packets(std::io::BufReader::new(file), ports, each).map_err(|e| match e {
        ReadError::Capture(e) => PathError::Capture(format!("{}: {e}", path.display())),
        ReadError::Stopped(e) => PathError::Stopped(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use steer_core::packet::build::FrameBuilder;

    /// A classic pcap (Ethernet, µs) of `frames` at their times in µs.
    fn pcap(frames: &[(u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        out.extend_from_slice(&65535u32.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        for (us, f) in frames {
            out.extend_from_slice(&(us / 1_000_000).to_le_bytes());
            out.extend_from_slice(&(us % 1_000_000).to_le_bytes());
            out.extend_from_slice(&(f.len() as u32).to_le_bytes());
            out.extend_from_slice(&(f.len() as u32).to_le_bytes());
            out.extend_from_slice(f);
        }
        out
    }

    fn udp(dst: u16) -> Vec<u8> {
        FrameBuilder::udp(
            Ipv4Addr::new(10, 0, 0, 1).into(),
            Ipv4Addr::new(10, 0, 0, 2).into(),
            5000,
            dst,
        )
        .build()
    }

    #[test]
    fn frames_become_arrivals_in_time_order() {
        let arp = {
            let mut f = udp(53);
            f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
            f
        };
        let input = pcap(&[
            (1_000_010, udp(53)),
            (1_000_020, udp(80)),
            (1_000_015, udp(53)),
            (1_000_030, arp),
            (1_000_040, udp(53)[..20].to_vec()),
            (1_000_050, udp(53)),
        ]);
        let mut got = Vec::new();
        let stats = read_packets(input.as_slice(), &[53], |t, k| {
            got.push((t, k.dst_port()));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(got, [(0, 53), (10_000, 53), (40_000, 53)]);
        assert_eq!(
            stats,
            PcapStats {
                frames: 6,
                packets: 3,
                not_ip: 1,
                other_port: 1,
                malformed: 1,
                out_of_order: 1,
            }
        );
    }

    #[test]
    fn the_callers_error_stops_the_read() {
        let input = pcap(&[(1, udp(53)), (2, udp(53))]);
        let mut n = 0;
        let r = read_packets(input.as_slice(), &[], |_, _| {
            n += 1;
            Err("enough")
        });
        assert_eq!((r, n), (Err(ReadError::Stopped("enough")), 1));
        let e = read_path(Path::new("/nonexistent.pcap"), &[], |_, _| Ok::<(), ()>(()));
        assert!(matches!(e, Err(PathError::Capture(m)) if m.contains("/nonexistent.pcap")));
    }
}
