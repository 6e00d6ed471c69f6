//! What the fuzz targets share: the model harness of the property test
//! (`tests/model/harness.rs`), and a decoder that turns the fuzzer's bytes into its
//! operations, with a mix of operations per target.

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

/// Relative weights of insert, cancel, reset, get, forged key, poll, bounded poll.
fn weights(mix: Mix) -> [u32; 7] {
    match mix {
        Mix::Operations => [8, 3, 2, 1, 1, 3, 1],
        Mix::Handles => [4, 4, 3, 3, 6, 2, 1],
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
        _ => Op::PollSome(distance(u)?, u.int_in_range(0..=3)?),
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
