//! Futures on the engine, for any executor: [`Timer::sleep`] and [`Timer::sleep_until`]
//! here, [`Timer::timeout`] in `timeout`.
//!
//! A sleep owns a handle to its engine (one pointer and a reference count; none on the
//! process-wide timer, see `global`), so it is `'static`: it can live in a connection's
//! struct, a `tokio::spawn`ed task, or a `Pin<Box<dyn Future>>`.
//!
//! When the deadline is fixed, the one rule: a *delay* (`sleep`, `timeout`) counts from the
//! future's first poll, as a Rust future does nothing until polled; an *instant*
//! (`sleep_until`, `timeout_at`, `reset`) is the deadline as given. A sleep schedules its
//! timer at its first poll, not when it is made, so a `timeout` whose future is ready at
//! once costs no timer and no clock read at all (pingora-timeout's lesson: most timeouts
//! never need one); nor does a deadline found passed at the first poll.
//!
//! The sleep and its timer's callback share one allocation (see `alarm`): the waker of the
//! task that awaits the sleep, and how the wait ended. The callback rings it; a sleep
//! dropped before its deadline lets go of it first, so that the cancelled callback, dropped
//! later, wakes nobody, and then cancels its timer in O(1). Each poll makes sure the alarm
//! wakes the polling task, so a task that moves to another waker keeps its timer.

use crate::alarm::{self, Listener};
use crate::callback::Callback;
use crate::error::SleepError;
use crate::global::EngineRef;
use crate::handle::TimerHandle;
use crate::timer::Timer;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The timer of a polled sleep.
struct Armed {
    handle: TimerHandle,
    listener: Listener,
}

/// A future that completes at a deadline, on a [`Timer`]; from [`Timer::sleep`] or
/// [`Timer::sleep_until`]. It works on any executor: the timer's reaper wakes the task.
///
/// It outputs `Ok(())` once the deadline has passed (never before), or an error if its
/// timer could not be scheduled ([`SleepError::Full`]) or the timer shut down first
/// ([`SleepError::Shutdown`]).
///
/// A sleep is `'static`, `Send` and `Sync`, and `Unpin`: it holds a handle to the engine,
/// not a borrow of the [`Timer`], and can be kept in a struct across `.await`s. Like a
/// clone of the timer, it keeps the engine running after the timer is dropped;
/// [`shutdown`](Timer::shutdown) ends it with [`SleepError::Shutdown`]. On
/// [`Timer::global`] it holds no reference count, and costs less.
///
/// The deadline of [`Timer::sleep`]`(delay)` is `delay` after the sleep's first poll (see
/// [`deadline`](Self::deadline)); that of [`Timer::sleep_until`] is the instant given. Its
/// timer is scheduled at its first poll (none if the deadline has passed by then); polling
/// again, with the same waker or another, keeps that timer. Dropping the sleep cancels it
/// in O(1). A deadline past 584 years after the timer started is clamped to that.
///
/// ```
/// use std::time::Duration;
///
/// struct Connection {
///     idle: shardwheel::Sleep, // owned: no lifetime
/// }
///
/// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
/// let mut connection = Connection { idle: timer.sleep(Duration::from_millis(5)) };
/// futures::executor::block_on(&mut connection.idle).unwrap();
/// assert!(connection.idle.is_elapsed());
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct Sleep {
    engine: EngineRef,
    due: Deadline,
    /// How late its timer may fire, in nanoseconds, to share a wake-up (see `slack`).
    slack: u64,
    armed: Option<Armed>,
}

/// When a sleep ends.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Deadline {
    /// At this many nanoseconds since the timer's start.
    At(u64),
    /// This long after the first poll.
    AfterFirstPoll(Duration),
}

impl Sleep {
    // Inline, as what it calls: a timeout whose future is ready at once costs nothing
    // more than its construction and drop, in the caller's crate (W7 `mode=ready`).
    #[inline]
    pub(crate) fn new(timer: &Timer, due: Deadline) -> Self {
        Self::with(EngineRef::of(timer), due)
    }

    #[inline(always)]
    pub(crate) fn with(engine: EngineRef, due: Deadline) -> Self {
        Sleep {
            engine,
            due,
            slack: 0,
            armed: None,
        }
    }

    /// The same sleep, its timer allowed to fire up to `slack` after its deadline.
    pub(crate) fn within(mut self, slack: Duration) -> Self {
        self.slack = crate::clock::nanos(slack);
        self
    }

    /// The deadline: `None` for a [`Timer::sleep`] not yet polled (its delay counts from
    /// its first poll), the instant otherwise, by the timer's clock (see [`Timer::now`]).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let at = timer.now() + Duration::from_secs(3);
    /// assert_eq!(timer.sleep_until(at).deadline(), Some(at));
    /// assert_eq!(timer.sleep(Duration::from_secs(3)).deadline(), None);
    /// ```
    pub fn deadline(&self) -> Option<Instant> {
        match self.due {
            Deadline::At(deadline) => Some(self.engine.scheduler().clock().instant_of(deadline)),
            Deadline::AfterFirstPoll(_) => None,
        }
    }

