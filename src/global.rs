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
//!
//! A `fork()` copies the process with only the calling thread: in the child, no engine
//! built before it has a reaper. The process-wide timer is rebuilt there at its next use
//! (a `pthread_atfork` handler forgets it, and counts the fork), on the parent's clock,
//! so that deadlines already computed mean the same instants; a timer armed before the
//! fork, on any engine, is recognised by the count (`forks`): a sleep ends with
//! `SleepError::Shutdown` and a schedule on an engine built before the fork is refused,
//! rather than either waiting for ever on reapers that do not exist.

use crate::callback::Callback;
use crate::scheduler::Scheduler;
use crate::sleep::{Deadline, Sleep};
use crate::timeout::Timeout;
use crate::timer::{Engine, Timer};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The process-wide timer, built at its first use (and again in a forked child), leaked:
/// a `&'static Timer` handed out stays valid for ever. Null until built.
static GLOBAL: AtomicPtr<Timer> = AtomicPtr::new(std::ptr::null_mut());

/// Forks this process descends from since the first engine was built (counted in each
/// child by the `pthread_atfork` handler).
static FORKS: AtomicU32 = AtomicU32::new(0);

/// How many forks the process descends from (see the module doc): an engine, or a timer
/// armed, under another count belongs to an ancestor, and has no reaper here.
#[inline]
pub(crate) fn forks() -> u32 {
    // Relaxed: the count changes only in a child, before any other thread exists there.
    FORKS.load(Ordering::Relaxed)
}

/// The process-wide timer, if built in this process.
#[inline]
fn global_if_built() -> Option<&'static Timer> {
    // Acquire: the timer was built before it was published (`build_global`).
    let timer = GLOBAL.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked `Box<Timer>`, never freed.
    unsafe { timer.as_ref() }
}

/// Builds the process-wide timer, on `clock` if the parent's was on it, and publishes it;
/// a racing build that published first wins, and this one is shut down.
#[cold]
#[inline(never)]
fn build_global() -> &'static Timer {
    watch_forks();
    let mut builder = Timer::builder();
    // SAFETY: a non-null pointer is a leaked box, never freed.
    if let Some(clock) = unsafe { CLOCK.load(Ordering::Acquire).as_ref() } {
        builder = builder.on_clock(*clock);
    }
    let timer = match builder.build() {
        Ok(timer) => Box::into_raw(Box::new(timer)),
        Err(error) => panic!("shardwheel: cannot start the process-wide timer: {error}"),
    };
    // SAFETY: just leaked from a box, never freed.
    let clock = Box::into_raw(Box::new(unsafe { &*timer }.scheduler().clock()));
    // AcqRel: publishes the clock; the first build's stays (a rebuild is on it already).
    if CLOCK
        .compare_exchange(
            std::ptr::null_mut(),
            clock,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // SAFETY: never published: the only pointer is here.
        drop(unsafe { Box::from_raw(clock) });
    }
    // AcqRel: publishes the timer, and sees a racing one's.
    match GLOBAL.compare_exchange(
        std::ptr::null_mut(),
        timer,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: as above.
        Ok(_) => unsafe { &*timer },
        Err(first) => {
            // SAFETY: this box was never published: the only reference is here.
            let lost = unsafe { Box::from_raw(timer) };
            lost.shutdown();
            // SAFETY: a published timer is leaked, never freed.
            unsafe { &*first }
        }
    }
}

/// The first process-wide timer's clock, kept for a rebuild in a forked child (no lock: a
/// lock held by a thread at the fork would stay held in the child for ever). Leaked.
static CLOCK: AtomicPtr<crate::clock::Clock> = AtomicPtr::new(std::ptr::null_mut());

/// Registers the fork handler, once.
fn watch_forks() {
    #[cfg(all(unix, not(miri)))]
    {
        static WATCH: std::sync::Once = std::sync::Once::new();
        WATCH.call_once(|| {
            // SAFETY: the handler is an `extern "C" fn` that only touches atomics, which
            // is what a child of a multi-threaded process may do before it execs or
            // settles (async-signal-safe).
            unsafe { libc::pthread_atfork(None, None, Some(forked)) };
        });
    }
}

/// In a forked child: forgets the process-wide timer (its reapers stayed in the parent)
/// and counts the fork.
#[cfg(all(unix, not(miri)))]
extern "C" fn forked() {
    // Relaxed: the child has one thread.
    GLOBAL.store(std::ptr::null_mut(), Ordering::Relaxed);
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// What a future holds of its engine: a reference that keeps another timer's engine
/// running, as a clone of the timer would, or nothing for the process-wide timer, which is
/// never dropped. One pointer either way, so a future stays as small as one that borrowed
/// its timer.
pub(crate) struct EngineRef(Option<Arc<Engine<Callback>>>);

impl EngineRef {
    #[inline]
    pub(crate) fn of(timer: &Timer) -> Self {
        match global_if_built() {
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

    /// Inlined, as `Timer::global`: a sleep's drop, compiled in the user's crate, called
    /// it (a call through the GOT and back for a load and a test).
    #[inline]
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
    /// After a `fork()`, the child's first call builds it anew (the parent's reapers did
    /// not come along), counting from the parent's clock: a sleep made before the fork
    /// and first polled in the child ends at its instant. What was armed before the fork
    /// does not carry over: a sleep or timeout already polled ends with
    /// [`SleepError::Shutdown`](crate::SleepError::Shutdown) (or `Ok` if its deadline has
    /// passed), and a `Timer` built before the fork, this one's old `&'static` among
    /// them, refuses new timers with [`ScheduleError::Shutdown`](crate::ScheduleError::Shutdown).
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
    #[inline]
    pub fn global() -> &'static Timer {
        global_if_built().unwrap_or_else(build_global)
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
