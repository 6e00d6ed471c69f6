//! A worker's counts and lateness, in the engine's `Stats` style.
//!
//! Counters are atomics bumped by the worker's tasks; the lateness histogram (nanoseconds,
//! two significant digits, as the engine's) sits behind a mutex that only the dispatching
//! task and readers of [`Stats`] take. Lateness is measured on the server's clock: a claim
//! reply carries the server's `TIME`, read somewhere between the moment the request left and
//! the moment the reply came back, which brackets the server's clock at any later local
//! instant. The recorded lateness is the upper end of that bracket (it counts the claim's
//! round trip against us); a job counts as `early` only if even the lower end says it
//! started before its due time.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

/// What a worker has done so far; [`Worker::stats`](crate::Worker::stats) takes a snapshot.
///
/// ```no_run
/// # async fn run(worker: shardwheel_redis::Worker) {
/// let stats = worker.stats();
/// println!("{} delivered, p99 {:?} late", stats.delivered, stats.lateness(0.99));
/// println!("{stats}");
/// # }
/// ```
#[derive(Clone)]
pub struct Stats {
    /// Jobs claimed from Redis into the local timer.
    pub claimed: u64,
    /// Handler runs started.
    pub delivered: u64,
    /// Runs acknowledged (the job is gone from Redis).
    pub acked: u64,
    /// Acks, fails or releases refused: the lease had expired and been taken back, or the
    /// job was cancelled or rescheduled meanwhile (another run may happen or have happened).
    pub refused: u64,
    /// Runs that failed (an error or a panic) and were scheduled again with backoff.
    pub retried: u64,
    /// Runs that failed on their last attempt: the job went to the dead-letter set.
    pub dead_lettered: u64,
    /// Claims given back unrun (graceful stop).
    pub released: u64,
    /// Claimed jobs not run because, when they came due, the store no longer held them under
    /// this worker's claim with a live lease: cancelled, rescheduled or taken back meanwhile,
    /// or its lease expired (the start check).
    pub revoked: u64,
    /// Start checks sent: one for the jobs fired in one instant (with a check ahead, within
    /// a tenth of it, at most 25 ms), one `start.lua` call per shard among them.
    pub checks: u64,
    /// Start checks sent while earlier ones were still awaited (a worker has at most four
    /// out at once): jobs that fired during a check did not wait for its reply.
    pub checks_overlapped: u64,
    /// Expired leases (of any worker) this worker's claims took back.
    pub reaped: u64,
    /// Runs that started before their due time by the server's clock, as far as the claim's
    /// round trip can tell: 0 unless a clock jumps.
    pub early: u64,
    /// Lease extensions made for handlers still running (see
    /// [`WorkerBuilder::extend_for`](crate::WorkerBuilder::extend_for)).
    pub extended: u64,
    /// Wake-up hints heard (a job due within a second was scheduled): each starts a claim
    /// round before the next poll.
    pub woken: u64,
    /// Redis calls that failed (each is retried later or left to the lease); each is also a
    /// `tracing` warning naming the call and the error.
    pub errors: u64,
    /// Jobs held in the local timer, waiting for their due time.
    pub held: u64,
    lateness: Histogram<u64>,
}

impl Stats {
    /// How late runs started, at `quantile` (0.0 to 1.0; 0.99 is p99, 1.0 the maximum): the
    /// server's time at the start of the handler minus the due time, to within 1 % (an upper
    /// bound: it includes the claim's round trip). Zero when nothing ran.
    ///
    /// ```no_run
    /// # fn run(worker: &shardwheel_redis::Worker) {
    /// let stats = worker.stats();
    /// let (p50, p99) = (stats.lateness(0.5), stats.lateness(0.99));
    /// # }
    /// ```
    pub fn lateness(&self, quantile: f64) -> Duration {
        Duration::from_nanos(self.lateness.value_at_quantile(quantile.clamp(0.0, 1.0)))
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "claimed={} delivered={} acked={} refused={} retried={} dead_lettered={} \
             released={} revoked={} checks={} checks_overlapped={} reaped={} early={} extended={} woken={} errors={} held={} late_p50={:?} \
             late_p99={:?} late_max={:?}",
            self.claimed,
            self.delivered,
            self.acked,
            self.refused,
            self.retried,
            self.dead_lettered,
            self.released,
            self.revoked,
            self.checks,
            self.checks_overlapped,
            self.reaped,
            self.early,
            self.extended,
            self.woken,
            self.errors,
            self.held,
            self.lateness(0.5),
            self.lateness(0.99),
            self.lateness(1.0),
        )
    }
}

impl fmt::Debug for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The live counters behind [`Stats`]. Relaxed everywhere: each counter is read on its own
/// for reporting, and no other memory is published through them.
#[derive(Default)]
pub(crate) struct Counters {
    pub claimed: AtomicU64,
    pub delivered: AtomicU64,
    pub acked: AtomicU64,
    pub refused: AtomicU64,
    pub retried: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub released: AtomicU64,
    pub revoked: AtomicU64,
    pub checks: AtomicU64,
    pub checks_overlapped: AtomicU64,
    pub reaped: AtomicU64,
    pub early: AtomicU64,
    pub extended: AtomicU64,
    pub woken: AtomicU64,
    pub errors: AtomicU64,
    pub held: AtomicU64,
    lateness: Mutex<Option<Histogram<u64>>>,
}

fn histogram() -> Histogram<u64> {
    // One hour at two significant digits; larger values saturate at the top.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 2).expect("constant bounds are valid")
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a failed Redis call of the worker and reports it as a `tracing` warning.
    pub(crate) fn error(&self, call: &str, error: &dyn fmt::Display) {
        Self::add(&self.errors, 1);
        tracing::warn!(call, %error, "shardwheel-redis worker: a redis call failed");
    }

    pub(crate) fn record_lateness(&self, late: Duration) {
        let nanos = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
        let mut lateness = self.lateness.lock().unwrap_or_else(|e| e.into_inner());
        lateness
            .get_or_insert_with(histogram)
            .saturating_record(nanos.max(1));
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let lateness = self
            .lateness
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(histogram);
        Stats {
            claimed: get(&self.claimed),
            delivered: get(&self.delivered),
            acked: get(&self.acked),
            refused: get(&self.refused),
            retried: get(&self.retried),
            dead_lettered: get(&self.dead_lettered),
            released: get(&self.released),
            revoked: get(&self.revoked),
            checks: get(&self.checks),
            checks_overlapped: get(&self.checks_overlapped),
            reaped: get(&self.reaped),
            early: get(&self.early),
            extended: get(&self.extended),
            woken: get(&self.woken),
            errors: get(&self.errors),
            held: get(&self.held),
            lateness,
        }
    }
}
