//! A UDP echo server on steer in a few lines: every datagram to the port is
//! turned around in place by the worker that handled it. The full server,
//! with every engine flag, live counters and a JSON report, is `steer echo`.
//!
//! ```text
//! cargo run --example echo_server -- eth1 7777     # as root; Ctrl-C stops it
//! ```

use steer::echo::{echo_in_place, EchoMode};
use steer::engine::{Engine, PacketContext, Verdict};
use steer::xdp::{shutdown, Proto};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let interface = args.next().ok_or("usage: echo_server INTERFACE PORT")?;
    let port: u16 = args
        .next()
        .ok_or("usage: echo_server INTERFACE PORT")?
        .parse()?;

    let stop = shutdown::install()?;
    let engine = Engine::builder(&interface)
        .own(Proto::Udp, port) // everything else goes to the kernel
        .handler(|_cpu| {
            Box::new(|frame: &mut [u8], _: &PacketContext| {
                match echo_in_place(frame, EchoMode::Plain) {
                    Ok(len) => Verdict::Transmit(len), // sent from this worker's socket
                    Err(_) => Verdict::Drop,           // counted
                }
            })
        })
        .start()?;
    println!("echoing udp port {port} on {interface}; Ctrl-C stops");
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let report = engine.stop()?;
    println!("{}", report.stats.table(None));
    Ok(())
}
