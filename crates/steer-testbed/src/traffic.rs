//! A numbered UDP load from the peer of a [`TestNet`] to a port of its
//! host end: several flows (IPv4 and IPv6 in turn), sent in bursts, each
//! burst's replies collected before the next. Owns nothing beyond the
//! sockets of one call.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use crate::TestNet;

/// The payload after the 4-byte sequence number.
pub const PAYLOAD: &[u8] = b" steer echo test payload";

/// Sends `per_flow` numbered datagrams on each of `flows` flows to `port`
/// in bursts of `burst` and collects the replies (500 ms at most each);
/// returns the sequence numbers each flow got back, in order.
pub fn drive_flows(
    net: &TestNet,
    port: u16,
    flows: usize,
    per_flow: u32,
    burst: u32,
) -> Vec<Vec<u32>> {
    net.in_ns(|| {
        let sockets: Vec<(UdpSocket, SocketAddr)> = (0..flows)
            .map(|i| {
                let (local, remote): (IpAddr, IpAddr) = if i % 2 == 0 {
                    (net.peer_v4.into(), net.host_v4.into())
                } else {
                    (net.peer_v6.into(), net.host_v6.into())
                };
                let s = UdpSocket::bind(SocketAddr::new(local, 0)).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                (s, SocketAddr::new(remote, port))
            })
            .collect();
        let mut got = vec![Vec::new(); flows];
        let mut seq = 0;
        while seq < per_flow {
            let n = burst.max(1).min(per_flow - seq);
            for (s, to) in &sockets {
                for k in seq..seq + n {
                    let mut msg = k.to_be_bytes().to_vec();
                    msg.extend_from_slice(PAYLOAD);
                    s.send_to(&msg, to).unwrap();
                }
            }
            for (i, (s, _)) in sockets.iter().enumerate() {
                let mut buf = [0u8; 256];
                for _ in 0..n {
                    match s.recv_from(&mut buf) {
                        Ok((len, _)) if len >= 4 => {
                            got[i].push(u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]))
                        }
                        _ => break,
                    }
                }
            }
            seq += n;
        }
        got
    })
}

/// A datagram of `len` bytes whose content says which flow and which
/// message it is, so a reply of another datagram, or a torn one, shows.
pub fn patterned(flow: usize, seq: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32 ^ seq.wrapping_mul(31) ^ (flow as u32 * 7)) as u8)
        .collect()
}

/// `rounds` rounds of one [`patterned`] datagram of `sizes[i]` bytes on
/// each flow `i` (IPv4 for even `i`, IPv6 for odd) to `port` of the host
/// end; every reply must be its datagram, whole, within 3 s. Returns the
/// replies each flow got.
pub fn drive_sized(net: &TestNet, port: u16, sizes: &[usize], rounds: u32) -> Vec<u32> {
    net.in_ns(|| {
        let flows: Vec<(UdpSocket, SocketAddr, usize)> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let (local, remote): (IpAddr, IpAddr) = if i % 2 == 0 {
                    (net.peer_v4.into(), net.host_v4.into())
                } else {
                    (net.peer_v6.into(), net.host_v6.into())
                };
                let s = UdpSocket::bind(SocketAddr::new(local, 0)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                (s, SocketAddr::new(remote, port), len)
            })
            .collect();
        let mut got = vec![0; flows.len()];
        let mut buf = vec![0u8; 65536];
        for seq in 0..rounds {
            for (i, (s, to, len)) in flows.iter().enumerate() {
                s.send_to(&patterned(i, seq, *len), to).unwrap();
            }
            for (i, (s, _, len)) in flows.iter().enumerate() {
                let n = s
                    .recv(&mut buf)
                    .unwrap_or_else(|e| panic!("flow {i} ({len} bytes) round {seq}: {e}"));
                assert_eq!(n, *len, "flow {i} round {seq}: reply length");
                assert!(
                    buf[..n] == patterned(i, seq, *len)[..],
                    "flow {i} round {seq}: reply differs from the datagram"
                );
                got[i] += 1;
            }
        }
        got
    })
}
