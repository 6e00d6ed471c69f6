//! Timeouts as async code uses them, inside a tokio multi-thread runtime with 2 workers:
//! the async workloads of benches/README.md, made of tasks.
//!
//! - **W3-async**: W3 made of tasks. 256 tasks each run 4,000 requests under a timeout of
//!   uniform [100 ms, 10 s]; the request's work yields once (so the timeout has to register
//!   its timer) and then finishes, which cancels the timer. One request in 1,000 never
//!   finishes and is ended by a 1 ms timeout: those fire, and any that ends early is
//!   counted (`early=`; Pingora's can, as it truncates the deadline to the millisecond
//!   before it rounds up to 10 ms). Figures: requests per second, lateness of the
//!   timed-out requests.
//! - **W7**: T = 64 tasks (and T = 1) each run 100,000 operations `timeout(10 s, work)`.
//!   `mode=ready`: the work is ready at once, so no timer needs to exist: this measures what
//!   a timeout costs when it is not used. `mode=yield1`: the work yields once, then
//!   completes: the timer is registered at the first `Pending` and cancelled by the drop, the
//!   common case of a request that beats its timeout. Figure: operations per second.
//!
//! Implementations: `shardwheel::timeout` (on the process-wide `Timer::global()`, default
//! shards; `Timer::timeout` on a timer the program owns also counts a reference to it per
//! timeout, which makes `mode=ready` several times dearer), `shardwheel::time::timeout`
//! (tokio's shape of the same: `shardwheel-time`, which must cost no more),
//! `pingora_timeout::timeout` (registers lazily, rounds to 10 ms, on a global
//! timer), tokio's `tokio::time::timeout`, the same on a runtime with tokio's alternative
//! timer (`tokio-alt-timeout`: `Builder::enable_alt_timer`, per-worker wheels; tokio builds
//! it only under `--cfg tokio_unstable`, so this peer is there only in a bench built with
//! `RUSTFLAGS="--cfg tokio_unstable"`, see benches/README.md), no timeout at all (the
//! runtime's own cost of the same tasks: the floor), and, in W7 only, `waker-and-clock`: no
//! timer, only what any timeout does at its first `Pending` whatever its timer (a clone of
//! the task's waker, dropped at the end, and one `rdtsc`), so that its time over the floor
//! splits shardwheel's into what no timer can leave out and the timer's own work
//! (`over_parts_ns`), and `thread-wheel`: the same with a `Wheel` of each worker's own, the
//! least a timer with a wheel per worker costs (`over_wheel_ns`; see futures/thread_wheel.rs).
//! They take turns over rounds in one process, the first in a round rotating; a first round
//! warms the allocator and the runtime and is not counted.
//! Rates (`ops_per_s`, timed from the first task's start to the last task's end) are
//! medians over the rounds, ratios (`vs_<peer>`, of rates) medians of per-round ratios, so
//! that a change of load between rounds moves both sides of a ratio. A round's two turns
//! are compared only if other processes took about as much CPU during both (within a
//! quarter of a core, beyond the kernel's tick counts' error; `unpaired=` counts the pairs
//! left out): each round prints its load average and that CPU per turn as a comment.
//! `over_floor_ns` is what a timeout adds to the floor's time per operation (1e9 /
//! `ops_per_s`), the median over the same rounds. `cpu_ns_per_op` is the
//! CPU time of the whole process per operation (Linux; all threads: the workers, shardwheel's
//! reapers, Pingora's clock thread), another view of the same rounds: on a loaded machine
//! an implementation with more threads gets a larger share of the cores, which a rate
//! does not show. It moves with the load too (reapers that find cores idle make more,
//! smaller passes; workers spin a while before they park).
//!
//! Ratios against tokio move with the load: each `tokio::time::timeout` clones the
//! runtime's handle (an `Arc` both workers count on), so when both workers run at once,
//! as on a quiet machine, its cost per operation grows several times (W7 T = 64 ready:
//! about 220 ns of CPU quiet, 50-70 ns with other processes on the cores). Quote the
//! load with the figures.
//!
//! Checks, not timed: every operation completed with its own output, on every
//! implementation. For shardwheel the bench also reads the timers its reapers took in
//! (`timers=`, from `Timer::stats`, once they are quiet): none in `mode=ready`, some in
//! `mode=yield1` (a timeout that did not register its timer would measure nothing).
//! `thread-wheel` counts the timeouts that ended on another worker than the one that armed
//! them (`moved=`, a round's median): tasks tokio moved between their two polls.
//!
//! Run: `cargo bench --bench futures` (about a minute on 2 cores); prints RESULT lines and
//! the load average at start and end. `FUTURES_PARTS=W7:64:yield1,W3-async` runs some
//! parts only: a part is `W3-async` or `W7:<T>:<mode>`, and a prefix (`W7`, `W7:64`)
//! selects every part under it. `FUTURES_ONLY=shardwheel` (say) runs one implementation,
//! for a profiler (no ratios then). `FUTURES_COUNT`: W7 for an instruction count (`count`).

