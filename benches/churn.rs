//! W1 (churn: schedule + cancel at a steady pending count) and W4 (memory per pending
//! timer) of benches/README.md, for shardwheel's `Wheel` and its peers, in one process.
//!
//! Peers, each driven through its own API the way a user would:
//! - `shardwheel`: `Wheel<u64>`, deadlines in 1 ms ticks from the wheel's current tick.
//! - `tokio-delayqueue`: tokio-util's `DelayQueue<u64>` (it reads tokio's clock on every
//!   insert: that is its API), inside a current-thread runtime with time enabled.
//! - `binaryheap`: std `BinaryHeap` of (deadline, id) with lazy cancellation: the values
//!   live in a std `HashMap` by id, cancel removes the value (and hands it back, as the
//!   others do), and the heap entry stays until it would fire. It never reclaims heap
//!   entries of cancelled timers.
//!
//! Run: `cargo bench --bench churn`. `CHURN_PENDING=1000,100000` picks the P values,
//! `CHURN_SKIP_W4=1` skips W4. Prints one `RESULT` line per figure.

mod common;

use common::{SplitMix64, load_average, median, status_bytes};
use mimalloc::MiMalloc;
use shardwheel::{Key, Wheel};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hint::black_box;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// What W1 needs of a timer structure.
trait Timers {
    type Handle: Copy;
    const NAME: &'static str;
    fn schedule(&mut self, delay_ms: u64, value: u64) -> Self::Handle;
    fn cancel(&mut self, handle: Self::Handle) -> Option<u64>;
}

impl Timers for Wheel<u64> {
    type Handle = Key;
    const NAME: &'static str = "shardwheel";

    #[inline]
    fn schedule(&mut self, delay_ms: u64, value: u64) -> Key {
        self.insert(self.now() + delay_ms, value)
    }

    #[inline]
    fn cancel(&mut self, key: Key) -> Option<u64> {
        Wheel::cancel(self, key)
    }
}

impl Timers for tokio_util::time::DelayQueue<u64> {
    type Handle = tokio_util::time::delay_queue::Key;
    const NAME: &'static str = "tokio-delayqueue";

    #[inline]
    fn schedule(&mut self, delay_ms: u64, value: u64) -> Self::Handle {
        self.insert(value, Duration::from_millis(delay_ms))
    }

    #[inline]
    fn cancel(&mut self, key: Self::Handle) -> Option<u64> {
        self.try_remove(&key).map(|expired| expired.into_inner())
    }
}

#[derive(Default)]
struct LazyHeap {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    values: HashMap<u64, u64>,
    next_id: u64,
}

impl Timers for LazyHeap {
    type Handle = u64;
    const NAME: &'static str = "binaryheap";

    #[inline]
    fn schedule(&mut self, delay_ms: u64, value: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let deadline = Instant::now() + Duration::from_millis(delay_ms);
        self.heap.push(Reverse((deadline, id)));
        self.values.insert(id, value);
        id
    }

    #[inline]
    fn cancel(&mut self, id: u64) -> Option<u64> {
        self.values.remove(&id)
    }
}

const ITERATIONS: usize = 2_000_000;
const TIME_BOUND: Duration = Duration::from_secs(5);
/// The iterations are run in segments, the implementations taking turns, so that a
/// change in the machine's speed (it is shared and noisy: its memory bandwidth and L3 swing
/// by 2x within seconds here) hits all of them alike. Rates are medians of the segments;
/// ratios are medians of the per-round ratios, each taken between segments run side by side.
const SEGMENTS: usize = 16;

/// One implementation's W1 in progress: P timers pending, a handle for each.
struct Churn<T: Timers> {
    timers: T,
    handles: Vec<T::Handle>,
    rng: SplitMix64,
    done: usize,
    busy: Duration,
    rates: Vec<f64>,
}

/// A W1 run of some implementation, so that runs of different types can take turns.
trait Segmented {
    fn name(&self) -> &'static str;
    /// Runs one segment unless the run is over; returns whether it ran.
    fn segment(&mut self) -> bool;
    /// Iterations per second of each segment run so far.
    fn rates(&self) -> &[f64];
}

impl<T: Timers> Churn<T> {
    fn new(mut timers: T, pending: usize) -> Self {
        let mut rng = SplitMix64(42);
        let handles = (0..pending)
            .map(|i| timers.schedule(rng.between(1_000, 60_000), i as u64))
            .collect();
        Churn {
            timers,
            handles,
            rng,
            done: 0,
            busy: Duration::ZERO,
            rates: Vec::new(),
        }
    }
}

