//! The spike of issue 7: resident memory before, with 10M timers pending, and once they
//! are all cancelled and the reapers have given the memory back; under the system
//! allocator and under mimalloc (the allocator the project names for servers), a RESULT
//! line each.
//!
//! Each allocator runs in a process of its own (this bench starts itself again with
//! `SPIKE_ALLOCATOR` set), so that each starts from a fresh heap. The engine maps its
//! slabs' chunks from the OS, so what it gives back leaves the process whatever the
//! allocator; mimalloc, which caches memory freed by another thread for the thread that
//! allocated it, kept 641 MB of 880 MB resident when the chunks came from it.
//!
//! Run: `cargo bench --bench spike`.

mod common;

use common::{SplitMix64, load_average, status_bytes};
use shardwheel::{Timer, TimerHandle};
use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

/// The allocator `SPIKE_ALLOCATOR` names (`system` or `mimalloc`), chosen at the first
/// allocation, before `main`, and kept for the whole process.
struct Chosen;

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;
static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

fn choice() -> u8 {
    let chosen = CHOICE.load(Relaxed);
    if chosen != UNDECIDED {
        return chosen;
    }
    // SAFETY: getenv reads the environment without allocating (which would recurse into
    // this allocator); the first allocation comes before `main`, when no thread can be
    // changing the environment.
    let name = unsafe { libc::getenv(c"SPIKE_ALLOCATOR".as_ptr()) };
    // SAFETY: getenv returns null or a NUL-terminated string that stays valid while the
    // environment is not changed.
    let mimalloc = !name.is_null() && unsafe { std::ffi::CStr::from_ptr(name) } == c"mimalloc";
    let chosen = if mimalloc { MIMALLOC } else { SYSTEM };
    CHOICE.store(chosen, Relaxed);
    chosen
}