mod common;
#[path = "futures/count.rs"]
mod count;
#[path = "futures/ratios.rs"]
mod ratios;
#[path = "futures/thread_wheel.rs"]
mod thread_wheel;
#[path = "futures/timeouts.rs"]
mod timeouts;

use common::cpu::{Others, process_cpu};
use common::{SplitMix64, load_average, median, percentile};
use mimalloc::MiMalloc;
use std::future::{Future, pending};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thread_wheel::ThreadWheel;
#[cfg(tokio_unstable)]
use timeouts::TokioAltTimeout;
use timeouts::{
    NoTimeout, PingoraTimeout, Shardwheel, ShardwheelTime, Timeouts, TokioTimeout, WakerAndClock,
};
use tokio::runtime::Runtime;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// Rounds counted per part, after the warm-up round; odd, so that a median is a round's.
const ROUNDS: usize = 7;
/// At T = 1 a round is 100,000 operations, under a millisecond (ready) or under 0.1 s
/// (yield1): more of them, for a steady median.
const ROUNDS_ONE_TASK: usize = 21;

/// The implementations, in the order their lines are printed; shardwheel first.
#[derive(Clone, Copy, PartialEq)]
enum Impl {
    Shardwheel,
    ShardwheelTime,
    Pingora,
    Tokio,
    #[cfg(tokio_unstable)]
    TokioAlt,
    None,
    WakerAndClock,
    ThreadWheel,
}

impl Impl {
    const ALL: &[Impl] = &[
        Impl::Shardwheel,
        Impl::ShardwheelTime,
        Impl::Pingora,
        Impl::Tokio,
        #[cfg(tokio_unstable)]
        Impl::TokioAlt,
        Impl::None,
        Impl::WakerAndClock,
        Impl::ThreadWheel,
    ];

    fn name(self) -> &'static str {
        match self {
            Impl::Shardwheel => Shardwheel::NAME,
            Impl::ShardwheelTime => ShardwheelTime::NAME,
            Impl::Pingora => PingoraTimeout::NAME,
            Impl::Tokio => TokioTimeout::NAME,
            #[cfg(tokio_unstable)]
            Impl::TokioAlt => TokioAltTimeout::NAME,
            Impl::None => NoTimeout::NAME,
            Impl::WakerAndClock => WakerAndClock::NAME,
            Impl::ThreadWheel => ThreadWheel::NAME,
        }
    }

    fn round<W: Workload>(self, runtimes: &Runtimes, workload: W) -> Round<W::Outcome> {
        let runtime = &runtimes.default;
        match self {
            Impl::Shardwheel => round::<Shardwheel, W>(runtime, workload),
            Impl::ShardwheelTime => round::<ShardwheelTime, W>(runtime, workload),
            Impl::Pingora => round::<PingoraTimeout, W>(runtime, workload),
            Impl::Tokio => round::<TokioTimeout, W>(runtime, workload),
            #[cfg(tokio_unstable)]
            Impl::TokioAlt => round::<TokioAltTimeout, W>(&runtimes.alt, workload),
            Impl::None => round::<NoTimeout, W>(runtime, workload),
            Impl::WakerAndClock => round::<WakerAndClock, W>(runtime, workload),
            Impl::ThreadWheel => round::<ThreadWheel, W>(runtime, workload),
        }
    }
}

