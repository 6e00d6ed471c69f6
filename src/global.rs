//! One engine per process: [`Timer::global`] and the free functions on it ([`sleep`],
//! [`timeout`]...), and the handle a future keeps to its engine.
//!
//! A [`Sleep`](crate::Sleep) or [`Timeout`](crate::Timeout) must own a handle to its
//! engine to be `'static`: a reference count on the engine every clone of the timer
//! shares, which each future increments and decrements (tokio's timeouts pay the same for
//! their runtime handle; measured, it makes a timeout whose future is ready at once several
//! times dearer, W7 `mode=ready`). The process-wide timer lives in a `static` and is never
//! dropped, so its futures hold nothing and count nothing (they find it in its `static`):
//! `EngineRef::of` tells it (or a clone of it) by its engine's address. Either way the handle is one pointer.

use crate::callback::Callback;
use crate::scheduler::Scheduler;
use crate::sleep::{Deadline, Sleep};
use crate::timeout::Timeout;
use crate::timer::{Engine, Timer};
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The process-wide timer, built at its first use.
static GLOBAL: OnceLock<Timer> = OnceLock::new();

/// What a future holds of its engine: a reference that keeps another timer's engine
/// running, as a clone of the timer would, or nothing for the process-wide timer, which is
/// never dropped. One pointer either way, so a future stays as small as one that borrowed
/// its timer.
pub(crate) struct EngineRef(Option<Arc<Engine<Callback>>>);

impl EngineRef {
    #[inline]
    pub(crate) fn of(timer: &Timer) -> Self {
        match GLOBAL.get() {
            // Its clones too: they share its engine.
            Some(global) if Arc::ptr_eq(global.engine(), timer.engine()) => EngineRef(None),
            _ => EngineRef(Some(Arc::clone(timer.engine()))),
        }
    }

    /// The process-wide timer's, built at the first poll if it is not yet: no check at
    /// all where the future is made.
    #[inline(always)]
    pub(crate) fn global() -> Self {
        EngineRef(None)
    }

    /// Lets go of the engine (its reference count, if any): the future is done with it.
    #[inline]
    pub(crate) fn release(&mut self) {
        if let Some(engine) = self.0.take() {
            drop(engine);
        }
    }

    pub(crate) fn scheduler(&self) -> &Scheduler<Callback> {
        match &self.0 {
            Some(engine) => engine.scheduler(),
            // Built already (`of` found it), or now, at a free function's first poll.
            None => Timer::global().scheduler(),
        }
    }
}

impl Timer {
    /// The process-wide timer: built with [`Timer::builder`]'s defaults (a shard and a
    /// reaper thread per core, 1 ms tick) at the first call, and kept until the process
    /// exits (it is never dropped; [`shutdown`](Self::shutdown) on it ends it for
    /// everyone). One set of reapers for a whole server: its callbacks, periodic timers,
    /// sleeps and timeouts. Its futures hold no reference count (see [`Sleep`](crate::Sleep)),
    /// so they cost less than those of a timer the program owns; the first call costs the
    /// threads' start, later calls one atomic load.
    ///
    /// # Panics
    ///
    /// If the reaper threads cannot be started at the first call (the system refused a
    /// thread), as `std::thread::spawn` would.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::global();
    /// futures::executor::block_on(timer.sleep(Duration::from_millis(1))).unwrap();
    /// assert!(std::ptr::eq(timer, shardwheel::Timer::global()));
    /// ```
    pub fn global() -> &'static Timer {
        GLOBAL.get_or_init(|| match Timer::builder().build() {
            Ok(timer) => timer,
            Err(error) => panic!("shardwheel: cannot start the process-wide timer: {error}"),
        })
    }
}

/// A future that completes `delay` after its first poll, on the process-wide timer: as
/// [`Timer::global`]`().sleep(delay)`, with nothing checked where it is made.
///
/// # Panics
///
/// At its first poll, if the process-wide timer was not built yet and cannot be (see
/// [`Timer::global`]).
///
/// ```
/// use std::time::Duration;
///
/// futures::executor::block_on(shardwheel::sleep(Duration::from_millis(1))).unwrap();
/// ```
pub fn sleep(delay: Duration) -> Sleep {
    Sleep::with(EngineRef::global(), Deadline::AfterFirstPoll(delay))
}

/// A future that completes at `deadline`, on the process-wide timer: as
/// [`Timer::global`]`().sleep_until(deadline)`.
///
/// # Panics
///
/// As [`Timer::global`].
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let deadline = Instant::now() + Duration::from_millis(1);
/// futures::executor::block_on(shardwheel::sleep_until(deadline)).unwrap();
/// assert!(Instant::now() >= deadline);
/// ```
pub fn sleep_until(deadline: impl Into<Instant>) -> Sleep {
    Timer::global().sleep_until(deadline)
}

