//! Fuzzes the in-place UDP echo: no frame may panic it; a reply stays
//! inside the frame, parses, and goes back the way the request came (ports
//! swapped); a refused frame is left as it was.
#![no_main]

use libfuzzer_sys::fuzz_target;
use steer_core::packet::echo::{echo_in_place, EchoMode};
use steer_core::packet::parse;

fuzz_target!(|data: &[u8]| {
    for mode in [EchoMode::Plain, EchoMode::Sockperf] {
        let mut frame = data.to_vec();
        let ports = parse(data)
            .ok()
            .flatten()
            .and_then(|l| l.ports(data).ok().flatten());
        match echo_in_place(&mut frame, mode) {
            Ok(len) => {
                assert!(len <= frame.len());
                let reply = parse(&frame[..len])
                    .expect("a reply parses")
                    .expect("a reply is IP");
                let (src, dst) = ports.expect("an echoed frame had ports");
                assert_eq!(reply.ports(&frame[..len]).unwrap(), Some((dst, src)));
            }
            Err(_) => {
                // Refusals happen before any byte is rewritten.
                assert_eq!(frame, data);
            }
        }
    }
});
