//! The slow path's kernel UDP sockets: one socket per owned UDP port and
//! per address of the engine's interface (IPv4 and IPv6, link-local too),
//! bound to that address and to the interface (SO_BINDTODEVICE). So the
//! engine holds the port where its XDP program owns it and nowhere else:
//! the same port stays free on loopback and the other interfaces' addresses,
//! and engines on two interfaces can own the same port. Each receives with
//! IP_PKTINFO / IPV6_RECVPKTINFO (the address a datagram was sent to) and
//! replies from that address (the same control message on `sendmsg`).
//! An address added to the interface after start has no socket.
//!
//! Invariants: every socket is non-blocking (neither the reader nor a
//! worker ever waits on one; its lock is held for one call); a port
//! another process holds is skipped with a warning, not an error (the XDP
//! path still serves its whole datagrams); a closed socket
//! ([`SlowSocket::close`]) frees its port at once and reads and sends
//! nothing more.

use std::io::{IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError};

use nix::sys::socket::{
    bind, recvmsg, sendmsg, setsockopt, socket, sockopt, AddressFamily, ControlMessage,
    ControlMessageOwned, MsgFlags, SockFlag, SockType, SockaddrIn, SockaddrIn6, SockaddrStorage,
};
use tracing::warn;

/// One bound slow-path socket.
#[derive(Debug)]
pub(crate) struct SlowSocket {
    /// The owned port it is bound on.
    pub(crate) port: u16,
    /// The address it is bound on.
    pub(crate) addr: IpAddr,
    /// `None` once closed.
    socket: Mutex<Option<UdpSocket>>,
}

/// A datagram read from a slow-path socket.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Received {
    /// Its payload length (the bytes are in the caller's buffer).
    pub(crate) len: usize,
    /// The sender.
    pub(crate) from: SocketAddr,
    /// The address and port it was sent to.
    pub(crate) to: SocketAddr,
    /// The interface it came in on.
    pub(crate) ifindex: u32,
    /// Whether it was longer than the buffer (cut: not handled).
    pub(crate) truncated: bool,
}

/// What opening the sockets of the owned ports gave.
#[derive(Debug, Default)]
pub(crate) struct Opened {
    pub(crate) sockets: Vec<SlowSocket>,
    /// Sockets that could not be bound (the port is someone else's on that
    /// address, or the address is gone).
    pub(crate) failed: u64,
}

/// The IP addresses of `interface` with their scope (the interface's
/// index for an IPv6 link-local address, else 0), as the kernel lists
/// them now.
pub(crate) fn interface_addrs(interface: &str) -> Vec<(IpAddr, u32)> {
    let Ok(all) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut addrs: Vec<(IpAddr, u32)> = all
        .filter(|a| a.interface_name == interface)
        .filter_map(|a| {
            let addr = a.address?;
            if let Some(v4) = addr.as_sockaddr_in() {
                return Some((IpAddr::V4(v4.ip()), 0));
            }
            let v6 = addr.as_sockaddr_in6()?;
            Some((IpAddr::V6(v6.ip()), v6.scope_id()))
        })
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    addrs
}

/// Opens a socket on each of `ports` for each of `addrs` (address and
/// scope), bound to `interface` (`None`: any interface); a failure is
/// logged and counted, not returned.
pub(crate) fn open(ports: &[u16], addrs: &[(IpAddr, u32)], interface: Option<&str>) -> Opened {
    let mut opened = Opened::default();
    for &port in ports {
        for &(addr, scope) in addrs {
            match open_one(port, addr, scope, interface) {
                Ok(socket) => opened.sockets.push(SlowSocket {
                    port,
                    addr,
                    socket: Mutex::new(Some(socket)),
                }),
                Err(e) => {
                    opened.failed += 1;
                    warn!(
                        port,
                        %addr,
                        error = %e,
                        "cannot bind the slow-path socket of an owned UDP port: fragmented \
                         datagrams to it are not answered (is another process on that port?)"
                    );
                }
            }
        }
    }
    opened
}