    /// Moves the deadline to `deadline`, whether or not the sleep has completed: it
    /// completes again once the new deadline passes. A pending timer is moved in place
    /// (O(1), same timer); one that has fired is replaced at the next poll.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let mut idle = timer.sleep(Duration::from_secs(60));
    /// idle.reset(timer.now() + Duration::from_millis(5)); // sooner
    /// futures::executor::block_on(idle).unwrap();
    /// ```
    pub fn reset(&mut self, deadline: impl Into<Instant>) {
        let scheduler = self.engine.scheduler();
        let deadline = scheduler.deadline_at(deadline.into());
        self.due = Deadline::At(deadline);
        if let Some(armed) = &self.armed {
            // A timer that has not fired yet moves; a reset that finds it fired (or firing)
            // fails, and the next poll schedules a new one. A deadline already passed
            // needs no timer: the next poll finds it passed.
            if deadline > scheduler.now()
                && armed.listener.ended().is_none()
                && scheduler
                    .reset_due(armed.handle, scheduler.within(deadline, self.slack))
                    .is_ok()
            {
                return;
            }
        }
        self.disarm();
    }

    /// Whether the deadline has passed and the sleep's timer fired (or was not needed).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let sleep = timer.sleep_until(timer.now() + Duration::from_secs(1));
    /// assert!(!sleep.is_elapsed());
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// assert!(sleep.is_elapsed());
    /// ```
    pub fn is_elapsed(&self) -> bool {
        match &self.armed {
            Some(armed) => matches!(armed.listener.ended(), Some(Ok(()))),
            None => match self.due {
                Deadline::At(deadline) => deadline <= self.engine.scheduler().now(),
                Deadline::AfterFirstPoll(delay) => delay.is_zero(),
            },
        }
    }

    /// Lets go of the timer: wakes nobody any more, and cancels it if it is pending.
    #[inline]
    fn disarm(&mut self) {
        if let Some(armed) = self.armed.take() {
            self.let_go(armed);
        }
    }

    #[inline(never)]
    fn let_go(&self, armed: Armed) {
        let scheduler = self.engine.scheduler();
        // A timer still in this thread's stage (a timeout whose work finished first, the
        // common case) comes back unrun with its alarm: both ends are here, and go
        // without the two read-modify-writes of letting go one end at a time.
        if let Some(alarm) = scheduler
            .take_staged(armed.handle)
            .and_then(Callback::into_alarm)
        {
            armed.listener.reclaim(alarm);
            return;
        }
        // The listener first, so that the cancelled callback wakes nobody; a timer whose
        // wait ended has ended too, with nothing to cancel.
        if armed.listener.leave().is_none() {
            scheduler.cancel(armed.handle);
        }
    }
}

impl Future for Sleep {
    type Output = Result<(), SleepError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(armed) = &mut this.armed {
            return match armed.listener.listen(cx.waker()) {
                Some(done) => Poll::Ready(done),
                None => Poll::Pending,
            };
        }
        let scheduler = this.engine.scheduler();
        let deadline = match this.due {
            Deadline::AfterFirstPoll(delay) => {
                let deadline = scheduler.deadline_after(delay);
                this.due = Deadline::At(deadline);
                if delay.is_zero() {
                    return Poll::Ready(Ok(()));
                }
                deadline
            }
            Deadline::At(deadline) if deadline <= scheduler.now() => return Poll::Ready(Ok(())),
            Deadline::At(deadline) => deadline,
        };
        let (listener, alarm) = alarm::pair(cx.waker().clone());
        match scheduler.insert_due(scheduler.within(deadline, this.slack), Callback::wake(alarm)) {
            Ok(handle) => {
                this.armed = Some(Armed { handle, listener });
                Poll::Pending
            }
            Err(refused) => {
                // The listener first: the refused callback, dropped with the error, wakes
                // nobody.
                drop(listener);
                Poll::Ready(Err(refused.into()))
            }
        }
    }
}

impl Drop for Sleep {
    // Inline, with every field emptied here, so that the drop of a sleep that never armed
    // (a ready timeout) is two compares in the caller (W7 `mode=ready`).
    #[inline]
    fn drop(&mut self) {
        self.disarm();
        self.engine.release();
    }
}

impl std::fmt::Debug for Sleep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleep")
            .field("due", &self.due)
            .field("armed", &self.armed.is_some())
            .finish()
    }
}

/// Futures: these work on any executor (tokio, smol, `futures::executor::block_on`), as the
/// timer's reapers wake the tasks. Each holds its own handle to the engine (`'static`).
impl Timer {
    /// A future that completes `delay` after its first poll (see [`Sleep`]).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let start = Instant::now();
    /// futures::executor::block_on(timer.sleep(Duration::from_millis(20))).unwrap();
    /// assert!(start.elapsed() >= Duration::from_millis(20));
    /// ```
    pub fn sleep(&self, delay: Duration) -> Sleep {
        Sleep::new(self, Deadline::AfterFirstPoll(delay))
    }

    /// A future that completes at `deadline`, by this timer's clock ([`Timer::now`]); at
    /// its first poll if that has passed.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let deadline = timer.now() + Duration::from_millis(10);
    /// futures::executor::block_on(timer.sleep_until(deadline)).unwrap();
    /// assert!(timer.now() >= deadline);
    /// ```
    pub fn sleep_until(&self, deadline: impl Into<Instant>) -> Sleep {
        let deadline = self.scheduler().deadline_at(deadline.into());
        Sleep::new(self, Deadline::At(deadline))
    }
}
