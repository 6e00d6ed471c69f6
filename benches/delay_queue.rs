//! shardwheel's `DelayQueue` beside tokio-util's, in one process (benches/README.md):
//!
//! - W1-style churn: P values pending (P = 1,000 and 100,000), then per iteration one
//!   insert with a delay uniform in [1 s, 10 s] and the remove of a uniformly chosen pending
//!   value; nothing comes out. The two queues take turns in segments; rates are medians of
//!   the segments, the ratio the median of the per-round ratios. Also: allocations per
//!   insert over the churn (a counting global allocator), which is 0 in steady state when
//!   a queue reuses its slots.
//! - W2-style expiry: N = 200,000 values with delays uniform in [0, 1 s] inserted at once,
//!   then taken out by a task awaiting the queue until it is empty: the insert rate, the
//!   lateness of each value (the time it came out minus its deadline), the wall time until
//!   the last, and that each came out once.
//!
//! Both run in a tokio current-thread runtime (tokio-util's queue needs one); shardwheel's
//! queue is on the process-wide timer. Run: `cargo bench --bench delay_queue`.

mod common;

use common::{SplitMix64, load_average, median, percentile};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The system allocator, counting allocations.
struct Counting;

/// Allocations so far (Relaxed: a count read on the same thread that makes them).
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call goes to the system allocator unchanged; the count is a plain atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What the bench needs of a queue.
trait Queue: Sized {
    type Key: Copy;
    const NAME: &'static str;
    fn make() -> Self;
    fn insert(&mut self, value: u64, delay: Duration) -> Self::Key;
    fn remove(&mut self, key: &Self::Key) -> u64;
    /// The next value out, with its deadline, or `None` when empty.
    async fn next(&mut self) -> Option<(u64, Instant)>;
}

impl Queue for shardwheel::delay_queue::DelayQueue<u64> {
    type Key = shardwheel::delay_queue::Key;
    const NAME: &'static str = Q1;

    fn make() -> Self {
        Self::new()
    }

    #[inline]
    fn insert(&mut self, value: u64, delay: Duration) -> Self::Key {
        Self::insert(self, value, delay)
    }

    #[inline]
    fn remove(&mut self, key: &Self::Key) -> u64 {
        Self::remove(self, key).into_inner()
    }

    async fn next(&mut self) -> Option<(u64, Instant)> {
        let expired = self.next_expired().await?;
        Some((*expired.get_ref(), expired.deadline()))
    }
}

impl Queue for tokio_util::time::DelayQueue<u64> {
    type Key = tokio_util::time::delay_queue::Key;
    const NAME: &'static str = Q2;

    fn make() -> Self {
        Self::new()
    }

    #[inline]
    fn insert(&mut self, value: u64, delay: Duration) -> Self::Key {
        Self::insert(self, value, delay)
    }

    #[inline]
    fn remove(&mut self, key: &Self::Key) -> u64 {
        Self::remove(self, key).into_inner()
    }

    async fn next(&mut self) -> Option<(u64, Instant)> {
        let expired = std::future::poll_fn(|cx| self.poll_expired(cx)).await?;
        Some((*expired.get_ref(), expired.deadline().into_std()))
    }
}

const ITERATIONS: usize = 1_000_000;
const SEGMENTS: usize = 10;

/// One queue's churn in progress.
struct Churn<Q: Queue> {
    queue: Q,
    keys: Vec<Q::Key>,
    rng: SplitMix64,
    rates: Vec<f64>,
    allocations: u64,
}

impl<Q: Queue> Churn<Q> {
    fn new(pending: usize) -> Self {
        let mut queue = Q::make();
        let mut rng = SplitMix64(42);
        let keys = (0..pending as u64)
            .map(|i| queue.insert(i, Duration::from_millis(rng.between(1_000, 10_000))))
            .collect();
        Churn {
            queue,
            keys,
            rng,
            rates: Vec::new(),
            allocations: 0,
        }
    }

