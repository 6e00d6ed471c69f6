//! shardwheel: timers for servers that keep millions of them.
//!
//! Most timers in a server (request timeouts, idle connections, retries) are cancelled
//! before they fire, so scheduling and cancelling must cost almost nothing, and the few that
//! fire must fire on time. shardwheel is built on a hierarchical timing wheel whose
//! operations are O(1) whatever the number of pending timers.
//!
//! - [`Timer`]: the sharded engine. One shard and one reaper thread per core; schedule,
//!   cancel and reset from any thread, lock-free, in O(1); callbacks (or, for
//!   [`Timer<T>`], one handler with a payload per timer) run once on the reaper, never
//!   early; the reapers sleep until the next due bucket. [`Timer::stats`] tells how late
//!   timers fired.
//! - On the same engine: [`Timer::sleep`], [`Timer::sleep_until`] and [`Timer::timeout`],
//!   owned (`'static`) futures for any executor; an async [`Interval`] and a
//!   [`delay_queue::DelayQueue`]; periodic timers ([`Timer::schedule_periodic`]); and
//!   [`purgatory`], Kafka's delayed-operation purgatory. Feature `hyper`: `HyperTimer`,
//!   hyper's timer; feature `stream`: `Stream` for the queue and the interval.
//! - [`Wheel`]: the single-threaded core on its own: insert, cancel and reset in O(1) with
//!   generation-checked [`Key`]s, expiry driven by the caller's clock, and
//!   [`Wheel::next_deadline`] to know how long to sleep.
//!
//! ```
//! use shardwheel::Wheel;
//!
//! let mut wheel = Wheel::new(); // ticks: say, milliseconds
//! let timeout = wheel.insert(250, "request 7 timed out");
//! wheel.insert(1_000, "heartbeat");
//! wheel.cancel(timeout); // the reply came in time
//!
//! while let Some(tick) = wheel.next_deadline() {
//!     for expired in wheel.drain_expired(tick) {
//!         assert_eq!((expired.deadline, expired.value), (1_000, "heartbeat"));
//!     }
//! }
//! assert!(wheel.is_empty());
//! ```
//!
//! # One engine per process
//!
//! A [`Timer`] is a handle: cloning it costs two reference counts and starts nothing, and
//! every clone schedules on the same shards, served by the same reaper threads (one per
//! shard); the engine shuts down when the last clone (or the last future holding it) is
//! dropped. So a server builds one timer, or takes the process-wide [`Timer::global`],
//! and hands clones to everything that needs time:
//!
//! - callbacks ([`Timer::schedule`]) and periodic timers run on its reapers;
//! - its futures ([`Sleep`], [`Timeout`], [`Interval`], [`delay_queue::DelayQueue`], the
//!   free functions [`sleep`] and [`timeout`] on the global one) are woken by them; a future
//!   keeps the engine alive as a clone would, and a future of the global timer holds no
//!   reference count at all, so that a timeout ready at once costs nothing but a compare;
//! - payload timers: a [`Timer<T>`] (from [`Builder::build_with`]) stores a `T` per timer
//!   in its slots and runs one handler, with no allocation per timer; that layout is its
//!   own, so it has its own shards and reapers (a second set). Where one set matters more
//!   than the allocation, schedule the payload in a callback on the shared timer instead
//!   (`timer.schedule(delay, move || handler(payload))`: one box per timer);
//! - a [`purgatory::Purgatory`] is a `Timer<T>` of its operations, so it too runs its own
//!   set; build it with few shards (`Timer::builder().shards(1)`) where threads are
//!   counted.
//!
//! The global timer is built at its first use with the builder's defaults (a shard and a
//! reaper per core, threads that sleep until a deadline, so an idle one costs no CPU) and
//! lives until the process exits; one can shut it down ([`Timer::shutdown`]) for all.
//!
//! # Deadlines
//!
//! A delay counts from the call (`schedule`, `insert`, `reset`), or from a future's first
//! poll (`sleep`, `timeout`); an instant is the deadline as given. On x86-64 Linux whose
//! kernel keeps time with the processor's time-stamp counter (clocksource `tsc`), the
//! reading a delay counts from comes from that counter, about 10 ns where the monotonic
//! clock's `clock_gettime` takes 24: it is never behind that clock, so a timer never fires
//! before its delay has passed, and at most a few microseconds ahead of it. The futures, the queue and the interval take instants as
//! `impl Into<Instant>`: std's `Instant`, or tokio's `tokio::time::Instant` (which converts
//! into std's), with no feature needed. (Under tokio's paused test clock, tokio's instants
//! are tokio's virtual time, which the engine's own API does not follow: a test of code on
//! it uses a manual timer and builds its deadlines from `timer.now()`; code on [`time`]
//! follows tokio's clock under feature `test-util`.)
//!
//! # Switching from tokio: `shardwheel::time`
//!
//! [`time`] is tokio's `time` module on the process-wide engine: the same items, signatures
//! and behaviour (`sleep`, `timeout`, `interval`, their futures, `Instant`,
//! `error::Elapsed`), so a program switches by changing `use tokio::time` into
//! `use shardwheel::time`. Where the engine cannot serve (shut down, full) its futures
//! panic as tokio's do where their driver is gone; the engine's API above gives those
//! errors as values. With feature `test-util` in dev-dependencies, tokio's paused test
//! clock (`#[tokio::test(start_paused = true)]`, `time::pause()`, `time::advance`) moves
//! them as it moves tokio's, so tokio-style tests pass unchanged; tokio's own time test
//! suites run on it (`tests/time_*.rs`). Each item's docs say where it differs from
//! tokio's, and why.
//!
//! ```
//! # #[cfg(feature = "engine")] {
//! use shardwheel::time::{self, Duration}; // was: use tokio::time::{self, Duration};
//!
//! # futures::executor::block_on(async {
//! let reply = time::timeout(Duration::from_secs(1), async { 7 }).await;
//! assert_eq!(reply, Ok(7));
//! let io: std::io::Result<()> = time::timeout(Duration::from_millis(1), std::future::pending())
//!     .await
//!     .map_err(Into::into); // `Elapsed` converts into an `io::Error`, as tokio's
//! assert_eq!(io.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
//! # });
//! # }
//! ```
//!
//! # Tests on a manual clock
//!
//! A [manual](Builder::manual) timer has no reapers: its time moves only with
//! [`Timer::advance`], which fires what comes due on the calling thread, and
//! [`Timer::now`] reads it. Every `Instant` given to it (`schedule_at`, `sleep_until`,
//! `reset_at`, `interval_at`, `insert_at`) is read against that clock, so a test builds
//! its deadlines from `timer.now()` and real time passing changes nothing. A purgatory on a
//! manual timer advances with [`purgatory::Purgatory::advance`]. There is no auto-advance
//! (tokio's `start_paused`, where time jumps to the next deadline once every task waits):
//! the engine cannot see whether the tasks of an arbitrary executor are idle; a test
//! advances explicitly, which also says in the test how much time it means to pass.
//!
//! # Features
//!
//! - `engine` (default): [`Timer`] and everything built on it, with its reaper threads.
//!   Without it (`default-features = false`) the crate is [`Wheel`] alone and has no
//!   dependency.
//! - `mmap` (default): on Linux the slabs' chunks are mapped from the OS, large ones as
//!   huge pages, so memory given back after a spike leaves the process whatever the global
//!   allocator; without it the global allocator serves them.
//! - `metrics`: `Timer::record_metrics` gives the counts and lateness, per shard, to the
//!   `metrics` facade's recorder.
//! - `tracing`: a callback's panic, caught by its reaper, is logged as an error event with
//!   its message.
//! - `hyper`: `HyperTimer`, hyper 1.x's `rt::Timer` on the engine (header-read and
//!   keep-alive timeouts on shardwheel).
//! - `stream`: `futures_core::Stream` for [`delay_queue::DelayQueue`] and [`Interval`].
//! - `tokio`: conversions between [`time::Instant`] and tokio's `Instant`.
//! - `tower`: `tower::TimeoutLayer`, tower's timeout middleware on the engine.
//! - `test-util` (for dev-dependencies): [`time`] follows tokio's paused test clock, and
//!   `time::{pause, resume, advance}` are tokio's.
//!
//! The modules, each in its own file: `wheel` (levels, buckets, the bucket heap), `slab`
//! (entries and generations), `handle` (keys), `timer` (the engine's API), `scheduler`,
//! `producer` (a thread's shard and stages), `stage`, `shard` (a shard and its reaper),
//! `slots` (the shared slab of timer slots), `inbox`, `wakeup` (the park handshake),
//! `sleep`, `timeout`, `global` (the process-wide timer and a future's handle to its
//! engine), `interval`, `delay_queue`, `hyper_timer`, `periodic`, `purgatory`, `stats`,
//! `observe` (metrics and tracing), `error`, `time` (tokio's `time` API on the engine).