impl<T: Timers> Segmented for Churn<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn segment(&mut self) -> bool {
        if self.done >= ITERATIONS || self.busy >= TIME_BOUND {
            return false;
        }
        let pending = self.handles.len() as u64;
        let start = Instant::now();
        for i in 0..ITERATIONS / SEGMENTS {
            let fresh = self.timers.schedule(self.rng.between(1, 60_000), i as u64);
            let victim = self.rng.between(0, pending - 1) as usize;
            let old = std::mem::replace(&mut self.handles[victim], fresh);
            let cancelled = self.timers.cancel(old);
            assert!(cancelled.is_some(), "{}: a pending timer was lost", T::NAME);
            black_box(cancelled);
        }
        let took = start.elapsed();
        self.busy += took;
        self.done += ITERATIONS / SEGMENTS;
        self.rates
            .push((ITERATIONS / SEGMENTS) as f64 / took.as_secs_f64());
        true
    }

    fn rates(&self) -> &[f64] {
        &self.rates
    }
}

/// W1 at pending count `pending` for every implementation, printing each one's rate and
/// shardwheel's ratio to each peer; returns the rates by name.
fn run_w1(pending: usize) -> Vec<(&'static str, f64)> {
    let mut runs: Vec<Box<dyn Segmented>> = vec![
        Box::new(Churn::new(Wheel::<u64>::new(), pending)),
        Box::new(Churn::new(
            tokio_util::time::DelayQueue::<u64>::new(),
            pending,
        )),
        Box::new(Churn::new(LazyHeap::default(), pending)),
    ];
    while runs.iter_mut().fold(false, |ran, run| run.segment() | ran) {}
    let rates: Vec<_> = runs
        .iter()
        .map(|run| (run.name(), median(run.rates().to_vec())))
        .collect();
    for (name, rate) in &rates {
        println!("RESULT W1 P={pending} {name} iters_per_s={rate:.0}");
    }
    let ours = runs[0].rates();
    let ratios: Vec<String> = runs[1..]
        .iter()
        .map(|peer| {
            let paired = ours.iter().zip(peer.rates()).map(|(a, b)| a / b);
            format!("vs_{}={:.2}", peer.name(), median(paired.collect()))
        })
        .collect();
    println!("RESULT W1 P={pending} shardwheel {}", ratios.join(" "));
    rates
}

/// Resident and peak resident set size in bytes.
fn rss() -> (u64, u64) {
    (status_bytes("VmRSS:"), status_bytes("VmHWM:"))
}

/// W4: (peak RSS - RSS before) / N with N timers of a 16-byte payload pending.
fn run_w4() {
    const N: usize = 10_000_000;
    // Writing 5 to clear_refs resets the peak RSS to the current RSS (Linux >= 4.0), so
    // that earlier allocations do not count.
    let reset_peak = || std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let mut rng = SplitMix64(42);
    let peak_resets = reset_peak();
    let (before, _) = rss();
    let mut wheel: Wheel<[u8; 16]> = Wheel::new();
    for i in 0..N {
        let payload = (i as u128).to_le_bytes();
        black_box(wheel.insert(rng.between(1_000, 600_000), payload));
    }
    let (now, peak) = rss();
    let used = if peak_resets { peak } else { now };
    println!(
        "RESULT W4 shardwheel bytes_per_timer={:.1}",
        used.saturating_sub(before) as f64 / N as f64
    );
    drop(wheel);
}

fn main() {
    let pendings: Vec<usize> = std::env::var("CHURN_PENDING")
        .ok()
        .map(|v| v.split(',').filter_map(|p| p.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 100_000, 1_000_000, 10_000_000]);
    println!("# load average at start: {}", load_average());
    if std::env::var_os("CHURN_SKIP_W4").is_none() {
        run_w4();
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let _guard = runtime.enter();
    let mut rates: HashMap<(&str, usize), f64> = HashMap::new();
    for &pending in &pendings {
        for (name, rate) in run_w1(pending) {
            rates.insert((name, pending), rate);
        }
    }
    if let (Some(&small), Some(&large)) = (pendings.first(), pendings.last()) {
        for name in ["shardwheel", "tokio-delayqueue", "binaryheap"] {
            println!(
                "RESULT W1 {name} ratio_P{large}_over_P{small}={:.2}",
                rates[&(name, large)] / rates[&(name, small)]
            );
        }
    }
    println!("# load average at end: {}", load_average());
}
