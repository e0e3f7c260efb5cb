//! A connected socket's flow as the XDP program sees its frames: the
//! protocol, the local address and the peer's ([`SocketTuple`]), read with
//! getsockname/getpeername from anything with a file descriptor (std, tokio
//! and mio streams and sockets, raw fds).
//!
//! Invariants: both addresses are of one family; an IPv4-mapped IPv6
//! address (a dual-stack socket talking IPv4) is turned into its IPv4 form,
//! since its frames carry IPv4 headers. The flow's direction is the
//! receiving one: source = peer, destination = local.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;

use socket2::{Protocol, SockRef};
use steer_core::flow::{FlowAddrs, FlowKey, Ports};
use steer_core::packet::ip_proto;
use steer_xdp::{FlowMapKey, Proto};

use crate::KernelError;

/// The 4-tuple and protocol of a connected TCP or UDP socket.
///
/// ```
/// use std::net::{TcpListener, TcpStream};
/// use steer_kernel::{Proto, SocketTuple};
/// let listener = TcpListener::bind("127.0.0.1:0").unwrap();
/// let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
/// let (server, _) = listener.accept().unwrap();
/// let t = SocketTuple::of(&server).unwrap();
/// assert_eq!((t.proto, t.local, t.peer), (Proto::Tcp, server.local_addr().unwrap(), client.local_addr().unwrap()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SocketTuple {
    /// TCP or UDP.
    pub proto: Proto,
    /// The socket's own address (its frames' destination).
    pub local: SocketAddr,
    /// The peer's address (its frames' source).
    pub peer: SocketAddr,
}

/// `addr` with an IPv4-mapped IPv6 address turned into IPv4.
fn unmapped(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

impl SocketTuple {
    /// The tuple of the connected socket `socket` (two or three system
    /// calls: keep the result, e.g. in a [`crate::SteeredFlow`], rather than
    /// asking per read).
    pub fn of(socket: &impl AsFd) -> Result<Self, KernelError> {
        let s = SockRef::from(socket);
        let proto = match s.protocol().map_err(KernelError::Socket)? {
            Some(p) if p == Protocol::TCP => Proto::Tcp,
            Some(p) if p == Protocol::UDP => Proto::Udp,
            _ => return Err(KernelError::Unsupported),
        };
        let local = s
            .local_addr()
            .map_err(KernelError::Socket)?
            .as_socket()
            .ok_or(KernelError::Unsupported)?;
        let peer = s
            .peer_addr()
            .map_err(KernelError::NotConnected)?
            .as_socket()
            .ok_or(KernelError::Unsupported)?;
        Ok(Self::new(proto, local, peer))
    }

    /// The tuple of a socket of `proto` at `local` talking to `peer`.
    pub fn new(proto: Proto, local: SocketAddr, peer: SocketAddr) -> Self {
        Self {
            proto,
            local: unmapped(local),
            peer: unmapped(peer),
        }
    }

    /// The key of the RFS program's maps for the frames the socket receives.
    pub fn map_key(&self) -> FlowMapKey {
        FlowMapKey::new(self.proto, self.peer, self.local)
    }

    /// steer-core's key of the frames the socket receives (what the
    /// desired table's hash and the hook see).
    pub fn flow_key(&self) -> FlowKey {
        let addrs = match (self.peer.ip(), self.local.ip()) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => FlowAddrs::V4 { src, dst },
            (src, dst) => FlowAddrs::V6 {
                src: to_v6(src),
                dst: to_v6(dst),
            },
        };
        FlowKey {
            addrs,
            protocol: match self.proto {
                Proto::Tcp => ip_proto::TCP,
                Proto::Udp => ip_proto::UDP,
            },
            ports: Some(Ports {
                src: self.peer.port(),
                dst: self.local.port(),
            }),
        }
    }
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn connected_udp_and_mapped_addresses() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        let t = SocketTuple::of(&a).unwrap();
        assert_eq!(t.proto, Proto::Udp);
        assert_eq!(t.peer, b.local_addr().unwrap());
        // The key is the receiving direction: source = peer.
        assert_eq!(
            FlowMapKey::from_flow(&t.flow_key()),
            Some(t.map_key()),
            "both keys name the same frames"
        );
        assert_eq!(t.flow_key().src_port(), b.local_addr().unwrap().port());
        let mapped = SocketTuple::new(
            Proto::Tcp,
            "[::ffff:10.0.0.1]:80".parse().unwrap(),
            "[::ffff:10.0.0.2]:4000".parse().unwrap(),
        );
        assert_eq!(mapped.local, "10.0.0.1:80".parse().unwrap());
        assert!(matches!(mapped.flow_key().addrs, FlowAddrs::V4 { .. }));
    }

    #[test]
    fn tokio_mio_and_raw_fds_are_sockets_too() {
        use std::os::fd::AsFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        let want = SocketTuple::of(&server).unwrap();
        // A raw descriptor, borrowed.
        assert_eq!(SocketTuple::of(&server.as_fd()).unwrap(), want);
        // mio and tokio wrap the same socket.
        let server = mio::net::TcpStream::from_std(server);
        assert_eq!(SocketTuple::of(&server).unwrap(), want);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(async {
            client.set_nonblocking(true).unwrap();
            let client = tokio::net::TcpStream::from_std(client).unwrap();
            let t = SocketTuple::of(&client).unwrap();
            assert_eq!((t.local, t.peer), (want.peer, want.local));
        });
    }

    #[test]
    fn unconnected_and_non_ip_sockets_are_refused() {
        let lone = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(matches!(
            SocketTuple::of(&lone),
            Err(KernelError::NotConnected(_))
        ));
        let (x, _y) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(matches!(SocketTuple::of(&x), Err(KernelError::Unsupported)));
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(SocketTuple::of(&file).is_err());
    }
}