/// Items of the engine, built with the `engine` feature (the way tokio's `cfg_rt!` gates
/// its runtime).
macro_rules! cfg_engine {
    ($($item:item)*) => {
        $(
            #[cfg(feature = "engine")]
            $item
        )*
    };
}

mod error;
mod handle;
mod pages;
mod slab;
mod wheel;

// One by one rather than in `cfg_engine!`: `cargo fmt` does not reach the files of modules
// declared inside a macro.
#[cfg(feature = "engine")]
mod barrier;
#[cfg(feature = "engine")]
mod bound;
#[cfg(feature = "engine")]
mod callback;
#[cfg(feature = "engine")]
mod clock;
#[cfg(feature = "engine")]
pub mod delay_queue;
#[cfg(feature = "engine")]
mod due;
#[cfg(feature = "engine")]
mod global;
#[cfg(feature = "engine")]
mod inbox;
#[cfg(feature = "engine")]
mod interval;
#[cfg(feature = "engine")]
mod observe;
#[cfg(feature = "engine")]
mod periodic;
#[cfg(feature = "engine")]
mod producer;
#[cfg(feature = "engine")]
pub mod purgatory;
#[cfg(feature = "engine")]
mod scheduler;
#[cfg(feature = "engine")]
mod shard;
#[cfg(feature = "engine")]
mod slack;
#[cfg(feature = "engine")]
mod sleep;
#[cfg(feature = "engine")]
mod slots;
#[cfg(feature = "engine")]
mod stage;
#[cfg(feature = "engine")]
mod stats;
#[cfg(feature = "engine")]
mod sync;
#[cfg(feature = "engine")]
pub mod time;
#[cfg(feature = "engine")]
mod timeout;
#[cfg(feature = "engine")]
mod timer;
#[cfg(feature = "engine")]
mod wakeup;
// `hyper` implies `engine`.
#[cfg(feature = "hyper")]
mod hyper_timer;
// `tower` implies `engine`.
#[cfg(feature = "tower")]
pub mod tower;

