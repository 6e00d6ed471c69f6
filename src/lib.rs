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
//!   futures for any executor; periodic timers ([`Timer::schedule_periodic`]); and
//!   [`purgatory`], Kafka's delayed-operation purgatory.
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
//!
//! The modules, each in its own file: `wheel` (levels, buckets, the bucket heap), `slab`
//! (entries and generations), `handle` (keys), `timer` (the engine's API), `scheduler`,
//! `shard` (a shard and its reaper), `slots` (the shared slab of timer slots), `inbox`,
//! `wakeup` (the park handshake), `sleep`, `periodic`, `purgatory`, `stats`, `observe`
//! (metrics and tracing), `error`.

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

cfg_engine! {
    mod bound;
    mod callback;
    mod clock;
    mod due;
    mod inbox;
    mod observe;
    mod periodic;
    pub mod purgatory;
    mod scheduler;
    mod shard;
    mod sleep;
    mod slots;
    mod stage;
    mod stats;
    mod sync;
    mod timer;
    mod wakeup;
}

/// The engine's internals, for the loom models in `loom-tests/` only: built under
/// `--cfg loom` and never part of the API.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_api {
    pub use crate::due::Due;
    pub use crate::shard::{Refused, Shard};
    pub use crate::sleep::Shared as SleepShared;
    pub use crate::stage::Stage;
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
    pub use handle::TimerHandle;
    pub use periodic::{Period, Periodic};
    pub use sleep::{Sleep, Timeout};
    pub use stats::{Counts, Stats};
    pub use timer::{Builder, Timer};
}

/// The README's example, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "engine"))]
pub struct ReadmeDoctests;
