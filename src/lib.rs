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
//!
//! The modules, each in its own file: `wheel` (levels, buckets, the bucket heap), `slab`
//! (entries and generations), `handle` (keys), `timer` (the engine's API), `scheduler`,
//! `shard` (a shard and its reaper), `slots` (the shared slab of timer slots), `inbox`,
//! `wakeup` (the park handshake), `sleep`, `periodic`, `purgatory`, `stats`, `error`.

#[cfg(feature = "engine")]
mod bound;
#[cfg(feature = "engine")]
mod callback;
#[cfg(feature = "engine")]
mod clock;
#[cfg(feature = "engine")]
mod due;
mod error;
mod handle;
#[cfg(feature = "engine")]
mod inbox;
mod pages;
#[cfg(feature = "engine")]
mod periodic;
#[cfg(feature = "engine")]
pub mod purgatory;
#[cfg(feature = "engine")]
mod scheduler;
#[cfg(feature = "engine")]
mod shard;
mod slab;
#[cfg(feature = "engine")]
mod sleep;
#[cfg(feature = "engine")]
mod slots;
#[cfg(feature = "engine")]
mod stats;
#[cfg(feature = "engine")]
mod sync;
#[cfg(feature = "engine")]
mod timer;
#[cfg(feature = "engine")]
mod wakeup;
mod wheel;

/// The engine's internals, for the loom models in `loom-tests/` only: built under
/// `--cfg loom` and never part of the API.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_api {
    pub use crate::due::Due;
    pub use crate::shard::{Refused, Shard};
    pub use crate::sleep::Shared as SleepShared;
}

#[cfg(feature = "engine")]
pub use error::{
    AdvanceError, BuildError, PeriodicError, ScheduleError, SleepError, StaleHandle, TimeoutError,
};
pub use error::{Full, StaleKey};

/// The README's example, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "engine"))]
pub struct ReadmeDoctests;
pub use handle::Key;
pub use wheel::{DrainExpired, Expired, Wheel};
#[cfg(feature = "engine")]
pub use {
    callback::Callback,
    handle::TimerHandle,
    periodic::{Period, Periodic},
    sleep::{Sleep, Timeout},
    stats::{Counts, Stats},
    timer::{Builder, Timer},
};
