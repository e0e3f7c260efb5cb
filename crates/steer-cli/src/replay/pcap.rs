//! Packets of a pcap or pcapng capture as the replay's packet arrivals:
//! each frame's flow key and its time in ns since the capture's first
//! packet, streamed (the capture is never held in memory).
//!
//! Link types: Ethernet, raw IP (`RAW`, `IPV4`, `IPV6`), Linux cooked
//! capture (`tcpdump -i any`: SLL, SLL2) and BSD loopback (`NULL`, `LOOP`);
//! other layers are turned into an Ethernet frame so steer-core's own parser
//! (the dispatcher's) finds the flow. Frames that are not IP, or not to one
//! of the owned ports when ports are given, are skipped and counted, like
//! the traffic steer's XDP program leaves to the kernel.
//!
//! Invariant: the times handed out never go backwards (a frame stamped
//! earlier than the one before it is taken at that one's time, counted).

use std::fs::File;
use std::path::Path;

use anyhow::{bail, Context};
use pcap_parser::pcapng::Block;
use pcap_parser::{create_reader, Linktype, PcapBlockOwned, PcapError};
use steer_core::flow::{flow_key, FlowKey};

/// The reader's buffer; grown for frames larger than this.
const BUFFER: usize = 1 << 20;

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

/// Where a link layer's payload starts and what it carries.
fn to_ethernet(link: Linktype, data: &[u8], out: &mut Vec<u8>) -> Result<bool, String> {
    const IPV4: u16 = 0x0800;
    const IPV6: u16 = 0x86DD;
    let by_version = |ip: &[u8]| match ip.first().map(|b| b >> 4) {
        Some(4) => Some(IPV4),
        Some(6) => Some(IPV6),
        _ => None,
    };
    let (ethertype, payload) = match link {
        Linktype::ETHERNET => {
            out.clear();
            out.extend_from_slice(data);
            return Ok(true);
        }
        Linktype::RAW | Linktype::IPV4 | Linktype::IPV6 | Linktype(12) | Linktype(14) => {
            (by_version(data), data)
        }
        Linktype::LINUX_SLL => match (data.get(14..16), data.get(16..)) {
            (Some(p), Some(rest)) => (Some(u16::from_be_bytes([p[0], p[1]])), rest),
            _ => return Ok(false),
        },
        Linktype::LINUX_SLL2 => match (data.get(0..2), data.get(20..)) {
            (Some(p), Some(rest)) => (Some(u16::from_be_bytes([p[0], p[1]])), rest),
            _ => return Ok(false),
        },
        Linktype::NULL | Linktype::LOOP => match data.get(4..) {
            Some(rest) => (by_version(rest), rest),
            None => return Ok(false),
        },
        other => {
            return Err(format!(
                "unsupported link type {}: expected Ethernet, raw IP, Linux cooked (SLL, SLL2) \
                 or loopback; re-capture with `tcpdump -i <interface>`",
                other.0
            ))
        }
    };
    let Some(ethertype) = ethertype else {
        return Ok(false);
    };
    out.clear();
    out.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1]);
    out.extend_from_slice(&ethertype.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(true)
}

/// One pcapng interface: link type and time unit.
#[derive(Debug, Clone, Copy)]
struct Interface {
    link: Linktype,
    /// Timestamp units per second.
    resolution: u64,
    /// Seconds added to every timestamp.
    offset: i64,
}

