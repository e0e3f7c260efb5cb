//! A UDP move the socket rule holds, then gives up (the flow is wanted back
//! on the CPU serving it), leaves nothing behind: the next move waits its
//! own hold (the maximum wait, for a flow that keeps sending) and is not
//! forced at once as if the flow had been quiet since the first. The flow
//! here never reaches a counted socket (no filter, no recorder), so every
//! move away from its CPU is held until forced. Needs root and two CPUs.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use steer_core::cpu::CpuSet;
use steer_kernel::{KernelSteering, Proto};
use steer_xdp::FlowMapKey;
use support::Pair;

const PORT: u16 = 7130;

#[test]
fn a_move_given_up_does_not_force_the_next_one() {
    let pair = Pair::new();
    let dev = pair.srv_dev.clone();
    let steering = Pair::in_ns(&pair.srv_ns, move || {
        KernelSteering::builder(&dev)
            .own(Proto::Udp, PORT)
            .cpus(CpuSet::first(2))
            .start()
            .unwrap()
    });
    let program = steering.program().unwrap();
    // A datagram a millisecond: never quiet for the 100 ms that force a
    // held move, so only the 1 s maximum wait does.
    let local: SocketAddr = (pair.cli_v4, 0).into();
    let server: SocketAddr = (pair.srv_v4, PORT).into();
    let socket = Pair::in_ns(&pair.cli_ns, move || UdpSocket::bind(local).unwrap());
    let from = socket.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = socket.send_to(b"x", server);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let flow = FlowMapKey::new(Proto::Udp, from, server);
    let forced = || program.stats().unwrap().forced;
    let wait_forced = |n: u64, within: Duration| {
        let start = Instant::now();
        while forced() < n {
            if start.elapsed() > within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Some(start.elapsed())
    };

    // Placed on CPU 1: at once when no frame came between tracking and
    // steering, else held (nothing is ever delivered) and forced at 1 s.
    program.track(&flow).unwrap();
    program.steer(&flow, 1).unwrap();
    let placed = Instant::now();
    while program.flow(&flow).unwrap().unwrap().cpu != Some(1) {
        assert!(
            placed.elapsed() < Duration::from_secs(3),
            "never placed: {:?}",
            program.stats()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = forced();

    // A move to CPU 0, held for 300 ms, then given up.
    program.steer(&flow, 0).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(program.flow(&flow).unwrap().unwrap().held);
    program.steer(&flow, 1).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!program.flow(&flow).unwrap().unwrap().held);
    assert_eq!(forced(), before);

    // The next move waits its own hold: forced after about a second, not
    // at its first frame as if the flow had been quiet since the first.
    program.steer(&flow, 0).unwrap();
    let after = wait_forced(before + 1, Duration::from_secs(3)).expect("the move is forced");
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    eprintln!(
        "the next move was forced after {after:?}: {:?}",
        program.stats().unwrap()
    );
    assert!(
        after >= Duration::from_millis(700),
        "forced after {after:?}"
    );
    assert_eq!(program.flow(&flow).unwrap().unwrap().cpu, Some(0));
}
