//! W1 (churn at a steady pending count), W2 (a million timers fire), W3 (request timeouts
//! from T threads, 90 % cancelled), W5 (idle cost) and W6 (precision under light load) of
//! benches/README.md, for shardwheel's `Timer` (with exact deadlines, and variants:
//! tick-rounded, no lateness recording, a 100 us tick, a spin) and tokio's timers, in one
//! process. (Issue 7's spike has its own bench, `spike.rs`, on the system allocator.)
//!
//! - `shardwheel`: `Timer` with boxed callbacks, a shard per core, 1 ms tick: a timer the
//!   workload means to cancel is `schedule(delay, callback)`, as a user with a delay
//!   schedules it (the engine reads its own clock); one that is to fire is
//!   `schedule_at(deadline, callback)`, its lateness measured from that deadline; a cancel
//!   is `cancel(handle)`.
//! - `tokio-sleep`: `tokio::time::sleep(delay)` (`sleep_until(deadline)` for a timer that
//!   is to fire) in a multi-thread runtime with a worker per core. A timer is a `Sleep`,
//!   boxed and polled once on the producer thread (inside the runtime's context) so that
//!   it is registered; a cancel drops it. A timer that must fire is handed, registered, to
//!   a spawned task that awaits it.
//! - `no-timer` (W1, W3): the workload's loop with no timer at all, the floor the others
//!   stand on.
//! - `wheel-and-clock` (W1): a bare `Wheel` of the producer thread's own, each deadline
//!   read from the cheapest clock; never fires. What a timer on a wheel costs one thread
//!   at least (see `engine/w1.rs`).
//!
//! Lateness is (time the callback or task ran) - (the deadline asked for). Producers share
//! nothing but the engine: the probe that counts firings is `'static`, so cloning no
//! reference count bounces a cache line between them.
//!
//! W1 is in `engine/w1.rs`; W3 and W3-slack (exact deadlines against 10 ms of slack per
//! timer) are in `engine/w3.rs`; their turn-taking and load-paired ratios in `engine/turns.rs`.
//!
//! W1 and W3 print, for every round, the load average at its start and the CPU other
//! processes took during each implementation's turn (in cores, from the kernel's tick
//! counts); their ratios count only the rounds whose turns all ran within a quarter of a
//! core of each other (`same_load_rounds=`), and are NaN where none did: a ratio of rates
//! made under different loads says nothing of the two implementations.
//!
//! tokio's alternative timer (`enable_alt_timer`) is not a peer here: these producers are
//! plain threads, and it takes a timer from outside its workers under the runtime's lock,
//! waking a parked worker for each, a path it is not built for. It runs where it is meant
//! to, in tasks on its workers: the futures bench's W7 and W3-async.
//!
//! Run: `cargo bench --bench engine`; `ENGINE_ONLY=W3,W6` runs some workloads only.

mod common;
#[path = "engine/turns.rs"]
mod turns;
#[path = "engine/w1.rs"]
mod w1;
#[path = "engine/w3.rs"]
mod w3;

use common::cpu::process_cpu;
use common::{SplitMix64, load_average, percentile};
use mimalloc::MiMalloc;
use shardwheel::{Timer, TimerHandle};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::task::{Context, Waker};
use std::thread;
use std::time::{Duration, Instant};
use turns::{Run, over_floor, paired, take_turns};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// What a workload learns from the timers that ran.
#[derive(Default)]
struct Probe {
    lateness_ns: Mutex<Vec<u64>>,
    fired: AtomicUsize,
    /// Timers that ran before their deadline (must stay 0).
    early: AtomicUsize,
    /// Timers that ran although the workload cancelled them or meant to (must stay 0).
    unexpected: AtomicUsize,
}

impl Probe {
    /// A probe for one run that expects about `fires` timers to run; leaked, so that
    /// callbacks hold a plain `&'static`. Its lateness buffer is made and touched now, so
    /// that recording a timer's lateness never grows it inside a callback: growing a
    /// buffer of megabytes (new memory, page faults) held the probe's lock for up to
    /// 5.6 ms in W3 at two threads, and every timer behind that callback waited: the
    /// bench's cost, not the engine's.
    fn leak(fires: usize) -> &'static Probe {
        let mut buffer = vec![0; fires];
        buffer.clear();
        Box::leak(Box::new(Probe {
            lateness_ns: Mutex::new(buffer),
            ..Probe::default()
        }))
    }

    fn record(&self, deadline: Instant) {
        match Instant::now().checked_duration_since(deadline) {
            Some(late) => {
                let late = late.as_nanos() as u64;
                self.lateness_ns
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(late);
            }
            None => {
                self.early.fetch_add(1, Relaxed);
            }
        }
        self.fired.fetch_add(1, Relaxed);
    }

    fn sorted_lateness(&self) -> Vec<u64> {
        let mut lateness =
            std::mem::take(&mut *self.lateness_ns.lock().unwrap_or_else(|e| e.into_inner()));
        lateness.sort_unstable();
        lateness
    }

    /// Waits until `count` timers have run, for at most `limit`; true if they did.
    fn wait_for(&self, count: usize, limit: Duration) -> bool {
        let start = Instant::now();
        while self.fired.load(Relaxed) < count {
            if start.elapsed() > limit {
                return false;
            }
            thread::sleep(Duration::from_micros(200));
        }
        true
    }
}

