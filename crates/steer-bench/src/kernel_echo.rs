//! The kernel's strongest plain-socket UDP echo we know how to write: one
//! thread per server CPU, each pinned, each with its own SO_REUSEPORT socket
//! on the server address, receiving with `recvmmsg` and answering the whole
//! batch with one `sendmmsg`. With RPS/RFS steering the veth's packets to
//! the same CPUs, a datagram is received, processed and answered on one CPU.
//!
//! Invariants: every datagram received is sent back unchanged to its source,
//! in arrival order per socket; the threads stop within the receive timeout
//! (100 ms) of SIGINT/SIGTERM.
//!
//! `unsafe` is allowed here (and in `sys`): the socket loop is raw
//! `recvmmsg`/`sendmmsg` on `mmsghdr` arrays, the point of this server.

#![allow(unsafe_code)]

use std::{
    io,
    mem::{size_of, zeroed},
    net::SocketAddrV4,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
};

use anyhow::{Context, Result};

use crate::sys::pin;

/// Datagrams per recvmmsg/sendmmsg.
pub const BATCH: usize = 64;
const BUF: usize = 2048;

fn check(rc: libc::c_int, what: &str) -> Result<libc::c_int> {
    if rc < 0 {
        return Err(io::Error::last_os_error()).context(what.to_owned());
    }
    Ok(rc)
}

fn setopt(fd: &OwnedFd, level: i32, name: i32, value: &[u8], what: &str) -> Result<()> {
    // SAFETY: `value` is a live buffer of the given length for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    check(rc, what).map(|_| ())
}

/// A UDP socket bound to `addr` with SO_REUSEPORT, a 4 MiB receive buffer,
/// a 100 ms receive timeout and, when `busy_poll_us` > 0, SO_BUSY_POLL (a
/// receive with nothing queued polls the device's NAPI that long first).
fn socket(addr: SocketAddrV4, busy_poll_us: u32) -> Result<OwnedFd> {
    // SAFETY: plain socket(2) call.
    let fd = check(
        unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) },
        "socket",
    )?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    setopt(
        &fd,
        libc::SOL_SOCKET,
        libc::SO_REUSEPORT,
        &1i32.to_ne_bytes(),
        "SO_REUSEPORT",
    )?;
    let rcvbuf = (4i32 << 20).to_ne_bytes();
    if setopt(
        &fd,
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        &rcvbuf,
        "SO_RCVBUFFORCE",
    )
    .is_err()
    {
        setopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &rcvbuf, "SO_RCVBUF")?;
    }
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    // SAFETY: timeval is plain data; viewing it as bytes for setsockopt.
    let tv_bytes = unsafe {
        std::slice::from_raw_parts(
            (&tv as *const libc::timeval).cast::<u8>(),
            size_of::<libc::timeval>(),
        )
    };
    setopt(
        &fd,
        libc::SOL_SOCKET,
        libc::SO_RCVTIMEO,
        tv_bytes,
        "SO_RCVTIMEO",
    )?;
    if busy_poll_us > 0 {
        let us = i32::try_from(busy_poll_us).unwrap_or(i32::MAX);
        setopt(
            &fd,
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL,
            &us.to_ne_bytes(),
            "SO_BUSY_POLL",
        )?;
    }
    // SAFETY: sockaddr_in is plain data; all-zero is valid.
    let mut sa: libc::sockaddr_in = unsafe { zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = addr.port().to_be();
    sa.sin_addr.s_addr = u32::from_ne_bytes(addr.ip().octets());
    // SAFETY: `sa` is a valid sockaddr_in of the length passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    check(rc, "bind")
        .with_context(|| format!("binding {addr} (is the address on an interface here?)"))?;
    Ok(fd)
}

/// Serves on `fd` until `stop`: recvmmsg a batch, sendmmsg it back.
fn serve(fd: &OwnedFd, stop: &AtomicBool, echoed: &AtomicU64) -> Result<()> {
    let mut bufs = vec![[0u8; BUF]; BATCH];
    // SAFETY: plain data arrays; all-zero is valid for each.
    let mut addrs: Vec<libc::sockaddr_in> = vec![unsafe { zeroed() }; BATCH];
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: BUF,
        })
        .collect();
    // SAFETY: mmsghdr is plain data; all-zero is valid.
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { zeroed() }; BATCH];
    while !stop.load(Ordering::Relaxed) {
        for i in 0..BATCH {
            iov[i].iov_len = BUF;
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = (&mut addrs[i] as *mut libc::sockaddr_in).cast();
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
        }
        // SAFETY: every header points at a live buffer, iovec and address of
        // this function; BATCH headers are passed.
        let n = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => continue,
                _ => return Err(e).context("recvmmsg"),
            }
        }
        let n = n as usize;
        for m in msgs.iter_mut().take(n) {
            // Answer with exactly what came in, to where it came from.
            // SAFETY: msg_iov points at this message's iovec (set above).
            unsafe { (*m.msg_hdr.msg_iov).iov_len = m.msg_len as usize };
        }
        let mut done = 0;
        while done < n {
            // SAFETY: the first `n` headers describe received datagrams and
            // their source addresses, all alive.
            let rc = unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    msgs.as_mut_ptr().add(done),
                    (n - done) as libc::c_uint,
                    0,
                )
            };
            if rc <= 0 {
                // A full socket buffer: the rest of the batch is dropped, as
                // a kernel server would.
                break;
            }
            done += rc as usize;
        }
        echoed.fetch_add(done as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// Runs the echo on `addr` with one pinned thread per CPU in `cpus` until
/// SIGINT/SIGTERM, each socket busy-polling `busy_poll_us` (0: not). Prints
/// `ready` once every socket is bound.
pub fn run(addr: SocketAddrV4, cpus: &[usize], busy_poll_us: u32) -> Result<()> {
    let stop = steer_xdp::shutdown::install().context("installing signal handlers")?;
    let sockets: Vec<OwnedFd> = cpus
        .iter()
        .map(|_| socket(addr, busy_poll_us))
        .collect::<Result<_>>()?;
    let echoed = AtomicU64::new(0);
    std::thread::scope(|s| -> Result<()> {
        let mut handles = Vec::new();
        for (fd, &cpu) in sockets.iter().zip(cpus) {
            let echoed = &echoed;
            handles.push(
                std::thread::Builder::new()
                    .name(format!("kecho-{cpu}"))
                    .spawn_scoped(s, move || -> Result<()> {
                        pin(cpu).with_context(|| format!("pinning to CPU {cpu}"))?;
                        serve(fd, stop, echoed)
                    })
                    .context("spawning a thread")?,
            );
        }
        println!("kernel echo: ready on udp {addr}, threads on CPUs {cpus:?}, recvmmsg/sendmmsg batches of {BATCH}, SO_BUSY_POLL {busy_poll_us} us");
        let mut result = Ok(());
        for h in handles {
            match h.join() {
                Ok(r) => result = result.and(r),
                Err(_) => result = Err(anyhow::anyhow!("an echo thread panicked")),
            }
        }
        result
    })?;
    println!(
        "kernel echo: stopped, {} datagrams echoed",
        echoed.load(Ordering::Relaxed)
    );
    Ok(())
}
