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
//! The modules, each in its own file: `wheel` (levels, buckets, the bucket heap), `slab`
//! (entries and generations), `handle` (keys), `timer` (the engine's API), `scheduler`,
//! `shard` (a shard and its reaper), `slots` (the shared slab of timer slots), `inbox`,
//! `wakeup` (the park handshake), `sleep`, `periodic`, `purgatory`, `stats`, `error`.

mod bound;
mod callback;
mod clock;
pub mod delay_queue;
mod due;
mod error;
mod global;
mod handle;
#[cfg(feature = "hyper")]
mod hyper_timer;
mod inbox;
mod interval;
mod pages;
mod periodic;
pub mod purgatory;
mod scheduler;
mod shard;
mod slab;
mod sleep;
mod slots;
mod stats;
mod sync;
mod timeout;
mod timer;
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

pub use error::{
    AdvanceError, BuildError, Full, PeriodicError, ScheduleError, SleepError, StaleHandle,
    StaleKey, TimeoutError,
};

/// The README's example, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
pub use callback::Callback;
pub use global::{sleep, sleep_until, timeout, timeout_at};
pub use handle::{Key, TimerHandle};
#[cfg(feature = "hyper")]
pub use hyper_timer::HyperTimer;
pub use interval::{Interval, MissedTickBehavior};
pub use periodic::{Period, Periodic};
pub use sleep::Sleep;
pub use stats::Stats;
pub use timeout::Timeout;
pub use timer::{Builder, Timer};
pub use wheel::{DrainExpired, Expired, Wheel};