    fn segment(&mut self, counted: bool) {
        let pending = self.keys.len() as u64;
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let start = Instant::now();
        for i in 0..(ITERATIONS / SEGMENTS) as u64 {
            let delay = Duration::from_millis(self.rng.between(1_000, 10_000));
            let fresh = self.queue.insert(i, delay);
            let victim = self.rng.between(0, pending - 1) as usize;
            let old = std::mem::replace(&mut self.keys[victim], fresh);
            black_box(self.queue.remove(&old));
        }
        let took = start.elapsed();
        if counted {
            self.allocations += ALLOCATIONS.load(Ordering::Relaxed) - before;
            self.rates
                .push((ITERATIONS / SEGMENTS) as f64 / took.as_secs_f64());
        }
    }
}

fn churn(pending: usize) {
    let mut ours = Churn::<shardwheel::delay_queue::DelayQueue<u64>>::new(pending);
    let mut theirs = Churn::<tokio_util::time::DelayQueue<u64>>::new(pending);
    // The first segment warms each queue up (its slots reach their steady number).
    for round in 0..=SEGMENTS {
        ours.segment(round > 0);
        theirs.segment(round > 0);
    }
    let inserts = (ITERATIONS / SEGMENTS * SEGMENTS) as f64;
    for (name, rates, allocations) in [
        (Q1, &ours.rates, ours.allocations),
        (Q2, &theirs.rates, theirs.allocations),
    ] {
        println!(
            "RESULT W1 P={pending} {name} iters_per_s={:.0} allocs_per_insert={:.3}",
            median(rates.clone()),
            allocations as f64 / inserts
        );
    }
    let paired = ours.rates.iter().zip(&theirs.rates).map(|(a, b)| a / b);
    println!(
        "RESULT W1 P={pending} {Q1} vs_{Q2}={:.2}",
        median(paired.collect())
    );
}

const Q1: &str = "shardwheel-delayqueue";
const Q2: &str = "tokio-delayqueue";

/// W2-style expiry for one queue: its insert rate, lateness p50/p99/max in microseconds,
/// wall time in milliseconds; checks that every value came out once.
async fn expiry<Q: Queue>(values: usize) -> f64 {
    let mut queue = Q::make();
    let mut rng = SplitMix64(42);
    let start = Instant::now();
    for i in 0..values as u64 {
        queue.insert(i, Duration::from_micros(rng.between(0, 1_000_000)));
    }
    let rate = values as f64 / start.elapsed().as_secs_f64();
    let mut seen = vec![false; values];
    let mut late = Vec::with_capacity(values);
    let mut early = 0;
    while let Some((value, deadline)) = queue.next().await {
        let now = Instant::now();
        early += usize::from(now < deadline);
        late.push(now.saturating_duration_since(deadline).as_micros() as u64);
        assert!(
            !std::mem::replace(&mut seen[value as usize], true),
            "out twice"
        );
    }
    let wall = start.elapsed();
    late.sort_unstable();
    println!(
        "RESULT W2 N={values} {} insert_per_s={rate:.0} late_p50_us={} late_p99_us={} late_max_us={} wall_ms={} early={early} exactly_once={}",
        Q::NAME,
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        late.last().copied().unwrap_or(0),
        wall.as_millis(),
        seen.iter().all(|&s| s),
    );
    rate
}

fn main() {
    println!("# load average at start: {}", load_average());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        for pending in [1_000, 100_000] {
            churn(pending);
        }
        let values = 200_000;
        let ours = expiry::<shardwheel::delay_queue::DelayQueue<u64>>(values).await;
        let theirs = expiry::<tokio_util::time::DelayQueue<u64>>(values).await;
        println!(
            "RESULT W2 N={values} {Q1} insert_vs_{Q2}={:.2}",
            ours / theirs
        );
    });
    println!("# load average at end: {}", load_average());
}
