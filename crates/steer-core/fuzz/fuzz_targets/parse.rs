//! Fuzzes the frame parser and the flow key: no input may panic, and what
//! they return must respect the documented invariants.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use steer_core::flow::{flow_key, FlowHasher, KeyedHasher, ToeplitzHasher};
use steer_core::packet::parse;

static TOEPLITZ: OnceLock<ToeplitzHasher> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(l)) = parse(data) {
        assert!(l.l3_offset <= l.l4_offset && l.l4_offset <= l.l3_end && l.l3_end <= data.len());
        if let Ok(r) = l.payload_range(data) {
            assert!(r.start <= r.end && r.end <= data.len());
        }
        let _ = l.ports(data);
    }
    if let Ok(Some(k)) = flow_key(data) {
        let keyed = KeyedHasher::with_seed(1).symmetric(true);
        assert_eq!(keyed.hash(&k), keyed.hash(&k.reversed()));
        assert_ne!(TOEPLITZ.get_or_init(ToeplitzHasher::default).hash(&k), 0);
    }
});
