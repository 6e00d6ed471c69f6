//! What the fuzz targets share: the model harnesses of the property tests
//! (`tests/model/harness.rs` for the wheel, `tests/engine_model/harness.rs` for the manual
//! engine), and decoders that turn the fuzzer's bytes into their operations, with a mix of
//! operations per wheel target.

#[path = "../../tests/engine_model/harness.rs"]
pub mod engine_harness;
#[path = "../../tests/model/harness.rs"]
pub mod harness;

use arbitrary::{Result, Unstructured};
use harness::{Harness, Op, When};

/// Which operations a target leans on.
#[derive(Debug, Clone, Copy)]
pub enum Mix {
    /// Inserts, cancels, resets and polls, as a user's workload has them.
    Operations,
    /// Keys above all: stale, reused and forged keys against every method.
    Handles,
}

/// Relative weights of insert, cancel, reset, get, forged key, poll, bounded poll, spike
/// (thousands of timers, most cancelled), shrink step.
fn weights(mix: Mix) -> [u32; 9] {
    match mix {
        Mix::Operations => [80, 30, 20, 10, 10, 30, 10, 1, 5],
        Mix::Handles => [40, 40, 30, 30, 60, 20, 10, 1, 5],
    }
}

/// Distances on and around level boundaries, plus small, large and huge ones.
fn distance(u: &mut Unstructured) -> Result<u64> {
    Ok(match u.int_in_range(0..=4)? {
        0 => *u.choose(&[0, 1, 2, 63, 64, 65, 4095, 4096, 4097, 262_143, 262_144])?,
        1 => u.int_in_range(0..=200)?,
        2 => u.int_in_range(0..=100_000)?,
        3 => u.int_in_range(0..=1 << 40)?,
        _ => u.arbitrary()?,
    })
}

fn when(u: &mut Unstructured) -> Result<When> {
    Ok(match u.int_in_range(0..=7)? {
        0..=5 => When::After(distance(u)?),
        6 => When::Before(distance(u)?),
        _ => When::At(u.arbitrary()?),
    })
}

fn op(u: &mut Unstructured, mix: Mix) -> Result<Op> {
    let weights = weights(mix);
    let mut pick = u.int_in_range(0..=weights.iter().sum::<u32>() - 1)?;
    let kind = weights
        .iter()
        .position(|&w| {
            let hit = pick < w;
            pick = pick.saturating_sub(w);
            hit
        })
        .unwrap_or(0);
    Ok(match kind {
        0 => Op::Insert(when(u)?),
        1 => Op::Cancel(u.arbitrary()?),
        2 => Op::Reset(u.arbitrary()?, when(u)?),
        3 => Op::Get(u.arbitrary()?),
        4 => Op::Forged(u.arbitrary()?),
        5 => Op::Poll(distance(u)?),
        6 => Op::PollSome(distance(u)?, u.int_in_range(0..=3)?),
        7 => Op::Spike(u.arbitrary()?),
        _ => Op::Shrink,
    })
}

/// Runs the operations the bytes decode to against the model; panics (which the fuzzer
/// reports as a crash) on the first disagreement.
pub fn run(data: &[u8], mix: Mix) {
    let mut u = Unstructured::new(data);
    let mut harness = Harness::default();
    while !u.is_empty() {
        let Ok(op) = op(&mut u, mix) else { break };
        if let Err(error) = harness.apply(&op) {
            panic!("{error} (after {op:?})");
        }
    }
    if let Err(error) = harness.finish() {
        panic!("{error} (at the final poll)");
    }
}

/// Nanosecond times around tick and level boundaries, and small, large and huge ones.
fn nanos(u: &mut Unstructured) -> Result<u64> {
    let tick = engine_harness::TICK_NANOS;
    Ok(match u.int_in_range(0..=4)? {
        0 => *u.choose(&[0, 1, tick - 1, tick, tick + 1])?,
        1 => u.int_in_range(0..=300)? * tick,
        2 => u.int_in_range(0..=100 * tick)?,
        3 => *u.choose(&[63, 64, 65, 4095, 4096, 4097])? * tick,
        _ => u.arbitrary()?,
    })
}

fn engine_op(u: &mut Unstructured) -> Result<engine_harness::Op> {
    use engine_harness::Op;
    Ok(match u.int_in_range(0..=16)? {
        0..=5 => Op::Schedule(nanos(u)?),
        6..=8 => Op::Cancel(u.arbitrary()?),
        9..=11 => Op::Reset(u.arbitrary()?, nanos(u)?),
        12 => Op::Foreign(u.arbitrary()?),
        13 => Op::ScheduleElsewhere(nanos(u)?),
        14 => Op::CancelElsewhere(u.arbitrary()?),
        _ => Op::Advance(nanos(u)?),
    })
}

/// Runs a manual engine (shard count, bound and exact deadlines from the first bytes) through the
/// operations the rest decodes to, against the model, then shuts it down; panics on the
/// first disagreement.
pub fn run_engine(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let shards = u.int_in_range(1..=3).unwrap_or(1);
    let max_pending = match u.int_in_range(0..=40).unwrap_or(0) {
        0 => usize::MAX,
        bound => bound,
    };
    let exact = u.arbitrary::<bool>().unwrap_or(true);
    let mut harness = engine_harness::Harness::new(shards, max_pending, exact);
    while !u.is_empty() {
        let Ok(op) = engine_op(&mut u) else { break };
        if let Err(error) = harness.apply(&op) {
            panic!("{error} (after {op:?})");
        }
    }
    if let Err(error) = harness.finish() {
        panic!("{error} (at shutdown)");
    }
}