// SAFETY: every call goes to the same allocator for the whole process (`choice` never
// changes once made), so each block is freed or grown by the allocator that made it.
unsafe impl GlobalAlloc for Chosen {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe {
            match choice() {
                MIMALLOC => mimalloc::MiMalloc.alloc(layout),
                _ => System.alloc(layout),
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as in `alloc`; `ptr` came from the same allocator.
        unsafe {
            match choice() {
                MIMALLOC => mimalloc::MiMalloc.dealloc(ptr, layout),
                _ => System.dealloc(ptr, layout),
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            match choice() {
                MIMALLOC => mimalloc::MiMalloc.alloc_zeroed(layout),
                _ => System.alloc_zeroed(layout),
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `dealloc`.
        unsafe {
            match choice() {
                MIMALLOC => mimalloc::MiMalloc.realloc(ptr, layout, new_size),
                _ => System.realloc(ptr, layout, new_size),
            }
        }
    }
}

#[global_allocator]
static GLOBAL: Chosen = Chosen;

const SPIKE_TIMERS: usize = 10_000_000;

/// The slots a shard keeps however few timers are pending (six chunks: see the `slots`
/// module).
const KEPT_SLOTS_PER_SHARD: u64 = 4_032;

/// The bench's own list of the spike's handles (160 MB), kept outside the allocator under
/// test: taken from and given back to the system allocator, which unmaps so large a block
/// at once. In mimalloc the freed list would stay cached (the bench thread allocates
/// nothing large afterwards) and be counted as memory the engine kept.
struct Handles {
    memory: *mut TimerHandle,
    len: usize,
    capacity: usize,
}

impl Handles {
    fn layout(capacity: usize) -> Layout {
        Layout::array::<TimerHandle>(capacity).expect("fits in memory")
    }

    fn with_capacity(capacity: usize) -> Self {
        // SAFETY: a non-zero size (`capacity` is the spike's, above zero).
        let memory = unsafe { System.alloc(Self::layout(capacity)) }.cast::<TimerHandle>();
        assert!(!memory.is_null(), "out of memory");
        Handles {
            memory,
            len: 0,
            capacity,
        }
    }

    fn push(&mut self, handle: TimerHandle) {
        assert!(self.len < self.capacity);
        // SAFETY: in bounds of the allocation (checked above); handles are `Copy`.
        unsafe { self.memory.add(self.len).write(handle) };
        self.len += 1;
    }

    fn as_slice(&self) -> &[TimerHandle] {
        // SAFETY: the first `len` handles were written by `push`.
        unsafe { std::slice::from_raw_parts(self.memory, self.len) }
    }
}

impl Drop for Handles {
    fn drop(&mut self) {
        // SAFETY: allocated in `with_capacity` with this layout, freed once.
        unsafe { System.dealloc(self.memory.cast(), Self::layout(self.capacity)) };
    }
}

/// Resident memory of this process, in bytes.
fn resident_bytes() -> u64 {
    status_bytes("VmRSS:")
}

/// Timers that ran although they were all cancelled (must stay 0).
static RAN: AtomicUsize = AtomicUsize::new(0);

fn main() {
    match std::env::var("SPIKE_ALLOCATOR") {
        Ok(allocator) => spike(&allocator),
        Err(_) => {
            println!("# load average at start: {}", load_average());
            for allocator in ["system", "mimalloc"] {
                let status = Command::new(std::env::current_exe().expect("this bench"))
                    .env("SPIKE_ALLOCATOR", allocator)
                    .status()
                    .expect("the spike under one allocator");
                assert!(status.success(), "the spike under {allocator}: {status}");
            }
            println!("# load average at end: {}", load_average());
        }
    }
}

/// The spike, in a process whose allocator is `allocator`.
fn spike(allocator: &str) {
    let timer = Timer::builder().build().expect("timer");
    // Before: an engine that has been through a small spike on every shard and given it
    // back (20,000 timers a shard, past the 4,032 slots a shard keeps), so that what the allocator keeps of the engine's own
    // bookkeeping (a page per size a thread has allocated, in mimalloc: 1.5 MB of its
    // arena touched the first time the reapers give memory back) is in both figures;
    // only what grows with the spike makes the ratio. (In mimalloc the warm-up also leaves
    // the pages of its two threads, some 4 MB: `after_minus_before_mb` is the figure that
    // no baseline can flatter.)
    thread::scope(|scope| {
        for _ in 0..timer.shards() {
            scope.spawn(|| wave(&timer, 20_000));
        }
    });
    settle(&timer, Instant::now());
    let before = resident_bytes();
    let cancelled_before = timer.stats().cancelled;
    let mut rng = SplitMix64(42);
    let mut armed = Handles::with_capacity(SPIKE_TIMERS);
    for _ in 0..SPIKE_TIMERS {
        let delay = Duration::from_secs(rng.between(60, 600));
        let callback = || {
            RAN.fetch_add(1, Relaxed);
        };
        armed.push(
            timer
                .schedule_at(Instant::now() + delay, callback)
                .expect("schedule"),
        );
    }
    thread::sleep(Duration::from_secs(1));
    let pending = resident_bytes();
    let cancelled = armed
        .as_slice()
        .iter()
        .filter(|&&handle| timer.cancel(handle))
        .count();
    assert_eq!(cancelled, SPIKE_TIMERS);
    drop(armed);
    let start = Instant::now();
    while timer.stats().cancelled - cancelled_before < SPIKE_TIMERS as u64
        && start.elapsed() < Duration::from_secs(60)
    {
        thread::sleep(Duration::from_millis(10));
    }
    let cancelled_at = Instant::now();
    let after = settle(&timer, cancelled_at);
    let settled_ms = cancelled_at.elapsed().as_millis();
    // The slots kept still serve: a second, smaller wave is scheduled and cancelled.
    let cancelled = wave(&timer, 100_000);
    let mb = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    println!(
        "RESULT spike allocator={allocator} shardwheel rss_before_mb={:.1} rss_pending_mb={:.0} rss_after_cancel_mb={:.1} after_minus_before_mb={:.1} after_vs_before={:.2} settled_ms={} ran={} second_wave_cancelled={}",
        mb(before),
        mb(pending),
        mb(after),
        mb(after) - mb(before),
        after as f64 / before as f64,
        settled_ms,
        RAN.load(Relaxed),
        cancelled,
    );
    timer.shutdown();
}

/// Schedules `count` timers from the calling thread (so on its shard) and cancels them;
/// returns how many the cancels found pending (all of them, none having come due).
fn wave(timer: &Timer, count: usize) -> usize {
    let handles: Vec<TimerHandle> = (0..count)
        .map(|_| {
            let callback = || {
                RAN.fetch_add(1, Relaxed);
            };
            timer
                .schedule(Duration::from_secs(60), callback)
                .expect("schedule")
        })
        .collect();
    handles
        .into_iter()
        .filter(|&handle| timer.cancel(handle))
        .count()
}

/// Waits for the reapers to give the memory of cancelled timers back, and returns the
/// resident size then. They sort the free slots a tenth of the time (seconds for ten
/// million, more on a loaded machine): this waits until the shards are back to the slots
/// they keep, then until the resident size stops falling (no new low for 2 s, as the last
/// chunks' frees wait for the epoch); for at most 60 s from `since`.
fn settle(timer: &Timer, since: Instant) -> u64 {
    let kept = KEPT_SLOTS_PER_SHARD * timer.shards() as u64;
    let limit = Duration::from_secs(60);
    while timer.stats().slots > kept && since.elapsed() < limit {
        thread::sleep(Duration::from_millis(10));
    }
    let (mut low, mut low_at) = (resident_bytes(), Instant::now());
    while low_at.elapsed() < Duration::from_secs(2) && since.elapsed() < limit {
        thread::sleep(Duration::from_millis(50));
        let now = resident_bytes();
        if now < low {
            (low, low_at) = (now, Instant::now());
        }
    }
    low
}
