//! Model-based property test: random sequences of insert / cancel / reset / get / poll,
//! with time jumping across every level boundary, checked step by step against a
//! `BTreeMap` model (see `model/harness.rs` for what is checked).
//!
//! `PROPTEST_CASES` overrides the number of cases (10,000 by default).

#[path = "model/harness.rs"]
mod harness;

use harness::{Harness, Op, When};
use proptest::prelude::*;

/// Distances that sit on and around level boundaries, plus small, large and huge ones.
fn distance() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![
            0u64, 1, 2, 63, 64, 65, 4095, 4096, 4097, 262_143, 262_144
        ]),
        0u64..200,
        0u64..100_000,
        0u64..(1 << 40),
        any::<u64>(),
    ]
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        6 => distance().prop_map(When::After),
        1 => distance().prop_map(When::Before),
        1 => prop_oneof![Just(u64::MAX), Just(u64::MAX - 1), any::<u64>()].prop_map(When::At),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => when().prop_map(Op::Insert),
        3 => any::<usize>().prop_map(Op::Cancel),
        2 => (any::<usize>(), when()).prop_map(|(i, w)| Op::Reset(i, w)),
        1 => any::<usize>().prop_map(Op::Get),
        1 => any::<u64>().prop_map(Op::Forged),
        3 => distance().prop_map(Op::Poll),
        1 => (distance(), 0usize..4).prop_map(|(jump, n)| Op::PollSome(jump, n)),
    ]
}

/// The operations of `op`, with spikes of thousands of timers and shrink steps between
/// them: the wheel gives memory back and makes it again, and old keys must stay stale.
fn op_with_spikes() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => op(),
        1 => any::<u8>().prop_map(Op::Spike),
        4 => Just(Op::Shrink),
    ]
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn wheel_agrees_with_a_btreemap_model(ops in prop::collection::vec(op(), 1..120)) {
        let mut harness = Harness::default();
        for op in &ops {
            harness.apply(op).map_err(TestCaseError::fail)?;
        }
        // Finally everything expires, exactly once.
        harness.finish().map_err(TestCaseError::fail)?;
    }
}

proptest! {
    // A spike costs thousands of operations: a fiftieth of the cases.
    #![proptest_config(ProptestConfig::with_cases(cases().div_ceil(50)))]

    #[test]
    fn wheel_that_shrinks_after_spikes_agrees_with_the_model(
        ops in prop::collection::vec(op_with_spikes(), 1..120)
    ) {
        let mut harness = Harness::default();
        for op in &ops {
            harness.apply(op).map_err(TestCaseError::fail)?;
        }
        harness.finish().map_err(TestCaseError::fail)?;
    }
}