/// The engine's internals, for the loom models in `loom-tests/` only: built under
/// `--cfg loom` and never part of the API.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_api {
    pub use crate::due::Due;
    pub use crate::shard::{Refused, Shard};
    pub use crate::stage::Stage;

    use crate::callback::Callback;

    /// Whether `callback` is a sleep's wake-up (see `callback`).
    pub fn is_wake_up(callback: &Callback) -> bool {
        callback.is_wake_up()
    }

    /// Models the kernel refusing the stages' barrier from now on (see `barrier`).
    pub fn refuse_barriers(refused: bool) {
        crate::barrier::refuse_under_loom(refused);
    }
    use std::task::Waker;

    /// The wake-up of a sleep whose task `waker` wakes (see `callback`).
    pub fn wake_up(waker: Waker) -> Callback {
        Callback::wake(waker)
    }

    /// Drops a cancelled timer's callback as a timer of callbacks does (see
    /// `Shard::with_discard`).
    pub fn discard(callback: Callback) {
        callback.discard();
    }
}

pub use error::{Full, StaleKey};
pub use handle::Key;
pub use wheel::{DrainExpired, Expired, Wheel};
cfg_engine! {
    pub use callback::Callback;
    pub use error::{
        AdvanceError, BuildError, PeriodicError, ScheduleError, SleepError, StaleHandle,
        TimeoutError,
    };
    pub use global::{
        sleep, sleep_until, sleep_until_within, sleep_within, timeout, timeout_at,
        timeout_at_within, timeout_within,
    };
    pub use handle::TimerHandle;
    pub use interval::{Interval, MissedTickBehavior};
    pub use periodic::{Period, Periodic};
    pub use sleep::Sleep;
    pub use timeout::Timeout;
    pub use stats::{Counts, Stats};
    pub use timer::{Builder, Timer};
}
#[cfg(feature = "hyper")]
pub use hyper_timer::HyperTimer;

/// The README's example, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "engine"))]
pub struct ReadmeDoctests;
