//! Model ("oracle") test of the ring against `VecDeque`: random capacities
//! and random sequences of single and batched pushes and pops, checking
//! every returned item, every hand-back and every counter after each step.
#![cfg(not(loom))]

use std::collections::VecDeque;

use proptest::prelude::*;
use steer_core::ring::{channel, PushError};

#[derive(Debug, Clone)]
enum Op {
    Push,
    PushBatch(usize),
    Pop,
    PopBatch(usize),
    Consume(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Push),
        (0usize..80).prop_map(Op::PushBatch),
        Just(Op::Pop),
        (0usize..80).prop_map(Op::PopBatch),
        (0usize..80).prop_map(Op::Consume),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ring_behaves_like_a_bounded_vecdeque(
        log2_cap in 0u32..7,
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let cap = 1usize << log2_cap;
        let (mut tx, mut rx) = channel::<u64>(cap).unwrap();
        let mut model: VecDeque<u64> = VecDeque::new();
        let mut next = 0u64;
        let (mut enqueued, mut dequeued) = (0u64, 0u64);
        for op in ops {
            match op {
                Op::Push => {
                    let result = tx.push(next);
                    if model.len() < cap {
                        prop_assert_eq!(result, Ok(()));
                        model.push_back(next);
                        enqueued += 1;
                    } else {
                        prop_assert_eq!(result, Err(PushError::Full(next)));
                    }
                    next += 1;
                }
                Op::PushBatch(len) => {
                    let items: Vec<u64> = (next..next + len as u64).collect();
                    let n = tx.push_batch(&items);
                    prop_assert_eq!(n, len.min(cap - model.len()));
                    model.extend(&items[..n]);
                    enqueued += n as u64;
                    next += len as u64;
                }
                Op::Pop => {
                    let got = rx.pop();
                    prop_assert_eq!(got, model.pop_front());
                    dequeued += u64::from(got.is_some());
                }
                Op::PopBatch(len) => {
                    let mut buf = vec![u64::MAX; len];
                    let n = rx.pop_batch(&mut buf);
                    let want: Vec<u64> = model.drain(..len.min(model.len())).collect();
                    prop_assert_eq!(&buf[..n], &want[..]);
                    prop_assert!(buf[n..].iter().all(|&x| x == u64::MAX), "wrote past n");
                    dequeued += n as u64;
                }
                Op::Consume(max) => {
                    let mut got = Vec::new();
                    let n = rx.consume(max, |x| got.push(x));
                    let want: Vec<u64> = model.drain(..max.min(model.len())).collect();
                    prop_assert_eq!(n, want.len());
                    prop_assert_eq!(got, want);
                    dequeued += n as u64;
                }
            }
            prop_assert_eq!((tx.enqueued(), rx.enqueued()), (enqueued, enqueued));
            prop_assert_eq!((tx.dequeued(), rx.dequeued()), (dequeued, dequeued));
            prop_assert_eq!(rx.len(), model.len());
            prop_assert_eq!(rx.is_empty(), model.is_empty());
            prop_assert_eq!(tx.free_len(), cap - model.len());
            prop_assert_eq!(tx.is_full(), model.len() == cap);
        }
    }
}
