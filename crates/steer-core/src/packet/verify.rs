//! Whole-frame checks: whether a received Ethernet/IP/UDP frame's
//! checksums hold, read through the parser ([`super::parse`]) and the
//! layer views, which compute the sums with [`super::checksum`].
//!
//! Invariant: reads only, through checked views; any input is an answer
//! (`false` for what does not parse), never a panic.

/// Whether the checksums of an Ethernet/IP/UDP frame hold: the IPv4 header
/// checksum, and the UDP checksum over the pseudo-header (0, "none", passes
/// over IPv4 only: IPv6 makes it mandatory). `false` for a frame that does
/// not parse, is not UDP, or is a fragment (whose UDP checksum covers the
/// whole datagram).
///
/// ```
/// use steer_core::packet::{build::FrameBuilder, verify_udp_frame};
/// let mut f = FrameBuilder::udp([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 5, 6)
///     .payload(b"hi")
///     .build();
/// assert!(verify_udp_frame(&f));
/// let last = f.len() - 1;
/// f[last] ^= 1;
/// assert!(!verify_udp_frame(&f));
/// ```
pub fn verify_udp_frame(frame: &[u8]) -> bool {
    let Ok(Some(l)) = super::parse(frame) else {
        return false;
    };
    if l.protocol != super::ip_proto::UDP || l.fragment.is_some() {
        return false;
    }
    // `parse` promises l3_offset <= l4_offset <= l3_end <= frame.len().
    let (Some(ip), Some(l4)) = (
        frame.get(l.l3_offset..l.l3_end),
        frame.get(l.l4_offset..l.l3_end),
    ) else {
        return false;
    };
    let Ok(udp) = super::UdpPacket::new_checked(l4) else {
        return false;
    };
    match l.ip {
        super::IpVersion::V4 => super::Ipv4Packet::new_checked(ip).is_ok_and(|ip| {
            ip.verify_checksum() && udp.verify_checksum_v4(ip.src_addr(), ip.dst_addr())
        }),
        super::IpVersion::V6 => super::Ipv6Packet::new_checked(ip)
            .is_ok_and(|ip| udp.verify_checksum_v6(ip.src_addr(), ip.dst_addr())),
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::*;
    use crate::packet::build::FrameBuilder;

    #[test]
    fn udp_frames_verify_and_corruption_is_caught() {
        let v4 = FrameBuilder::udp([192, 0, 2, 2].into(), [192, 0, 2, 1].into(), 40000, 9000)
            .payload(b"ping")
            .build();
        let a: Ipv6Addr = "2001:db8::2".parse().unwrap();
        let b: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let v6 = FrameBuilder::udp(a.into(), b.into(), 40000, 9000)
            .payload(b"ping")
            .build();
        // IPv6's traffic class, flow label and hop limit are under no checksum.
        for (f, uncovered) in [(&v4, &[][..]), (&v6, &[15, 16, 17, 21][..])] {
            assert!(verify_udp_frame(f));
            // Any other flipped bit of the IP header or the datagram is seen.
            for i in (14..f.len()).filter(|i| !uncovered.contains(i)) {
                let mut bad = f.clone();
                bad[i] ^= 0x10;
                assert!(!verify_udp_frame(&bad), "byte {i} of {f:?}");
            }
            // Truncations neither verify nor panic.
            for cut in 0..f.len() {
                assert!(!verify_udp_frame(&f[..cut]));
            }
        }
        // No checksum (0): allowed over IPv4, not over IPv6.
        let udp_csum = |f: &[u8]| 14 + if f == v4.as_slice() { 20 } else { 40 } + 6;
        let (mut v4_0, mut v6_0) = (v4.clone(), v6.clone());
        let (i4, i6) = (udp_csum(&v4), udp_csum(&v6));
        v4_0[i4..i4 + 2].fill(0);
        v6_0[i6..i6 + 2].fill(0);
        assert!(verify_udp_frame(&v4_0));
        assert!(!verify_udp_frame(&v6_0));
        // Not UDP.
        let tcp = FrameBuilder::tcp([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 1, 2).build();
        assert!(!verify_udp_frame(&tcp));
    }
}
