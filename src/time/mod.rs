//! `shardwheel::time`: tokio's `time` module on the process-wide engine, so that a program
//! switches by changing `use tokio::time` into `use shardwheel::time`.
//!
//! The same items with the same signatures and behaviour: [`sleep`], [`sleep_until`],
//! [`timeout`], [`timeout_at`], [`interval`], [`interval_at`], [`Sleep`] (output `()`),
//! [`Timeout`] (output `Result<T, error::Elapsed>`), [`Interval`] (ticks give an
//! [`Instant`]), [`MissedTickBehavior`], [`Instant`], [`Duration`], [`error::Elapsed`];
//! under feature `test-util`, `pause`, `resume` and `advance`.
//!
//! Each is a thin shape over the engine's own future ([`crate::Sleep`],
//! [`crate::Timeout`], [`crate::Interval`] on [`Timer::global`](crate::Timer::global)):
//! no second timer, and no cost beyond the engine's. Where the engine's API returns an
//! error (the engine was shut down, or is full), this one does what tokio does where its
//! timer cannot serve: it panics; the engine's API stays beside it for errors as values.
//! Each item's docs say what differs from tokio's and why.
//!
//! # Tests on tokio's paused clock
//!
//! With feature `test-util` (in dev-dependencies, as tokio's own), tests written for tokio
//! pass unchanged on code that uses `shardwheel::time`: [`Instant::now`] reads tokio's
//! clock, and a sleep, timeout or interval made while tokio's clock is paused
//! (`#[tokio::test(start_paused = true)]`, `time::pause()`), or shifted from real time by an
//! earlier pause, runs on tokio's timer, so auto-advance and `advance` move it exactly as
//! they move tokio's, and so does a [`DelayQueue`] made then (see its docs); one made on
//! real time runs on the engine. Tokio offers no "is the
//! clock paused?", so the timers read it off tokio's clock (see `paused`); a timer stays on
//! the timer it was made on. Without the feature nothing of this is built: no tokio
//! dependency, and nothing of tokio's is read.
//!
//! ```
//! use shardwheel::time::{self, Duration, Instant}; // was: use tokio::time::{...};
//!
//! # futures::executor::block_on(async {
//! let start = Instant::now();
//! time::sleep(Duration::from_millis(2)).await;
//! let reply = time::timeout(Duration::from_secs(1), async { "pong" }).await;
//! assert_eq!(reply, Ok("pong"));
//! let mut heartbeat = time::interval(Duration::from_millis(1));
//! heartbeat.tick().await;
//! assert!(start.elapsed() >= Duration::from_millis(2));
//! # });
//! ```

pub mod error;
mod instant;
mod interval;
pub(crate) mod paused;
mod sleep;
mod timeout;

/// tokio-util's `time::delay_queue`: [`DelayQueue`], its [`Key`](delay_queue::Key) and
/// [`Expired`](delay_queue::Expired) values, on the engine.
pub use crate::delay_queue;
pub use crate::delay_queue::DelayQueue;
pub use crate::interval::MissedTickBehavior;
pub use instant::Instant;
pub use interval::{Interval, interval, interval_at};
pub use sleep::{Sleep, sleep, sleep_until};
pub use std::time::Duration;
pub use timeout::{Timeout, timeout, timeout_at};
/// Tokio's paused clock, for tests (feature `test-util`): tokio's own functions. A
/// `time` timer made while the clock is paused runs on tokio's timer (see the module docs).
#[cfg(feature = "test-util")]
pub use tokio::time::{advance, pause, resume};
