//! Timeouts as async code uses them, inside a tokio runtime: W3 of ../shared/WORKLOADS.md
//! made of tasks. Each task runs request after request under a timeout of uniform [100 ms,
//! 10 s]; the request's work yields once (so the timeout has to register its timer) and
//! then finishes, which cancels the timer. One request in 1,000 never finishes and is ended
//! by a 1 ms timeout: those fire, and are checked never to end early.
//!
//! Implementations: shardwheel's `Timer::timeout`, tokio's `tokio::time::timeout`, and no
//! timeout at all (the runtime's own cost of the same tasks, for scale). They take turns
//! over rounds, in one process; ratios are medians of per-round ratios.
//!
//! `cargo bench --bench futures`; prints RESULT lines.

mod common;

use common::{SplitMix64, load_average, median, percentile};
use mimalloc::MiMalloc;
use shardwheel::Timer;
use std::future::{Future, pending};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

const TASKS: u64 = 256;
const REQUESTS_PER_TASK: u64 = 4_000;
const ROUNDS: usize = 5;
/// One request in this many never finishes and times out.
const STUCK_EVERY: u64 = 1_000;
const STUCK_TIMEOUT: Duration = Duration::from_millis(1);

/// A way to put a timeout on a future.
trait Timeouts: Send + Sync + 'static {
    const NAME: &'static str;

    fn new() -> Self;

    /// `Some(output)` if `work` finished within `limit`, `None` if the limit came first.
    fn timeout<F: Future + Send>(
        &self,
        limit: Duration,
        work: F,
    ) -> impl Future<Output = Option<F::Output>> + Send;
}

struct Shardwheel(Timer);

impl Timeouts for Shardwheel {
    const NAME: &'static str = "shardwheel";

    fn new() -> Self {
        Shardwheel(Timer::builder().build().expect("timer"))
    }

    async fn timeout<F: Future + Send>(&self, limit: Duration, work: F) -> Option<F::Output> {
        self.0.timeout(limit, work).await.ok()
    }
}

struct TokioTimeout;

impl Timeouts for TokioTimeout {
    const NAME: &'static str = "tokio-timeout";

    fn new() -> Self {
        TokioTimeout
    }

    async fn timeout<F: Future + Send>(&self, limit: Duration, work: F) -> Option<F::Output> {
        tokio::time::timeout(limit, work).await.ok()
    }
}

/// The same tasks with no timeout: what the runtime itself costs.
struct NoTimeout;

impl Timeouts for NoTimeout {
    const NAME: &'static str = "no-timeout";

    fn new() -> Self {
        NoTimeout
    }

    async fn timeout<F: Future + Send>(&self, _limit: Duration, work: F) -> Option<F::Output> {
        Some(work.await)
    }
}

/// What one round of one implementation measured.
struct Round {
    requests_per_s: f64,
    /// Microseconds past the limit, of the requests that timed out.
    late_us: Vec<u64>,
    early: usize,
}

fn round<T: Timeouts>(runtime: &tokio::runtime::Runtime, round: usize) -> Round {
    let timeouts = Arc::new(T::new());
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let timeouts = Arc::clone(&timeouts);
            runtime.spawn(async move {
                let mut random = SplitMix64(42 + task);
                let (mut late_us, mut early) = (Vec::new(), 0);
                for request in 0..REQUESTS_PER_TASK {
                    if request % STUCK_EVERY == STUCK_EVERY - 1 && T::NAME != NoTimeout::NAME {
                        let started = Instant::now();
                        let outcome = timeouts.timeout(STUCK_TIMEOUT, pending::<()>()).await;
                        assert!(outcome.is_none());
                        match started.elapsed().checked_sub(STUCK_TIMEOUT) {
                            Some(late) => late_us.push(late.as_micros() as u64),
                            None => early += 1,
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
                (late_us, early)
            })
        })
        .collect();
    let (late_us, early) = runtime.block_on(async {
        let (mut all, mut early) = (Vec::new(), 0);
        for task in tasks {
            let (late, e) = task.await.expect("task");
            all.extend(late);
            early += e;
        }
        (all, early)
    });
    let rate = (TASKS * REQUESTS_PER_TASK) as f64 / start.elapsed().as_secs_f64();
    Round {
        // A first round warms the allocator and the runtime; it is not counted.
        requests_per_s: if round == 0 { f64::NAN } else { rate },
        late_us,
        early,
    }
}

fn report(name: &str, rounds: &[Round]) -> f64 {
    let rate = median(
        rounds
            .iter()
            .map(|r| r.requests_per_s)
            .filter(|r| !r.is_nan())
            .collect(),
    );
    let mut late: Vec<u64> = rounds.iter().flat_map(|r| r.late_us.clone()).collect();
    late.sort_unstable();
    let early: usize = rounds.iter().map(|r| r.early).sum();
    println!(
        "RESULT W3-async T=2 {name} requests_per_s={rate:.0} timed_out={} late_p50_us={} late_p99_us={} late_max_us={} early={early}",
        late.len(),
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        late.last().copied().unwrap_or(0),
    );
    rate
}

fn main() {
    println!("# load average at start: {}", load_average());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    // FUTURES_ONLY=shardwheel (say) runs one implementation, for a profiler.
    let only = std::env::var("FUTURES_ONLY").unwrap_or_default();
    let runs = |name: &str| only.is_empty() || only == name;
    let (mut ours, mut tokio, mut none) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..=ROUNDS {
        if runs(Shardwheel::NAME) {
            ours.push(round::<Shardwheel>(&runtime, r));
        }
        if runs(TokioTimeout::NAME) {
            tokio.push(round::<TokioTimeout>(&runtime, r));
        }
        if runs(NoTimeout::NAME) {
            none.push(round::<NoTimeout>(&runtime, r));
        }
    }
    for (name, rounds) in [
        (Shardwheel::NAME, &ours),
        (TokioTimeout::NAME, &tokio),
        (NoTimeout::NAME, &none),
    ] {
        if !rounds.is_empty() {
            report(name, rounds);
        }
    }
    if !only.is_empty() {
        return;
    }
    let ratio = median(
        ours.iter()
            .zip(&tokio)
            .skip(1)
            .map(|(a, b)| a.requests_per_s / b.requests_per_s)
            .collect(),
    );
    println!("RESULT W3-async T=2 shardwheel vs_tokio-timeout={ratio:.2}");
    println!("# load average at end: {}", load_average());
}