/// The runtimes the implementations run on, each with 2 workers: tokio's default timer's,
/// where all but one run, and, built with `--cfg tokio_unstable`, one with tokio's
/// alternative timer for its peer. The idle one's workers stay parked.
struct Runtimes {
    default: Runtime,
    #[cfg(tokio_unstable)]
    alt: Runtime,
}

impl Runtimes {
    fn new() -> Self {
        let build = |alt: bool| {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(2).enable_time();
            #[cfg(tokio_unstable)]
            if alt {
                builder.enable_alt_timer();
            }
            #[cfg(not(tokio_unstable))]
            let _ = alt;
            builder.build().expect("runtime")
        };
        Runtimes {
            default: build(false),
            #[cfg(tokio_unstable)]
            alt: build(true),
        }
    }
}

/// What the tasks of a round do.
trait Workload: Copy + Send + 'static {
    /// What one task hands back, for the checks and the report.
    type Outcome: Send + 'static;

    fn tasks(self) -> u64;

    /// Operations in a round, over all its tasks.
    fn operations(self) -> u64;

    /// Task number `task`'s work, on `timeouts`.
    fn task<T: Timeouts>(
        self,
        timeouts: Arc<T>,
        task: u64,
    ) -> impl Future<Output = Self::Outcome> + Send + 'static;
}

/// What one round of one implementation measured.
struct Round<O> {
    per_s: f64,
    /// CPU time of the whole process (workers, reapers, a peer's clock thread) per
    /// operation (see the module doc).
    cpu_ns_per_op: f64,
    outcomes: Vec<O>,
    timers: Option<u64>,
    moved: Option<u64>,
    /// Cores' worth of CPU other processes used during the round, and that figure's
    /// error (see `Others`).
    others: f64,
    others_resolution: f64,
}

/// Spawns the workload's tasks on `runtime` and waits for them all. The rate counts from
/// the first task's start to the last task's end: a T = 1 round of ready operations takes
/// well under a millisecond, of which waking a worker for the spawn would be a good part.
fn round<T: Timeouts, W: Workload>(runtime: &Runtime, workload: W) -> Round<W::Outcome> {
    let timeouts = Arc::new(T::new());
    let others = Others::start();
    let cpu = process_cpu();
    let tasks: Vec<_> = (0..workload.tasks())
        .map(|task| {
            let work = workload.task(Arc::clone(&timeouts), task);
            runtime.spawn(async move {
                let start = Instant::now();
                let outcome = work.await;
                (start, Instant::now(), outcome)
            })
        })
        .collect();
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    let outcomes = runtime.block_on(async {
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            let (start, end, outcome) = task.await.expect("task");
            first = Some(first.map_or(start, |first| first.min(start)));
            last = Some(last.map_or(end, |last| last.max(end)));
            outcomes.push(outcome);
        }
        outcomes
    });
    let elapsed = last.expect("tasks") - first.expect("tasks");
    let cpu = process_cpu() - cpu;
    let (others, others_resolution) = (others.cores(), others.resolution());
    Round {
        per_s: workload.operations() as f64 / elapsed.as_secs_f64(),
        cpu_ns_per_op: cpu.as_nanos() as f64 / workload.operations() as f64,
        outcomes,
        timers: timeouts.timers(),
        moved: timeouts.moved(),
        others,
        others_resolution,
    }
}

/// One part's rounds, per implementation.
struct Measured<O>(Vec<(Impl, Vec<Round<O>>)>);