fn open_one(
    port: u16,
    addr: IpAddr,
    scope: u32,
    interface: Option<&str>,
) -> nix::Result<UdpSocket> {
    let family = if addr.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let fd: OwnedFd = socket(
        family,
        SockType::Datagram,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    if let Some(name) = interface {
        setsockopt(&fd, sockopt::BindToDevice, &std::ffi::OsString::from(name))?;
    }
    // An IPv6 address still in duplicate address detection (tentative)
    // cannot be bound otherwise; it is the interface's all the same.
    setsockopt(&fd, sockopt::IpFreebind, &true)?;
    match addr {
        IpAddr::V6(ip) => {
            setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
            setsockopt(&fd, sockopt::Ipv6RecvPacketInfo, &true)?;
            bind(
                fd.as_raw_fd(),
                &SockaddrIn6::from(SocketAddrV6::new(ip, port, 0, scope)),
            )?;
        }
        IpAddr::V4(ip) => {
            setsockopt(&fd, sockopt::Ipv4PacketInfo, &true)?;
            bind(
                fd.as_raw_fd(),
                &SockaddrIn::from(SocketAddrV4::new(ip, port)),
            )?;
        }
    }
    Ok(UdpSocket::from(fd))
}

impl SlowSocket {
    /// Its descriptor, `None` once closed (for registering with a poll).
    pub(crate) fn raw_fd(&self) -> Option<RawFd> {
        self.lock().as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Closes it: the port is free for another socket from here on.
    pub(crate) fn close(&self) {
        drop(self.lock().take());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<UdpSocket>> {
        self.socket.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads one datagram into `buf` without waiting: `Ok(None)` when
    /// there is none (or the socket is closed).
    pub(crate) fn recv(&self, buf: &mut [u8]) -> std::io::Result<Option<Received>> {
        let guard = self.lock();
        let Some(socket) = guard.as_ref() else {
            return Ok(None);
        };
        let mut cmsg = nix::cmsg_space!(libc::in6_pktinfo);
        let mut iov = [IoSliceMut::new(buf)];
        let msg = match recvmsg::<SockaddrStorage>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(m) => m,
            Err(nix::errno::Errno::EAGAIN) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let from = msg.address.as_ref().and_then(to_std);
        let mut to = None;
        let mut ifindex = 0;
        for c in msg.cmsgs().into_iter().flatten() {
            match c {
                ControlMessageOwned::Ipv4PacketInfo(info) => {
                    let ip = Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr));
                    to = Some(SocketAddr::new(IpAddr::V4(ip), self.port));
                    ifindex = u32::try_from(info.ipi_ifindex).unwrap_or(0);
                }
                ControlMessageOwned::Ipv6PacketInfo(info) => {
                    let ip = Ipv6Addr::from(info.ipi6_addr.s6_addr);
                    to = Some(SocketAddr::new(IpAddr::V6(ip), self.port));
                    ifindex = info.ipi6_ifindex;
                }
                _ => {}
            }
        }
        let truncated = msg.flags.contains(MsgFlags::MSG_TRUNC);
        let len = msg.bytes;
        match (from, to) {
            (Some(from), Some(to)) => Ok(Some(Received {
                len,
                from,
                to,
                ifindex,
                truncated,
            })),
            // No sender or no destination: nothing to answer to.
            _ => Err(std::io::Error::other(
                "a datagram without its addresses (no IP_PKTINFO)",
            )),
        }
    }

    /// Sends `payload` to `to` from address `from` (this socket's port)
    /// without waiting; `ifindex` is the interface the request came in on
    /// (needed for link-local IPv6 sources, 0: any). The kernel fragments
    /// what does not fit the path's MTU.
    pub(crate) fn send(
        &self,
        payload: &[u8],
        from: IpAddr,
        to: SocketAddr,
        ifindex: u32,
    ) -> std::io::Result<usize> {
        let iov = [IoSlice::new(payload)];
        let guard = self.lock();
        let Some(socket) = guard.as_ref() else {
            return Err(std::io::Error::other("the slow-path socket is closed"));
        };
        let fd = socket.as_raw_fd();
        let sent = match (from, to) {
            (IpAddr::V4(src), SocketAddr::V4(dst)) => {
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(src).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                let cmsg = [ControlMessage::Ipv4PacketInfo(&info)];
                sendmsg(
                    fd,
                    &iov,
                    &cmsg,
                    MsgFlags::MSG_DONTWAIT,
                    Some(&SockaddrIn::from(dst)),
                )
            }
            (IpAddr::V6(src), SocketAddr::V6(dst)) => {
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: src.octets(),
                    },
                    ipi6_ifindex: ifindex,
                };
                let cmsg = [ControlMessage::Ipv6PacketInfo(&info)];
                sendmsg(
                    fd,
                    &iov,
                    &cmsg,
                    MsgFlags::MSG_DONTWAIT,
                    Some(&SockaddrIn6::from(dst)),
                )
            }
            _ => return Err(std::io::Error::other("reply addresses of two IP versions")),
        };
        sent.map_err(Into::into)
    }
}

