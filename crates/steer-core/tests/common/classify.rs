//! The reference a classifier is checked against: `FlowClassifier::classify`
//! of a frame under every mode (plain or symmetric keyed hash, NIC hash
//! used or not, given or not) next to what the full parser and the hasher
//! say it must give. Shared by the property tests and the fuzz-seed replay.

use steer_core::flow::{flow_key_general, FlowClassifier, FlowHasher, KeyedHasher};
use steer_core::flow::{Classifier, FlowInfo, Malformed};

pub type Classified = Result<Option<FlowInfo>, Malformed>;

/// `FlowClassifier::classify` of `f`, symmetric or not, ignoring or using
/// a NIC hash `nic` (0: none).
pub fn classify_both(f: &[u8], nic: u32) -> Vec<Classified> {
    let mut out = Vec::new();
    for symmetric in [false, true] {
        for use_rx in [false, true] {
            let h = KeyedHasher::with_seed(11).symmetric(symmetric);
            let mut c = FlowClassifier::new(h).use_rx_hash(use_rx);
            out.push(c.classify(f, Some(nic)));
            out.push(c.classify(f, None));
        }
    }
    out
}

/// What `classify_both` must give: `flow_key` through the full parser,
/// then the NIC hash when used and non-zero, else the hasher.
pub fn classify_naive(f: &[u8], nic: u32) -> Vec<Classified> {
    let mut out = Vec::new();
    for symmetric in [false, true] {
        for use_rx in [false, true] {
            let h = KeyedHasher::with_seed(11).symmetric(symmetric);
            for rx in [Some(nic), None] {
                out.push(match flow_key_general(f) {
                    Err(_) => Err(Malformed),
                    Ok(None) => Ok(None),
                    Ok(Some(k)) => Ok(Some(FlowInfo {
                        hash: match rx {
                            Some(n) if use_rx && n != 0 => n,
                            _ => h.hash(&k),
                        },
                        dst_port: k.dst_port(),
                    })),
                });
            }
        }
    }
    out
}