/// `p50`, `p99`, `p99.9` and `max` of a sorted lateness sample, in microseconds.
fn lateness_fields(sorted: &[u64], quantiles: &[(&str, f64)]) -> String {
    quantiles
        .iter()
        .map(|(name, q)| format!("late_{name}_us={:.0}", percentile(sorted, *q) as f64 / 1e3))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the workloads need of a timer engine.
trait Engine: Sync + Sized {
    const NAME: &'static str;
    /// A registered timer that can be cancelled.
    type Armed: Send;
    fn start() -> Self;
    /// Runs `producer` on the calling thread, able to use the engine.
    fn enter<R>(&self, producer: impl FnOnce() -> R) -> R;
    /// A timer due `delay` from now that the workload means to cancel, scheduled as a user
    /// with a delay would (the engine reads its clock as it does for its users).
    fn arm(&self, delay: Duration, probe: &'static Probe) -> Self::Armed;
    /// Cancels it: true if it will not run.
    fn cancel(&self, armed: Self::Armed) -> bool;
    /// A timer due at `deadline` that records its lateness when it runs.
    fn fire_at(&self, deadline: Instant, probe: &'static Probe);
    /// Its reapers' passes so far (wake-ups, and passes made without sleeping), if it
    /// can tell.
    fn passes(&self) -> Option<u64> {
        None
    }
    /// Passes its reapers made so far for each other's shards, held up, if it can tell.
    fn rescued(&self) -> Option<u64> {
        None
    }
    /// Returns once the engine has caught up with what the calling thread gave it: a timer
    /// due now, on this thread's shard, fires only once the reaper has taken in the rest.
    fn catch_up(&self) {
        let caught_up = Probe::leak(1);
        self.fire_at(Instant::now(), caught_up);
        assert!(caught_up.wait_for(1, Duration::from_secs(60)));
    }
    /// Stops the engine; the number of pending timers it handed back, if it can tell.
    fn stop(self) -> Option<usize>;
}

/// shardwheel's `Timer`; `LATENESS`: whether it records its own lateness histogram
/// (`Builder::record_lateness`, on by default), so that the cost of doing so shows;
/// `EXACT`: whether timers fire at their exact deadlines (`Builder::exact_deadlines`, on
/// by default) or at the start of their tick; `TICK_US`: the tick; `SPIN_US`: how long
/// the reaper spins before a deadline (`Builder::spin_before_deadline`, off by default);
/// `SLACK_MS`: each timer's slack (`Timer::schedule_at_within`; none by default).
struct Shardwheel<
    const LATENESS: bool = true,
    const EXACT: bool = true,
    const TICK_US: u64 = 1000,
    const SPIN_US: u64 = 0,
    const SLACK_MS: u64 = 0,
    const EARLY: bool = true,
>(Timer);

impl<
    const LATENESS: bool,
    const EXACT: bool,
    const TICK_US: u64,
    const SPIN_US: u64,
    const SLACK_MS: u64,
    const EARLY: bool,
> Engine for Shardwheel<LATENESS, EXACT, TICK_US, SPIN_US, SLACK_MS, EARLY>
{
    const NAME: &'static str = match (LATENESS, EXACT, TICK_US, SPIN_US, SLACK_MS, EARLY) {
        (true, true, 1000, 0, 0, true) => "shardwheel",
        (false, true, 1000, 0, 0, true) => "shardwheel-no-lateness",
        (true, false, 1000, 0, 0, true) => "shardwheel-tick-rounded",
        (true, true, 100, 0, 0, true) => "shardwheel-tick-100us",
        (true, true, 1000, 200, 0, true) => "shardwheel-spin-200us",
        (true, true, 1000, 0, 10, true) => "shardwheel-slack-10ms",
        (true, true, 1000, 0, 0, false) => "shardwheel-not-early",
        _ => "shardwheel-other",
    };
    type Armed = TimerHandle;

    fn start() -> Self {
        Shardwheel(
            Timer::builder()
                .record_lateness(LATENESS)
                .exact_deadlines(EXACT)
                .tick(Duration::from_micros(TICK_US))
                .spin_before_deadline(Duration::from_micros(SPIN_US))
                .wake_early(EARLY)
                .build()
                .expect("timer"),
        )
    }

    fn enter<R>(&self, producer: impl FnOnce() -> R) -> R {
        producer()
    }

    fn arm(&self, delay: Duration, probe: &'static Probe) -> TimerHandle {
        self.0
            .schedule_within(delay, Duration::from_millis(SLACK_MS), move || {
                probe.unexpected.fetch_add(1, Relaxed);
            })
            .expect("schedule")
    }

    fn cancel(&self, handle: TimerHandle) -> bool {
        self.0.cancel(handle)
    }

    fn fire_at(&self, deadline: Instant, probe: &'static Probe) {
        let slack = Duration::from_millis(SLACK_MS);
        self.0
            .schedule_at_within(deadline, slack, move || probe.record(deadline))
            .expect("schedule");
    }

    fn passes(&self) -> Option<u64> {
        Some(self.0.counts().passes)
    }

    fn rescued(&self) -> Option<u64> {
        Some(self.0.counts().rescued)
    }

    fn stop(self) -> Option<usize> {
        Some(self.0.shutdown().len())
    }
}

struct TokioSleep(tokio::runtime::Runtime);

impl TokioSleep {
    /// `sleep`, boxed and polled once, so that it is registered with the runtime's timer.
    fn registered(sleep: tokio::time::Sleep) -> Pin<Box<tokio::time::Sleep>> {
        let mut sleep = Box::pin(sleep);
        let mut context = Context::from_waker(Waker::noop());
        let _ = sleep.as_mut().poll(&mut context);
        sleep
    }
}

impl Engine for TokioSleep {
    const NAME: &'static str = "tokio-sleep";
    type Armed = Pin<Box<tokio::time::Sleep>>;

    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_time()
            .build()
            .expect("tokio runtime");
        TokioSleep(runtime)
    }

    fn enter<R>(&self, producer: impl FnOnce() -> R) -> R {
        let _context = self.0.enter();
        producer()
    }

    fn arm(&self, delay: Duration, _probe: &'static Probe) -> Self::Armed {
        Self::registered(tokio::time::sleep(delay))
    }

    fn cancel(&self, sleep: Self::Armed) -> bool {
        drop(sleep);
        true
    }

    fn fire_at(&self, deadline: Instant, probe: &'static Probe) {
        let sleep = Self::registered(tokio::time::sleep_until(deadline.into()));
        self.0.spawn(async move {
            sleep.await;
            probe.record(deadline);
        });
    }

    fn stop(self) -> Option<usize> {
        self.0.shutdown_background();
        None
    }
}

/// W1's and W3's loops with no timer at all: the floor every engine's iteration stands on
/// (the random draws, the ring of entries: at W1's P = 1M, a million 8-byte ones, each a
/// cache miss; and in W3 the clock read for the deadline of a timer that is to fire), as
/// W7's `no-timeout`. Each engine's own clock read for a delay is its cost.
/// A timer is a number, and a cancel reads it; `black_box` keeps both. A timer that is to
/// fire does nothing (no probe is touched: the producers share nothing), and there is
/// nothing to catch up with.
struct NoTimer;

impl Engine for NoTimer {
    const NAME: &'static str = "no-timer";
    type Armed = u64;

    fn start() -> Self {
        NoTimer
    }

    fn enter<R>(&self, producer: impl FnOnce() -> R) -> R {
        producer()
    }

    fn arm(&self, delay: Duration, _probe: &'static Probe) -> u64 {
        std::hint::black_box(delay);
        std::hint::black_box(0)
    }

    fn cancel(&self, armed: u64) -> bool {
        std::hint::black_box(armed);
        true
    }

    fn fire_at(&self, deadline: Instant, _probe: &'static Probe) {
        std::hint::black_box(deadline);
    }

    fn catch_up(&self) {}

    fn stop(self) -> Option<usize> {
        None
    }
}

const W2_TIMERS: usize = 1_000_000;
const W2_QUANTILES: [(&str, f64); 4] = [("p50", 0.5), ("p99", 0.99), ("p999", 0.999), ("max", 1.0)];

/// W2: one thread schedules a million timers due in [0, 1 s]; every one must fire once.
/// Returns the schedule rate.
fn w2<E: Engine>() -> f64 {
    let probe = Probe::leak(W2_TIMERS);
    let engine = E::start();
    let start = Instant::now();
    let scheduling = w2_schedule(&engine, W2_TIMERS, Duration::ZERO, probe);
    let all_fired = probe.wait_for(W2_TIMERS, Duration::from_secs(30));
    let wall = start.elapsed();
    // Anything firing twice would show up now.
    thread::sleep(Duration::from_millis(100));
    let handed_back = engine.stop();
    let fired = probe.fired.load(Relaxed);
    let rate = W2_TIMERS as f64 / scheduling.as_secs_f64();
    println!(
        "RESULT W2 {} schedule_per_s={rate:.0} {} wall_ms={} fired={fired} early={} exactly_once={}",
        E::NAME,
        lateness_fields(&probe.sorted_lateness(), &W2_QUANTILES),
        wall.as_millis(),
        probe.early.load(Relaxed),
        all_fired && fired == W2_TIMERS && handed_back.unwrap_or(0) == 0,
    );
    rate
}

/// W2's producer: `timers` timers due in [0, 1 s] from when each is scheduled, later by
/// `offset`, each to record its lateness in `probe`; how long scheduling them took.
/// (Kept out of line, so that `scripts/instructions-per-op` can count it alone.)
#[inline(never)]
fn w2_schedule<E: Engine>(
    engine: &E,
    timers: usize,
    offset: Duration,
    probe: &'static Probe,
) -> Duration {
    let mut rng = SplitMix64(42);
    let delays: Vec<Duration> = (0..timers)
        .map(|_| offset + Duration::from_nanos(rng.between(0, 1_000_000_000)))
        .collect();
    let start = Instant::now();
    engine.enter(|| {
        for delay in delays {
            engine.fire_at(Instant::now() + delay, probe);
        }
    });
    start.elapsed()
}

/// `ENGINE_W2_COUNT=IMPLEMENTATION:N`: W2's producer with N timers, for `shardwheel` or
/// `tokio-sleep`, and nothing printed: for `scripts/instructions-per-op`, which counts the
/// instructions of `w2_schedule` alone in such runs. The timers are due 1,000 s later
/// than W2's, and the engine stops (handing them back) once they are scheduled: run under
/// callgrind, 50 times slower, W2's own deadlines came due while the producer still
/// scheduled, and how many of its slots came back freed (against new ones) moved its
/// figure by 20 to 150 instructions a schedule from run to run. In a real W2 run the
/// producer is done within some 40 ms, before most of them come due: new slots, as here.
fn w2_count(spec: &str) {
    fn run<E: Engine>(timers: usize) {
        let probe = Probe::leak(0);
        let engine = E::start();
        w2_schedule(&engine, timers, Duration::from_secs(1_000), probe);
        engine.stop();
    }
    let Some((name, timers)) = spec.split_once(':') else {
        panic!("ENGINE_W2_COUNT={spec}: IMPLEMENTATION:N expected");
    };
    let timers = timers
        .parse()
        .unwrap_or_else(|_| panic!("ENGINE_W2_COUNT={spec}: {timers} is not a count"));
    match name {
        "shardwheel" => run::<Shardwheel<true>>(timers),
        "tokio-sleep" => run::<TokioSleep>(timers),
        _ => panic!("ENGINE_W2_COUNT={spec}: no implementation {name}"),
    }
}

const W5_TIMERS: usize = 1_000_000;
const W5_IDLE: Duration = Duration::from_secs(5);

/// W5: a million timers due in 10 to 20 minutes; CPU used over 5 idle seconds.
fn w5<E: Engine>() {
    let probe = Probe::leak(0);
    let engine = E::start();
    let mut rng = SplitMix64(42);
    let armed: Vec<E::Armed> = engine.enter(|| {
        (0..W5_TIMERS)
            .map(|_| {
                let delay = Duration::from_secs(rng.between(601, 1_200));
                engine.arm(delay, probe)
            })
            .collect()
    });
    // Let the engine take in what was scheduled before the idle time starts.
    thread::sleep(Duration::from_secs(1));
    let (cpu_before, start) = (process_cpu(), Instant::now());
    thread::sleep(W5_IDLE);
    let (cpu, wall) = (process_cpu() - cpu_before, start.elapsed());
    println!(
        "RESULT W5 {} pending={} cpu_ms={:.1} cpu_pct_of_core={:.3}",
        E::NAME,
        armed.len(),
        cpu.as_secs_f64() * 1e3,
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
    );
    drop(armed);
    engine.stop();
}

const W6_RATE_PER_S: u32 = 1_000;
const W6_SPAN: Duration = Duration::from_secs(5);

/// W6: 1,000 timers a second for 5 s, due in [1 ms, 100 ms].
fn w6<E: Engine>() {
    let count = W6_RATE_PER_S * W6_SPAN.as_secs() as u32;
    let probe = Probe::leak(count as usize);
    let engine = E::start();
    let mut rng = SplitMix64(42);
    let (cpu_before, start) = (process_cpu(), Instant::now());
    engine.enter(|| {
        for i in 0..count {
            let at = start + W6_SPAN * i / count;
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
            let delay = Duration::from_micros(rng.between(1_000, 100_000));
            engine.fire_at(Instant::now() + delay, probe);
        }
    });
    let all_fired = probe.wait_for(count as usize, Duration::from_secs(5));
    let (cpu, wall) = (process_cpu() - cpu_before, start.elapsed());
    engine.stop();
    w6_line(
        E::NAME,
        probe,
        &format!(" all_fired={all_fired}"),
        cpu,
        wall,
    );
}

/// Prints W6's line for `name`: the lateness and counts `probe` saw, `extra` fields, and
/// the process's CPU time `cpu` over `wall`.
fn w6_line(name: &str, probe: &Probe, extra: &str, cpu: Duration, wall: Duration) {
    println!(
        "RESULT W6 {name} {} fired={} early={}{extra} cpu_pct_of_core={:.2}",
        lateness_fields(
            &probe.sorted_lateness(),
            &[("p50", 0.5), ("p99", 0.99), ("max", 1.0)]
        ),
        probe.fired.load(Relaxed),
        probe.early.load(Relaxed),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
    );
}

/// W6's floor: what the OS gives a thread that sleeps to each of W6's deadlines itself
/// (timer slack 1 ns, as a reaper asks for), while another thread wakes 1,000 times a
/// second as W6's producer does. No engine can fire on time more often than its thread
/// wakes on time, short of spinning.
fn w6_floor() {
    let mut rng = SplitMix64(42);
    let count = W6_RATE_PER_S * W6_SPAN.as_secs() as u32;
    let start = Instant::now() + Duration::from_millis(1);
    let mut deadlines: Vec<Instant> = (0..count)
        .map(|i| start + W6_SPAN * i / count + Duration::from_micros(rng.between(1_000, 100_000)))
        .collect();
    deadlines.sort_unstable();
    let cpu_before = process_cpu();
    let sleeper = thread::spawn(move || {
        // SAFETY: `prctl(PR_SET_TIMERSLACK, 1)` sets the calling thread's timer slack; it
        // takes no pointer and touches no memory of ours.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        let probe = Probe::default();
        for deadline in deadlines {
            if let Some(wait) = deadline.checked_duration_since(Instant::now()) {
                thread::sleep(wait);
            }
            probe.record(deadline);
        }
        probe
    });
    for i in 0..count {
        let at = start + W6_SPAN * i / count;
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
    }
    let (cpu, wall) = (process_cpu() - cpu_before, start.elapsed());
    let probe = sleeper.join().expect("sleeper");
    w6_line("os-sleep-floor", &probe, "", cpu, wall);
}

fn main() {
    if let Ok(spec) = std::env::var("ENGINE_W1_COUNT") {
        return w1::w1_count(&spec);
    }
    if let Ok(spec) = std::env::var("ENGINE_W2_COUNT") {
        return w2_count(&spec);
    }
    let only = std::env::var("ENGINE_ONLY").unwrap_or_default();
    let runs = |workload: &str| only.is_empty() || only.split(',').any(|w| w.trim() == workload);
    println!("# load average at start: {}", load_average());
    if runs("W1") {
        w1::w1();
    }
    if runs("W2") {
        let ours = w2::<Shardwheel<true>>();
        w2::<Shardwheel<false>>();
        let theirs = w2::<TokioSleep>();
        println!(
            "RESULT W2 shardwheel schedule_vs_tokio-sleep={:.2}",
            ours / theirs
        );
    }
    if runs("W3") {
        w3::w3();
    }
    if runs("W3-slack") {
        w3::w3_slack();
    }
    if runs("W5") {
        w5::<Shardwheel<true>>();
        w5::<TokioSleep>();
    }
    if runs("W6") {
        w6::<Shardwheel>();
        w6::<Shardwheel<true, true, 1000, 0, 0, false>>();
        w6::<Shardwheel<true, false>>();
        w6::<Shardwheel<true, true, 100>>();
        w6::<Shardwheel<true, true, 1000, 200>>();
        w6::<TokioSleep>();
        w6_floor();
    }
    println!("# load average at end: {}", load_average());
}
