//! Fuzzes the frame parser and the flow key: no input may panic, and what
//! they return must respect the documented invariants.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use steer_core::flow::{
    flow_key, flow_key_general, promises, Classifier, FlowClassifier, FlowHasher, FlowInfo,
    KeyedHasher, Malformed, ToeplitzHasher, SYMMETRIC_RSS_KEY,
};

static TOEPLITZ: OnceLock<ToeplitzHasher> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    // The promises the stable seed test checks too (layer offsets, payload
    // range, ports, fast flow key, symmetric keyed hash).
    assert_eq!(promises::check(data), Ok(()));
    if let Ok(Some(k)) = flow_key(data) {
        // The symmetric Toeplitz key hashes both directions alike by
        // itself (its 16-bit period), with no canonical ordering.
        let toeplitz = TOEPLITZ.get_or_init(|| {
            ToeplitzHasher::new(&SYMMETRIC_RSS_KEY).expect("the symmetric key is valid")
        });
        assert_eq!(toeplitz.hash(&k), toeplitz.hash(&k.reversed()));
    }
    fast_paths_agree(data);
});

/// The classifier's fast path gives what the full parser and the hasher
/// give, errors included (`flow_key`'s is one of the promises).
fn fast_paths_agree(data: &[u8]) {
    let general = flow_key_general(data);
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
