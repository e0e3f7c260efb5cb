//! The request frame the generator sends and the reply it checks.
//!
//! An Ethernet/IPv4/UDP frame (UDP checksum 0, valid over IPv4) whose
//! payload starts like a sockperf 3.x client message, so `sockperf server`
//! answers it too: sequence number (u64), flags (u16: client | pong request)
//! and length (u32), big-endian. Then steer-bench's own fields,
//! little-endian: a magic, the flow id, the phase tag (replies of an earlier
//! phase are told apart), the send time, and the arrival time that the
//! generator's XDP program (`bpf/gen_rx.c`) writes. The offsets here and in
//! `bpf/bench.h` must agree.

use std::net::Ipv4Addr;

use steer_core::packet::checksum::checksum;

/// Payload bytes (what `sockperf server` sees as the message length).
pub const PAYLOAD_LEN: usize = 40;
/// Ethernet + IPv4 + UDP headers.
pub const HEADERS: usize = 14 + 20 + 8;
/// The whole frame.
pub const FRAME_LEN: usize = HEADERS + PAYLOAD_LEN;

const SEQ: usize = 0;
const FLAGS: usize = 8;
const LEN: usize = 10;
const MAGIC: usize = 14;
const FLOW: usize = 16;
const TAG: usize = 20;
const TX_TS: usize = 24;
const RX_TS: usize = 32;
/// "SB", in host order as the XDP program compares it.
pub const MAGIC_VALUE: u16 = 0x5342;
/// sockperf flags: from a client, pong requested.
const SOCKPERF_CLIENT_PONG: u16 = 0x0003;

/// Where a request goes: addresses and ports (ports vary per flow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// Destination (server) MAC.
    pub dst_mac: [u8; 6],
    /// Source (generator) MAC.
    pub src_mac: [u8; 6],
    /// Generator address.
    pub src: Ipv4Addr,
    /// Server address.
    pub dst: Ipv4Addr,
    /// Server UDP port.
    pub dst_port: u16,
}

/// A request frame with every constant field set; [`Template::fill`] writes
/// the per-packet ones.
#[derive(Debug, Clone)]
pub struct Template {
    bytes: [u8; FRAME_LEN],
}

impl Template {
    /// The frame for `ep`, payload fields zero.
    pub fn new(ep: &Endpoints) -> Self {
        let mut f = [0u8; FRAME_LEN];
        f[..6].copy_from_slice(&ep.dst_mac);
        f[6..12].copy_from_slice(&ep.src_mac);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip_len = (20 + 8 + PAYLOAD_LEN) as u16;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&ip_len.to_be_bytes());
        f[20] = 0x40; // don't fragment
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&ep.src.octets());
        f[30..34].copy_from_slice(&ep.dst.octets());
        let csum = checksum(&f[14..34]);
        f[24..26].copy_from_slice(&csum.to_be_bytes());
        f[36..38].copy_from_slice(&ep.dst_port.to_be_bytes());
        f[38..40].copy_from_slice(&((8 + PAYLOAD_LEN) as u16).to_be_bytes());
        let p = HEADERS;
        f[p + FLAGS..p + FLAGS + 2].copy_from_slice(&SOCKPERF_CLIENT_PONG.to_be_bytes());
        f[p + LEN..p + LEN + 4].copy_from_slice(&(PAYLOAD_LEN as u32).to_be_bytes());
        f[p + MAGIC..p + MAGIC + 2].copy_from_slice(&MAGIC_VALUE.to_ne_bytes());
        Template { bytes: f }
    }

    /// The frame of packet `seq` of flow `flow` (source port `sport`), in
    /// phase `tag`, sent at `tx_ns` (CLOCK_MONOTONIC).
    pub fn fill(
        &self,
        out: &mut [u8; FRAME_LEN],
        sport: u16,
        flow: u32,
        seq: u64,
        tag: u32,
        tx_ns: u64,
    ) {
        *out = self.bytes;
        out[34..36].copy_from_slice(&sport.to_be_bytes());
        let p = &mut out[HEADERS..];
        p[SEQ..SEQ + 8].copy_from_slice(&seq.to_be_bytes());
        p[FLOW..FLOW + 4].copy_from_slice(&flow.to_le_bytes());
        p[TAG..TAG + 4].copy_from_slice(&tag.to_le_bytes());
        p[TX_TS..TX_TS + 8].copy_from_slice(&tx_ns.to_le_bytes());
    }
}

