//! Fuzzes the capture reader (pcap and pcapng, every block type, the
//! buffer growing) and the link layers behind it: no input may panic it,
//! and
//! - no frame is longer than the capture length its block states, and the
//!   frames with their record headers (16 bytes at least each) fit in the
//!   input: nothing is read past it or twice;
//! - every link layer it accepts becomes an Ethernet frame at most 14 bytes
//!   longer than the captured one;
//! - the packet arrivals (`read_packets`) count every frame once, in times
//!   that never go backwards, and agree with the frames read;
//! - every error is one line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use steer_replay::capture::{read_frames, read_frames_with, ReadError};
use steer_replay::link::{to_ethernet, ETHERNET_HEADER};
use steer_replay::packets::read_packets;

/// The smallest header a frame's record has (a classic pcap record, a
/// pcapng simple packet block).
const RECORD_HEADER: usize = 16;

fuzz_target!(|data: &[u8]| {
    let mut frames = 0u64;
    let mut bytes = 0usize;
    let mut eth = Vec::new();
    // A small first buffer: inputs larger than it grow it.
    let read = read_frames_with(data, 512, |f| {
        assert!(
            f.data.len() <= f.caplen as usize,
            "{} > {}",
            f.data.len(),
            f.caplen
        );
        frames += 1;
        bytes += f.data.len();
        assert!(
            bytes + RECORD_HEADER * frames as usize <= data.len(),
            "{frames} frames of {bytes} bytes in {} bytes of input",
            data.len()
        );
        if let Ok(true) = to_ethernet(f.link, f.data, &mut eth) {
            assert!(eth.len() <= f.data.len() + ETHERNET_HEADER);
        }
        Ok::<(), ()>(())
    });
    if let Ok(n) = read {
        assert_eq!(n, frames);
    }
    if let Err(ReadError::Capture(e)) = &read {
        assert!(!e.to_string().contains('\n'), "{e}");
    }
    // The default buffer reads the same frames (the small one refuses a
    // capture whose header it cannot hold).
    let mut again = 0u64;
    let read_default = read_frames(data, |_| {
        again += 1;
        Ok::<(), ()>(())
    });
    if read.is_ok() {
        assert!(read_default.is_ok(), "{read_default:?}");
        assert_eq!(again, frames);
    }

    let mut last = 0u64;
    let mut arrivals = 0u64;
    let stats = read_packets(data, &[], |t, _key| {
        assert!(t >= last, "time went back from {last} to {t}");
        last = t;
        arrivals += 1;
        Ok::<(), ()>(())
    });
    match stats {
        Ok(s) => {
            assert_eq!(s.packets, arrivals);
            assert_eq!(s.packets + s.not_ip + s.other_port + s.malformed, s.frames);
            assert_eq!(s.frames, again);
        }
        Err(ReadError::Capture(e)) => assert!(!e.to_string().contains('\n'), "{e}"),
        Err(ReadError::Stopped(())) => unreachable!("the callback never stops"),
    }
});