/// Reads the capture at `path`, calling `each(t_ns, key)` for every frame
/// replayed (`ports` empty: every frame with a flow; otherwise only those
/// to one of `ports`), in capture order.
pub fn read(
    path: &Path,
    ports: &[u16],
    mut each: impl FnMut(u64, FlowKey) -> anyhow::Result<()>,
) -> anyhow::Result<PcapStats> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut reader = create_reader(BUFFER, file).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a pcap or pcapng capture ({e:?}); write one with `tcpdump -w FILE`",
            path.display()
        )
    })?;
    let mut stats = PcapStats::default();
    let mut legacy: Option<(Linktype, bool)> = None;
    let mut interfaces: Vec<Interface> = Vec::new();
    let mut first: Option<u64> = None;
    let mut last = 0u64;
    let mut frame = Vec::new();
    let mut size = BUFFER;
    // `abs_ns` absent: no timestamp, taken at the frame before's time.
    let mut handle = |abs_ns: Option<u64>, link: Linktype, data: &[u8], stats: &mut PcapStats| {
        stats.frames += 1;
        let mut t = abs_ns.map_or(last, |ns| ns.saturating_sub(*first.get_or_insert(ns)));
        if t < last {
            stats.out_of_order += 1;
            t = last;
        }
        last = t;
        if !to_ethernet(link, data, &mut frame).map_err(anyhow::Error::msg)? {
            stats.not_ip += 1;
            return Ok(());
        }
        match flow_key(&frame) {
            Ok(Some(key)) if ports.is_empty() || ports.contains(&key.dst_port()) => {
                stats.packets += 1;
                each(t, key)
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
    };
    let mut stalled = false;
    loop {
        match reader.next() {
            Ok((offset, block)) => {
                stalled = false;
                match block {
                    PcapBlockOwned::LegacyHeader(h) => {
                        legacy = Some((h.network, h.is_nanosecond_precision()));
                    }
                    PcapBlockOwned::Legacy(b) => {
                        let (link, nanos) = legacy.unwrap_or((Linktype::ETHERNET, false));
                        let frac = if nanos {
                            u64::from(b.ts_usec)
                        } else {
                            u64::from(b.ts_usec) * 1_000
                        };
                        let ns = u64::from(b.ts_sec) * 1_000_000_000 + frac;
                        handle(Some(ns), link, b.data, &mut stats)?;
                    }
                    PcapBlockOwned::NG(Block::SectionHeader(_)) => interfaces.clear(),
                    PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                        interfaces.push(Interface {
                            link: idb.linktype,
                            resolution: idb.ts_resolution().unwrap_or(1_000_000),
                            offset: idb.ts_offset(),
                        });
                    }
                    PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                        let Some(i) = interfaces.get(epb.if_id as usize).copied() else {
                            bail!(
                                "{}: a packet names interface {} that no block described",
                                path.display(),
                                epb.if_id
                            );
                        };
                        let ts = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                        let res = i.resolution.max(1);
                        let secs = (ts / res) as i64 + i.offset;
                        let ns = (secs.max(0) as u64) * 1_000_000_000
                            + ((ts % res) as u128 * 1_000_000_000 / u128::from(res)) as u64;
                        let len = (epb.caplen as usize).min(epb.data.len());
                        handle(Some(ns), i.link, &epb.data[..len], &mut stats)?;
                    }
                    PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                        // No timestamp: it arrives with the frame before it.
                        let link = interfaces.first().map_or(Linktype::ETHERNET, |i| i.link);
                        handle(None, link, spb.data, &mut stats)?;
                    }
                    PcapBlockOwned::NG(_) => {}
                }
                reader.consume(offset);
            }
            Err(PcapError::Eof) => break,
            Err(PcapError::Incomplete(_)) => {
                if stalled {
                    // A block larger than the buffer: grow it, within reason.
                    size *= 2;
                    if size > 1 << 28 || !reader.grow(size) {
                        bail!(
                            "{}: a block is too large or the capture is cut short",
                            path.display()
                        );
                    }
                }
                stalled = true;
                reader
                    .refill()
                    .map_err(|e| anyhow::anyhow!("{}: cannot read: {e:?}", path.display()))?;
            }
            Err(e) => bail!(
                "{}: the capture is damaged after {} frames ({e:?})",
                path.display(),
                stats.frames
            ),
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use steer_core::packet::build::FrameBuilder;

    #[test]
    fn link_layers_become_ethernet_frames() {
        let eth = FrameBuilder::udp(
            Ipv4Addr::new(10, 0, 0, 1).into(),
            Ipv4Addr::new(10, 0, 0, 2).into(),
            5000,
            53,
        )
        .build();
        let ip = &eth[14..];
        let want = flow_key(&eth).unwrap().unwrap();
        let mut out = Vec::new();
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&0x0800u16.to_be_bytes());
        sll.extend_from_slice(ip);
        let mut sll2 = 0x0800u16.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(ip);
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(ip);
        for (link, data) in [
            (Linktype::ETHERNET, eth.as_slice()),
            (Linktype::RAW, ip),
            (Linktype::IPV4, ip),
            (Linktype::LINUX_SLL, &sll),
            (Linktype::LINUX_SLL2, &sll2),
            (Linktype::NULL, &null),
        ] {
            assert_eq!(to_ethernet(link, data, &mut out), Ok(true), "{link}");
            assert_eq!(flow_key(&out).unwrap(), Some(want), "{link}");
        }
        assert_eq!(to_ethernet(Linktype::RAW, &[0x10], &mut out), Ok(false));
        assert_eq!(
            to_ethernet(Linktype::LINUX_SLL, &[0; 4], &mut out),
            Ok(false)
        );
        assert!(to_ethernet(Linktype(147), ip, &mut out).is_err());
    }
}
