//! Fuzzes the frame parser and the flow key: no input may panic, and what
//! they return must respect the documented invariants.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use steer_core::flow::{
    flow_key, flow_key_general, Classifier, FlowClassifier, FlowHasher, FlowInfo, KeyedHasher,
    Malformed, ToeplitzHasher, SYMMETRIC_RSS_KEY,
};
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
        // The symmetric Toeplitz key hashes both directions alike by
        // itself (its 16-bit period), with no canonical ordering.
        let toeplitz = TOEPLITZ.get_or_init(|| {
            ToeplitzHasher::new(&SYMMETRIC_RSS_KEY).expect("the symmetric key is valid")
        });
        assert_eq!(toeplitz.hash(&k), toeplitz.hash(&k.reversed()));
    }
    fast_paths_agree(data);
});

/// The fast paths (`flow_key`'s and the classifier's) give what the full
/// parser and the hasher give, errors included.
fn fast_paths_agree(data: &[u8]) {
    let general = flow_key_general(data);
    assert_eq!(flow_key(data), general);
    for h in [
        KeyedHasher::with_seed(1),
        KeyedHasher::with_seed(1).symmetric(true),
    ] {
        let want = match general {
            Ok(Some(k)) => Ok(Some(FlowInfo {
                hash: h.hash(&k),
                dst_port: k.dst_port(),
            })),
            Ok(None) => Ok(None),
            Err(_) => Err(Malformed),
        };
        assert_eq!(FlowClassifier::new(h).classify(data, None), want);
    }
}
