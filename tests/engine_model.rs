//! Model-based property test of the engine: a manual `Timer` driven by random sequences of
//! schedule / cancel (on this thread, whose stage holds its timers, or on threads of their
//! own) / reset / foreign handles / advance, checked step by step against a
//! model (see `engine_model/harness.rs` for what is checked), then shut down.
//!
//! `PROPTEST_CASES` overrides the number of cases (2,000 by default).

#[path = "engine_model/harness.rs"]
mod harness;

use harness::{Harness, Op, TICK_NANOS};
use proptest::prelude::*;

/// Nanosecond times around tick and level boundaries, and small, large and huge ones.
fn nanos() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![0, 1, TICK_NANOS - 1, TICK_NANOS, TICK_NANOS + 1]),
        (0u64..300).prop_map(|ticks| ticks * TICK_NANOS),
        0u64..(100 * TICK_NANOS),
        prop::sample::select(vec![63, 64, 65, 4095, 4096, 4097]).prop_map(|t| t * TICK_NANOS),
        any::<u64>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => nanos().prop_map(Op::Schedule),
        3 => any::<usize>().prop_map(Op::Cancel),
        1 => nanos().prop_map(Op::ScheduleElsewhere),
        1 => any::<usize>().prop_map(Op::CancelElsewhere),
        3 => (any::<usize>(), nanos()).prop_map(|(i, t)| Op::Reset(i, t)),
        1 => any::<usize>().prop_map(Op::Foreign),
        4 => nanos().prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(2_000),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_manual_engine_agrees_with_the_model(
        shards in 1usize..4,
        max_pending in prop_oneof![Just(usize::MAX), 1usize..40],
        exact in any::<bool>(),
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let mut harness = Harness::new(shards, max_pending, exact);
        for op in &ops {
            if let Err(error) = harness.apply(op) {
                return Err(TestCaseError::fail(format!("{error} (after {op:?})")));
            }
        }
        harness.finish().map_err(TestCaseError::fail)?;
    }
}