fn to_std(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    a.as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        // A port nobody holds on either family right now.
        loop {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = s.local_addr().unwrap().port();
            drop(s);
            if UdpSocket::bind(("::1", port)).is_ok() {
                return port;
            }
        }
    }

    fn loopback() -> Vec<(IpAddr, u32)> {
        vec![
            (Ipv4Addr::LOCALHOST.into(), 0),
            (Ipv6Addr::LOCALHOST.into(), 0),
        ]
    }

    fn recv_one(s: &SlowSocket, buf: &mut [u8]) -> Received {
        for _ in 0..1000 {
            if let Some(r) = s.recv(buf).unwrap() {
                return r;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("nothing received");
    }

    #[test]
    fn a_datagram_comes_with_its_destination_and_the_reply_leaves_from_it() {
        let port = free_port();
        let opened = open(&[port], &loopback(), None);
        assert_eq!(opened.failed, 0);
        assert_eq!(opened.sockets.len(), 2);
        for (s, local) in opened.sockets.iter().zip(["127.0.0.1", "::1"]) {
            let peer = UdpSocket::bind((local, 0)).unwrap();
            peer.send_to(b"ping", (local, port)).unwrap();
            let mut buf = [0u8; 64];
            let r = recv_one(s, &mut buf);
            assert_eq!(&buf[..r.len], b"ping");
            assert_eq!(r.from, peer.local_addr().unwrap());
            assert_eq!(r.to, SocketAddr::new(local.parse().unwrap(), port));
            assert!(!r.truncated);
            assert_eq!(s.send(b"pong", r.to.ip(), r.from, r.ifindex).unwrap(), 4);
            peer.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let (n, from) = peer.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"pong");
            assert_eq!(from, r.to, "the reply leaves from the address asked");
        }
    }

    #[test]
    fn sockets_are_bound_to_the_interface_and_its_addresses() {
        let port = free_port();
        // Loopback's addresses, and a missing device (counted, not fatal).
        let lo = interface_addrs("lo");
        assert!(lo.contains(&(Ipv4Addr::LOCALHOST.into(), 0)), "{lo:?}");
        let on_lo = open(&[port], &lo[..1], Some("lo"));
        assert_eq!(on_lo.failed, 0);
        assert_eq!(on_lo.sockets[0].addr, IpAddr::from(Ipv4Addr::LOCALHOST));
        let missing = open(&[port], &loopback(), Some("nonexistent0"));
        assert_eq!(missing.failed, 2, "no such device");
        assert!(interface_addrs("nonexistent0").is_empty());
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.send_to(b"on lo", ("127.0.0.1", port)).unwrap();
        let mut buf = [0u8; 16];
        let r = recv_one(&on_lo.sockets[0], &mut buf);
        assert_eq!(&buf[..r.len], b"on lo");
        assert_eq!(r.ifindex, 1, "loopback's index");
    }

    #[test]
    fn a_closed_socket_frees_its_port_and_reads_nothing() {
        let port = free_port();
        let opened = open(&[port], &loopback(), None);
        assert!(UdpSocket::bind(("127.0.0.1", port)).is_err(), "held");
        for s in &opened.sockets {
            s.close();
            assert_eq!(s.raw_fd(), None);
            assert!(s.recv(&mut [0u8; 8]).unwrap().is_none());
            assert!(s
                .send(b"x", "::1".parse().unwrap(), "[::1]:9".parse().unwrap(), 0)
                .is_err());
        }
        assert!(UdpSocket::bind(("127.0.0.1", port)).is_ok(), "free again");
    }

    #[test]
    fn a_datagram_longer_than_the_buffer_is_marked_cut() {
        let port = free_port();
        let opened = open(&[port], &loopback(), None);
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.send_to(&[7u8; 100], ("127.0.0.1", port)).unwrap();
        let mut buf = [0u8; 10];
        let r = recv_one(&opened.sockets[0], &mut buf);
        assert!(r.truncated);
    }

    #[test]
    fn a_port_someone_else_holds_is_counted_not_fatal() {
        let held = UdpSocket::bind("0.0.0.0:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let opened = open(&[port], &loopback(), None);
        assert_eq!(opened.failed, 1, "the IPv4 one");
        assert!(opened.sockets.iter().all(|s| s.addr.is_ipv6()));
        assert!(
            opened
                .sockets
                .iter()
                .all(|s| s.recv(&mut [0u8; 8]).unwrap().is_none()),
            "non-blocking: nothing to read is no wait"
        );
    }

    #[test]
    fn the_port_stays_free_on_other_addresses() {
        let port = free_port();
        let _opened = open(&[port], &[(Ipv4Addr::LOCALHOST.into(), 0)], Some("lo"));
        assert!(UdpSocket::bind(("127.0.0.2", port)).is_ok());
    }
}