/// Runs `workload` on `impls`, taking turns over `rounds` counted rounds (after a warm-up
/// round); the implementation that goes first rotates from round to round. Prints, as a
/// comment, each counted round's load average at its start and the CPU other processes
/// took during each implementation's turn (in cores).
fn measure<W: Workload>(
    runtimes: &Runtimes,
    label: &str,
    workload: W,
    impls: &[Impl],
    rounds: usize,
) -> Measured<W::Outcome> {
    let mut measured: Vec<_> = impls.iter().map(|&i| (i, Vec::new())).collect();
    for r in 0..=rounds {
        let load = load_average();
        for k in 0..measured.len() {
            let (implementation, done) = &mut measured[(r + k) % impls.len()];
            let round = implementation.round(runtimes, workload);
            if r > 0 {
                done.push(round);
            }
        }
        if r > 0 {
            let others: Vec<String> = measured
                .iter()
                .map(|(i, done)| format!("{} {:.2}", i.name(), done[r - 1].others))
                .collect();
            let load = load.split(' ').next().unwrap_or("?");
            println!(
                "# {label} round {r}: load average {load}, other processes' cores: {}",
                others.join(", ")
            );
        }
    }
    Measured(measured)
}

/// W3-async: requests under random timeouts, one in 1,000 stuck until a 1 ms timeout.
#[derive(Clone, Copy)]
struct W3Async;

const W3_TASKS: u64 = 256;
const W3_REQUESTS_PER_TASK: u64 = 4_000;
/// One request in this many never finishes and times out.
const STUCK_EVERY: u64 = 1_000;
const STUCK_TIMEOUT: Duration = Duration::from_millis(1);

/// A W3-async task's timed-out requests: microseconds past the limit of those that ended
/// late or on time, and how many ended early.
struct Stuck {
    late_us: Vec<u64>,
    early: usize,
}

impl Workload for W3Async {
    type Outcome = Stuck;

    fn tasks(self) -> u64 {
        W3_TASKS
    }

    fn operations(self) -> u64 {
        W3_TASKS * W3_REQUESTS_PER_TASK
    }

    async fn task<T: Timeouts>(self, timeouts: Arc<T>, task: u64) -> Stuck {
        let mut random = SplitMix64(42 + task);
        let mut stuck = Stuck {
            late_us: Vec::new(),
            early: 0,
        };
        for request in 0..W3_REQUESTS_PER_TASK {
            if request % STUCK_EVERY == STUCK_EVERY - 1 && T::NAME != NoTimeout::NAME {
                let started = Instant::now();
                let outcome = timeouts.timeout(STUCK_TIMEOUT, pending::<()>()).await;
                assert!(outcome.is_none());
                match started.elapsed().checked_sub(STUCK_TIMEOUT) {
                    Some(late) => stuck.late_us.push(late.as_micros() as u64),
                    None => stuck.early += 1,
                }
                continue;
            }
            let limit = Duration::from_millis(random.between(100, 10_000));
            let work = async {
                tokio::task::yield_now().await;
                request
            };
            assert_eq!(timeouts.timeout(limit, work).await, Some(request));
        }
        stuck
    }
}

fn w3_async(runtimes: &Runtimes, impls: &[Impl]) {
    let label = "W3-async T=2";
    // `waker-and-clock` and `thread-wheel` never fire: their stuck requests would never
    // end.
    let impls: Vec<Impl> = impls
        .iter()
        .copied()
        .filter(|&i| !matches!(i, Impl::WakerAndClock | Impl::ThreadWheel))
        .collect();
    let measured = measure(runtimes, label, W3Async, &impls, ROUNDS);
    for (implementation, rounds) in measured.each() {
        let mut late: Vec<u64> = rounds
            .iter()
            .flat_map(|r| r.outcomes.iter().flat_map(|s| s.late_us.iter().copied()))
            .collect();
        late.sort_unstable();
        let early: usize = rounds
            .iter()
            .flat_map(|r| r.outcomes.iter().map(|s| s.early))
            .sum();
        println!(
            "RESULT {label} {} requests_{} timed_out={} late_p50_us={} late_p99_us={} late_max_us={} early={early}",
            implementation.name(),
            Measured::rate(rounds),
            late.len(),
            percentile(&late, 0.5),
            percentile(&late, 0.99),
            late.last().copied().unwrap_or(0),
        );
    }
    measured.print_ratios(label);
}