/// What a reply says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Flow id.
    pub flow: u32,
    /// Sequence number within the flow.
    pub seq: u64,
    /// Phase tag.
    pub tag: u32,
    /// When the request was sent (ns, CLOCK_MONOTONIC).
    pub tx_ns: u64,
    /// When the reply arrived (ns, CLOCK_MONOTONIC; 0 when not stamped).
    pub rx_ns: u64,
}

fn u64_at(b: &[u8], at: usize, be: bool) -> Option<u64> {
    let a: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
    Some(if be {
        u64::from_be_bytes(a)
    } else {
        u64::from_le_bytes(a)
    })
}

fn u32_le(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Parses a reply frame: IPv4/UDP (no options) carrying the magic; `None`
/// for anything else.
pub fn parse_reply(frame: &[u8]) -> Option<Reply> {
    if frame.get(12..14)? != [0x08, 0x00] || *frame.get(14)? != 0x45 || *frame.get(23)? != 17 {
        return None;
    }
    let p = frame.get(HEADERS..HEADERS + PAYLOAD_LEN)?;
    if u16::from_ne_bytes([p[MAGIC], p[MAGIC + 1]]) != MAGIC_VALUE {
        return None;
    }
    Some(Reply {
        flow: u32_le(p, FLOW)?,
        seq: u64_at(p, SEQ, true)?,
        tag: u32_le(p, TAG)?,
        tx_ns: u64_at(p, TX_TS, false)?,
        rx_ns: u64_at(p, RX_TS, false)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep() -> Endpoints {
        Endpoints {
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_mac: [2, 0, 0, 0, 0, 2],
            src: Ipv4Addr::new(198, 18, 0, 2),
            dst: Ipv4Addr::new(198, 18, 0, 1),
            dst_port: 9000,
        }
    }

    #[test]
    fn request_round_trips_and_looks_like_sockperf() {
        let t = Template::new(&ep());
        let mut f = [0u8; FRAME_LEN];
        t.fill(&mut f, 40001, 7, 0x0102_0304_0506, 99, 123_456_789);
        let r = parse_reply(&f).unwrap();
        assert_eq!(
            r,
            Reply {
                flow: 7,
                seq: 0x0102_0304_0506,
                tag: 99,
                tx_ns: 123_456_789,
                rx_ns: 0
            }
        );
        // sockperf: byte 9 holds client (1) | pong request (2); length = payload.
        assert_eq!(f[HEADERS + 9], 3);
        assert_eq!(
            &f[HEADERS + 10..HEADERS + 14],
            &(PAYLOAD_LEN as u32).to_be_bytes()
        );
        assert_eq!(u16::from_be_bytes([f[34], f[35]]), 40001);
        assert_eq!(checksum(&f[14..34]), 0, "the IPv4 header checksum verifies");
        // steer's parser agrees on the addresses.
        let key = steer_core::flow::flow_key(&f).unwrap().unwrap();
        let steer_core::flow::FlowAddrs::V4 { dst, .. } = key.addrs else {
            panic!("an IPv4 flow: {key:?}")
        };
        assert_eq!(dst, "198.18.0.1".parse::<std::net::Ipv4Addr>().unwrap());
        assert_eq!(key.dst_port(), 9000);
    }

    #[test]
    fn foreign_frames_are_rejected() {
        let t = Template::new(&ep());
        let mut f = [0u8; FRAME_LEN];
        t.fill(&mut f, 40001, 1, 1, 1, 1);
        for len in 0..FRAME_LEN {
            assert!(parse_reply(&f[..len]).is_none());
        }
        f[HEADERS + MAGIC] ^= 0xff;
        assert!(parse_reply(&f).is_none());
    }
}
