//! W1 (churn at a steady pending count: one thread schedules a timer and cancels a random
//! pending one, over and over) for `bench engine`: shardwheel with exact and with
//! tick-rounded deadlines, tokio's timers, the loop with no timer (`no-timer`, the floor
//! the others stand on) and a bare wheel with a clock (`wheel-and-clock`, the least a
//! timer given a delay costs), taking turns in one run; and `ENGINE_W1_COUNT`, a fixed
//! number of iterations of one of them, for `scripts/instructions-per-op`.

use super::{Engine, NoTimer, Probe, Run, Shardwheel, TokioSleep, over_floor, paired, take_turns};
use crate::common::clock::deadline;
use crate::common::{SplitMix64, median};
use shardwheel::{Key, Wheel};
use std::cell::RefCell;
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
/// `shardwheel`, `tokio-sleep`, `no-timer` and `wheel-and-clock`, with no bound on the
/// time, and nothing printed: for `scripts/instructions-per-op`, which counts the
/// instructions of such runs.
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
        "wheel-and-clock" => w1_churn::<WheelAndClock>,
        _ => panic!("ENGINE_W1_COUNT={spec}: no implementation {name}"),
    };
    churn(pending, probe, iterations, Duration::MAX);
}

/// W1 through the engine: exact deadlines against tick-rounded ones (nothing fires, so
/// exactness should cost nothing), tokio's timers, the loop with no timer, and a bare
/// wheel with a clock; the implementations take turns. `vs_tokio-sleep_over_floor`
/// compares what each timer adds to the loop's own time per iteration (its floor,
/// `no-timer`), paired round by round; `wheel-and-clock`'s own line says how far a timer
/// at the wheel's own cost would stand from tokio's.
pub(super) fn w1() {
    type Rounded = Shardwheel<true, false>;
    let runs: [Run; 5] = [
        (Shardwheel::<true>::NAME, w1_round::<Shardwheel<true>>),
        (Rounded::NAME, w1_round::<Rounded>),
        (TokioSleep::NAME, w1_round::<TokioSleep>),
        (NoTimer::NAME, w1_round::<NoTimer>),
        (WheelAndClock::NAME, w1_round::<WheelAndClock>),
    ];
    for pending in [1_000, 1_000_000] {
        let probe = Probe::leak(0);
        let label = format!("W1 P={pending}");
        let turns = take_turns(&label, W1_ROUNDS, &runs, pending, [probe; 5]);
        let (rates, same) = (&turns.figures, &turns.same_load);
        for ((name, _), rates) in runs.iter().zip(rates) {
            println!(
                "RESULT W1 P={pending} {name} iters_per_s={:.0}",
                median(rates.clone())
            );
        }
        println!(
            "RESULT W1 P={pending} shardwheel vs_tokio-sleep={:.2} vs_tokio-sleep_over_floor={:.2} exact_deadlines_cost_pct={:.1} vs_wheel-and-clock={:.2} fired_before_cancel={} {}",
            paired(&rates[0], &rates[2], same),
            over_floor(&rates[0], &rates[2], &rates[3], same),
            100.0 * (1.0 - paired(&rates[0], &rates[1], same)),
            paired(&rates[0], &rates[4], same),
            probe.unexpected.load(Relaxed),
            turns.same_load_rounds(),
        );
        println!(
            "RESULT W1 P={pending} wheel-and-clock vs_tokio-sleep={:.2} vs_tokio-sleep_over_floor={:.2} {}",
            paired(&rates[4], &rates[2], same),
            over_floor(&rates[4], &rates[2], &rates[3], same),
            turns.same_load_rounds(),
        );
    }
}

/// `wheel-and-clock`, for W1 only: a [`Wheel`] of the producer thread's own, each timer due
/// its delay after a reading of the cheapest clock (one `rdtsc`, as shardwheel's own
/// counter clock reads). One thread's schedule and cancel at the wheel's own cost, with
/// the one clock read a timer given a delay must make, and none of what a timer shared by
/// threads needs: no reaper, no atomic, no handle that names a shard, no stage. Nothing
/// advances the wheel, so it never fires.
///
/// Its rate is what a timer on a wheel makes of W1 where the thread that schedules and
/// cancels does the wheel's work itself, and its own line says how many times tokio's
/// timers' rate that is. (At a million pending shardwheel runs faster: its timers reach
/// the wheel there, and its reaper unlinks the cancelled ones on another core.)
struct WheelAndClock;

/// The producer's wheel, and the clock's tick at its start (the wheel's tick 0).
type OwnWheel = (Wheel<&'static Probe>, u64);

thread_local! {
    static WHEEL: RefCell<OwnWheel> = const { RefCell::new((Wheel::new(), 0)) };
}

/// The wheel's tick: 2^20 of the clock's units, a delay's nanoseconds taken as such (see
/// `clock`): about 1 ms of a delay, as shardwheel's tick, so that W1's delays (1 ms to
/// 60 s) fall in as many levels.
const TICK_SHIFT: u32 = 20;

impl Engine for WheelAndClock {
    const NAME: &'static str = "wheel-and-clock";
    type Armed = Key;

    /// A fresh wheel for the calling thread, where W1 then runs (`enter` runs the
    /// producer on the caller).
    fn start() -> Self {
        WHEEL.set((Wheel::new(), deadline(Duration::ZERO) >> TICK_SHIFT));
        WheelAndClock
    }

    fn enter<R>(&self, producer: impl FnOnce() -> R) -> R {
        producer()
    }

    fn arm(&self, delay: Duration, probe: &'static Probe) -> Key {
        WHEEL.with_borrow_mut(|(wheel, start)| {
            wheel.insert((deadline(delay) >> TICK_SHIFT).wrapping_sub(*start), probe)
        })
    }

    fn cancel(&self, key: Key) -> bool {
        WHEEL.with_borrow_mut(|(wheel, _)| wheel.cancel(key).is_some())
    }

    fn fire_at(&self, _deadline: Instant, _probe: &'static Probe) {
        unreachable!("wheel-and-clock runs W1 only, where no timer fires");
    }

    fn stop(self) -> Option<usize> {
        Some(WHEEL.with_borrow(|(wheel, _)| wheel.len()))
    }
}
