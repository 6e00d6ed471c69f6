//! W1 (churn at a steady pending count: one thread schedules a timer and cancels a random
//! pending one, over and over) for `bench engine`: shardwheel with exact and with
//! tick-rounded deadlines, tokio's timers, and the loop with no timer (`no-timer`, the
//! floor the others stand on), taking turns in one run; and `ENGINE_W1_COUNT`, a fixed
//! number of iterations of one of them, for `scripts/instructions-per-op`.

use super::{Engine, NoTimer, Probe, Run, Shardwheel, TokioSleep, over_floor, paired, take_turns};
use crate::common::{SplitMix64, median};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const W1_ITERATIONS: usize = 2_000_000;
const W1_BOUND: Duration = Duration::from_secs(2);
const W1_ROUNDS: usize = 5;

/// One W1 round: pre-fill `pending` timers, then schedule one and cancel a uniformly
/// chosen pending one per iteration; returns iterations per second.
fn w1_round<E: Engine>(pending: usize, probe: &'static Probe) -> f64 {
    w1_churn::<E>(pending, probe, W1_ITERATIONS, W1_BOUND)
}

/// W1's loop: `iterations` of them at most, for `bound` at most (in multiples of 256);
/// iterations per second.
fn w1_churn<E: Engine>(
    pending: usize,
    probe: &'static Probe,
    iterations: usize,
    bound: Duration,
) -> f64 {
    let engine = E::start();
    let mut rng = SplitMix64(42);
    let rate = engine.enter(|| {
        let mut ring: Vec<E::Armed> = (0..pending)
            .map(|_| {
                let delay = Duration::from_millis(rng.between(1_000, 60_000));
                engine.arm(delay, probe)
            })
            .collect();
        let start = Instant::now();
        let mut done = 0;
        while done < iterations && start.elapsed() < bound {
            for _ in 0..256 {
                let delay = Duration::from_millis(rng.between(1, 60_000));
                let armed = engine.arm(delay, probe);
                let at = rng.between(0, pending as u64 - 1) as usize;
                // False only for a timer of a few ms that fired first (counted by the
                // probe's `unexpected`).
                engine.cancel(std::mem::replace(&mut ring[at], armed));
            }
            done += 256;
        }
        let rate = done as f64 / start.elapsed().as_secs_f64();
        for armed in ring {
            engine.cancel(armed);
        }
        rate
    });
    engine.stop();
    rate
}

/// `ENGINE_W1_COUNT=IMPLEMENTATION:P:N`: N iterations of W1 at P pending, for one of
/// `shardwheel`, `tokio-sleep` and `no-timer`, with no bound on the time, and nothing
/// printed: for `scripts/instructions-per-op`, which counts the instructions of such runs.
pub(super) fn w1_count(spec: &str) {
    let parts: Vec<&str> = spec.split(':').collect();
    let [name, pending, iterations] = parts[..] else {
        panic!("ENGINE_W1_COUNT={spec}: IMPLEMENTATION:P:N expected");
    };
    let number = |text: &str| -> usize {
        text.parse()
            .unwrap_or_else(|_| panic!("ENGINE_W1_COUNT={spec}: {text} is not a count"))
    };
    let (pending, iterations) = (number(pending), number(iterations));
    let probe = Probe::leak(0);
    let churn = match name {
        "shardwheel" => w1_churn::<Shardwheel<true>>,
        "tokio-sleep" => w1_churn::<TokioSleep>,
        "no-timer" => w1_churn::<NoTimer>,
        _ => panic!("ENGINE_W1_COUNT={spec}: no implementation {name}"),
    };
    churn(pending, probe, iterations, Duration::MAX);
}

/// W1 through the engine: exact deadlines against tick-rounded ones (nothing fires, so
/// exactness should cost nothing), tokio's timers, and the loop with no timer; the
/// implementations take turns. `vs_tokio-sleep_over_floor` compares what each timer adds
/// to the loop's own time per iteration (its floor, `no-timer`), paired round by round.
pub(super) fn w1() {
    type Rounded = Shardwheel<true, false>;
    let runs: [Run; 4] = [
        (Shardwheel::<true>::NAME, w1_round::<Shardwheel<true>>),
        (Rounded::NAME, w1_round::<Rounded>),
        (TokioSleep::NAME, w1_round::<TokioSleep>),
        (NoTimer::NAME, w1_round::<NoTimer>),
    ];
    for pending in [1_000, 1_000_000] {
        let probe = Probe::leak(0);
        let label = format!("W1 P={pending}");
        let turns = take_turns(&label, W1_ROUNDS, &runs, pending, [probe; 4]);
        let (rates, same) = (&turns.figures, &turns.same_load);
        for ((name, _), rates) in runs.iter().zip(rates) {
            println!(
                "RESULT W1 P={pending} {name} iters_per_s={:.0}",
                median(rates.clone())
            );
        }
        println!(
            "RESULT W1 P={pending} shardwheel vs_tokio-sleep={:.2} vs_tokio-sleep_over_floor={:.2} exact_deadlines_cost_pct={:.1} fired_before_cancel={} {}",
            paired(&rates[0], &rates[2], same),
            over_floor(&rates[0], &rates[2], &rates[3], same),
            100.0 * (1.0 - paired(&rates[0], &rates[1], same)),
            probe.unexpected.load(Relaxed),
            turns.same_load_rounds(),
        );
    }
}