/// W7: `timeout(10 s, work)` in a loop, the work ready at once or after one yield.
#[derive(Clone, Copy)]
struct W7 {
    tasks: u64,
    yield1: bool,
}

const W7_OPERATIONS_PER_TASK: u64 = 100_000;
const W7_LIMIT: Duration = Duration::from_secs(10);

impl W7 {
    fn mode(self) -> &'static str {
        if self.yield1 { "yield1" } else { "ready" }
    }
}

impl Workload for W7 {
    /// Operations that completed with their own output.
    type Outcome = u64;

    fn tasks(self) -> u64 {
        self.tasks
    }

    fn operations(self) -> u64 {
        self.tasks * W7_OPERATIONS_PER_TASK
    }

    async fn task<T: Timeouts>(self, timeouts: Arc<T>, _task: u64) -> u64 {
        let mut completed = 0;
        for op in 0..W7_OPERATIONS_PER_TASK {
            // `black_box`: the floor's loop is not folded away.
            let output = if self.yield1 {
                let work = async move {
                    tokio::task::yield_now().await;
                    black_box(op)
                };
                timeouts.timeout(W7_LIMIT, work).await
            } else {
                timeouts
                    .timeout(W7_LIMIT, async move { black_box(op) })
                    .await
            };
            completed += u64::from(output == Some(op));
        }
        completed
    }
}

fn w7(runtimes: &Runtimes, workload: W7, impls: &[Impl]) {
    let label = format!("W7 T={} mode={}", workload.tasks, workload.mode());
    let rounds = if workload.tasks == 1 {
        ROUNDS_ONE_TASK
    } else {
        ROUNDS
    };
    let measured = measure(runtimes, &label, workload, impls, rounds);
    for (implementation, rounds) in measured.each() {
        let name = implementation.name();
        for round in rounds {
            let completed: u64 = round.outcomes.iter().sum();
            assert_eq!(completed, workload.operations(), "{name}");
            if let Some(count) = round.timers {
                // A ready future needs no timer; a yield must have registered some.
                assert_eq!(count == 0, !workload.yield1, "{name}");
            }
        }
        let timers = median_count("timers", rounds.iter().filter_map(|round| round.timers));
        let moved = median_count("moved", rounds.iter().filter_map(|round| round.moved));
        println!(
            "RESULT {label} {name} ops_{} ops={}{timers}{moved}",
            Measured::rate(rounds),
            workload.operations(),
        );
    }
    measured.print_ratios(&label);
}

/// ` name=<the median of counts>`, or nothing if there are none.
fn median_count(name: &str, counts: impl Iterator<Item = u64>) -> String {
    let counts: Vec<f64> = counts.map(|count| count as f64).collect();
    if counts.is_empty() {
        String::new()
    } else {
        format!(" {name}={:.0}", median(counts))
    }
}

fn main() {
    if let Ok(spec) = std::env::var("FUTURES_COUNT") {
        return count::count(&spec);
    }
    let started = Instant::now();
    println!("# load average at start: {}", load_average());
    let runtimes = Runtimes::new();
    let only = std::env::var("FUTURES_ONLY").unwrap_or_default();
    let impls: Vec<Impl> = Impl::ALL
        .iter()
        .copied()
        .filter(|i| only.is_empty() || only == i.name())
        .collect();
    assert!(
        !impls.is_empty(),
        "FUTURES_ONLY={only}: no such implementation"
    );
    let parts = std::env::var("FUTURES_PARTS").unwrap_or_default();
    let runs = |part: &str| {
        parts.is_empty()
            || parts
                .split(',')
                .any(|p| part == p || part.starts_with(&format!("{p}:")))
    };
    if runs("W3-async") {
        w3_async(&runtimes, &impls);
    }
    for tasks in [64, 1] {
        for yield1 in [false, true] {
            let workload = W7 { tasks, yield1 };
            if runs(&format!("W7:{tasks}:{}", workload.mode())) {
                w7(&runtimes, workload, &impls);
            }
        }
    }
    println!("# load average at end: {}", load_average());
    println!("# took {:.0} s", started.elapsed().as_secs_f64());
}