/// Runs `future` for at most `delay` from its first poll, on the process-wide timer: as
/// [`Timer::global`]`().timeout(delay, future)`, with nothing checked where it is made
/// (a future ready at its first poll costs no timer, no clock read, no reference count).
///
/// # Panics
///
/// As [`sleep`].
///
/// ```
/// use std::time::Duration;
///
/// let quick = shardwheel::timeout(Duration::from_secs(5), async { 7 });
/// assert_eq!(futures::executor::block_on(quick), Ok(7));
/// ```
#[inline(always)]
pub fn timeout<F: Future>(delay: Duration, future: F) -> Timeout<F> {
    Timeout::new(
        Sleep::with(EngineRef::global(), Deadline::AfterFirstPoll(delay)),
        future,
    )
}

/// Runs `future` until `deadline`, on the process-wide timer: as
/// [`Timer::global`]`().timeout_at(deadline, future)`.
///
/// # Panics
///
/// As [`Timer::global`].
///
/// ```
/// use shardwheel::TimeoutError;
/// use std::time::{Duration, Instant};
///
/// let stuck = std::future::pending::<()>();
/// let deadline = Instant::now() + Duration::from_millis(2);
/// let outcome = futures::executor::block_on(shardwheel::timeout_at(deadline, stuck));
/// assert_eq!(outcome, Err(TimeoutError::Elapsed));
/// ```
pub fn timeout_at<F: Future>(deadline: impl Into<Instant>, future: F) -> Timeout<F> {
    Timer::global().timeout_at(deadline, future)
}

/// A future that completes `delay` after its first poll, or up to `slack` later, on the
/// process-wide timer: as [`Timer::global`]`().sleep_within(delay, slack)` (see
/// [`Timer::sleep_within`]).
///
/// # Panics
///
/// As [`sleep`].
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let start = Instant::now();
/// let nap = shardwheel::sleep_within(Duration::from_millis(2), Duration::from_millis(1));
/// futures::executor::block_on(nap).unwrap();
/// assert!(start.elapsed() >= Duration::from_millis(2));
/// ```
pub fn sleep_within(delay: Duration, slack: Duration) -> Sleep {
    sleep(delay).within(slack)
}

/// A future that completes at `deadline`, or up to `slack` later, on the process-wide
/// timer: as [`Timer::global`]`().sleep_until_within(deadline, slack)`.
///
/// # Panics
///
/// As [`Timer::global`].
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let deadline = Instant::now() + Duration::from_millis(2);
/// let nap = shardwheel::sleep_until_within(deadline, Duration::from_millis(1));
/// futures::executor::block_on(nap).unwrap();
/// assert!(Instant::now() >= deadline);
/// ```
pub fn sleep_until_within(deadline: impl Into<Instant>, slack: Duration) -> Sleep {
    Timer::global().sleep_until_within(deadline, slack)
}

/// Runs `future` for at most `delay` from its first poll, or up to `slack` more, on the
/// process-wide timer: as [`Timer::global`]`().timeout_within(delay, slack, future)` (see
/// [`Timer::timeout_within`]).
///
/// # Panics
///
/// As [`sleep`].
///
/// ```
/// use shardwheel::TimeoutError;
/// use std::time::Duration;
///
/// let (delay, slack) = (Duration::from_millis(2), Duration::from_millis(1));
/// let stuck = shardwheel::timeout_within(delay, slack, std::future::pending::<()>());
/// assert_eq!(futures::executor::block_on(stuck), Err(TimeoutError::Elapsed));
/// ```
pub fn timeout_within<F: Future>(delay: Duration, slack: Duration, future: F) -> Timeout<F> {
    Timeout::new(sleep_within(delay, slack), future)
}

/// Runs `future` until `deadline`, or up to `slack` later, on the process-wide timer: as
/// [`Timer::global`]`().timeout_at_within(deadline, slack, future)`.
///
/// # Panics
///
/// As [`Timer::global`].
///
/// ```
/// use shardwheel::TimeoutError;
/// use std::time::{Duration, Instant};
///
/// let deadline = Instant::now() + Duration::from_millis(2);
/// let slack = Duration::from_millis(1);
/// let stuck = shardwheel::timeout_at_within(deadline, slack, std::future::pending::<()>());
/// assert_eq!(futures::executor::block_on(stuck), Err(TimeoutError::Elapsed));
/// assert!(Instant::now() >= deadline);
/// ```
pub fn timeout_at_within<F: Future>(
    deadline: impl Into<Instant>,
    slack: Duration,
    future: F,
) -> Timeout<F> {
    Timer::global().timeout_at_within(deadline, slack, future)
}
