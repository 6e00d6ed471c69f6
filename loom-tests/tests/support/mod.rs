//! What the models share: a payload that counts its drops, and a reaper pass that counts
//! the timers it fired.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use shardwheel::loom_api::Due;
use shardwheel::loom_api::Shard;

/// A timer payload that counts how often payloads were dropped (fired or not).
#[derive(Debug)]
pub struct Payload {
    pub value: usize,
    drops: Arc<AtomicUsize>,
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// A shard, and the counters the models check.
pub struct Harness {
    pub shard: Arc<Shard<Payload>>,
    pub drops: Arc<AtomicUsize>,
    pub fired: Arc<AtomicUsize>,
    /// Sum of the values of fired payloads: tells which timers fired.
    pub fired_values: Arc<AtomicUsize>,
}

impl Harness {
    pub fn new() -> Self {
        Harness {
            // A tick of one nanosecond: deadlines and ticks are the same numbers.
            shard: Arc::new(Shard::new(usize::MAX, 1, true, false)),
            drops: Arc::new(AtomicUsize::new(0)),
            fired: Arc::new(AtomicUsize::new(0)),
            fired_values: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A shard with exact deadlines and a tick of 1,000 ns: a timer due at 1,500 is handed
    /// over by the wheel at tick 1 and held until its deadline (see `pass_at`).
    #[allow(dead_code)] // used by some of the models only
    pub fn exact() -> Self {
        Harness {
            shard: Arc::new(Shard::new(usize::MAX, 1_000, true, true)),
            ..Harness::new()
        }
    }

    pub fn payload(&self, value: usize) -> Payload {
        Payload {
            value,
            drops: Arc::clone(&self.drops),
        }
    }

    /// One reaper pass at tick `now`, counting what fires.
    pub fn pass(&self, due: &mut Due, now: u64) {
        self.pass_at(due, now, now);
    }

    /// One reaper pass at tick `now` with the clock at `elapsed` nanoseconds, counting
    /// what fires.
    pub fn pass_at(&self, due: &mut Due, now: u64, elapsed: u64) {
        let fired = Arc::clone(&self.fired);
        let values = Arc::clone(&self.fired_values);
        self.shard
            .pass(due, now, &|| elapsed, &move |payload: Payload| {
                fired.fetch_add(1, Ordering::SeqCst);
                values.fetch_add(payload.value, Ordering::SeqCst);
            });
    }

    pub fn fired(&self) -> usize {
        self.fired.load(Ordering::SeqCst)
    }

    pub fn drops(&self) -> usize {
        self.drops.load(Ordering::SeqCst)
    }
}

impl Clone for Harness {
    fn clone(&self) -> Self {
        Harness {
            shard: Arc::clone(&self.shard),
            drops: Arc::clone(&self.drops),
            fired: Arc::clone(&self.fired),
            fired_values: Arc::clone(&self.fired_values),
        }
    }
}

/// Spawns the reaper loop of `Shard::run` in model form: a pass, then, unless `done`,
/// plan to sleep until `plan` and park if nothing arrived meanwhile.
#[allow(dead_code)] // used by some of the models only
pub fn spawn_reaper(
    h: &Harness,
    plan: u64,
    done: fn(&Harness) -> bool,
) -> loom::thread::JoinHandle<()> {
    spawn_reaper_tidying(h, plan, false, done)
}

/// `spawn_reaper`, planning as a reaper that is `tidying` (its last pass took changes):
/// it may then sleep with cancels waiting. Its park has no timeout here, so a change it
/// sleeps on that needed it awake leaves it parked for ever, which loom reports.
#[allow(dead_code)] // used by some of the models only
pub fn spawn_reaper_tidying(
    h: &Harness,
    plan: u64,
    tidying: bool,
    done: fn(&Harness) -> bool,
) -> loom::thread::JoinHandle<()> {
    let h = h.clone();
    loom::thread::spawn(move || {
        h.shard.register_reaper();
        let mut due = Due::new();
        loop {
            h.pass(&mut due, 0);
            if done(&h) {
                break;
            }
            if h.shard.may_sleep(&due, plan, tidying) {
                loom::thread::park();
            }
        }
    })
}
