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
//! The timer's callback owns one end of a `Shared`:
//! a state byte and the waker of the task that awaits the sleep. Each poll registers its
//! waker there (an `AtomicWaker`), so a task that moves to another waker keeps its timer.
//! The callback marks the state and wakes; a sleep dropped before its deadline marks the
//! state first, so that the cancelled callback, dropped later by the reaper, wakes nobody,
//! and then cancels its timer in O(1).

use crate::callback::Callback;
use crate::error::SleepError;
use crate::global::EngineRef;
use crate::handle::TimerHandle;
use crate::sync::{AtomicU8, AtomicWaker, Ordering};
use crate::timer::Timer;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// `Shared::state`: the timer has not ended yet.
const WAITING: u8 = 0;
/// The timer fired: the sleep is over.
const FIRED: u8 = 1;
/// The callback was dropped unrun: the timer shut down.
const GONE: u8 = 2;
/// The sleep let go of this timer (dropped, or re-armed on a new one): wake nobody.
const ABANDONED: u8 = 3;

/// What a sleep and its timer's callback share. Public only for the loom models (through
/// `loom_api`).
#[derive(Debug)]
pub struct Shared {
    state: AtomicU8,
    waker: AtomicWaker,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            state: AtomicU8::new(WAITING),
            waker: AtomicWaker::new(),
        }
    }
}

impl Shared {
    /// The timer fired: the sleep is over; wakes its task.
    pub fn fire(&self) {
        self.settle(FIRED);
    }

    /// The sleep lets go of its timer: wakes nobody, now or later; gives its waker back.
    pub fn abandon(&self) -> Option<Waker> {
        self.settle(ABANDONED);
        self.waker.take()
    }

    fn is_waiting(&self) -> bool {
        // Relaxed: a hint; the reset that follows decides.
        self.state.load(Ordering::Relaxed) == WAITING
    }

    /// Ends the wait as `to`, if it has not ended, and wakes the task if it is to look.
    fn settle(&self, to: u8) {
        // Relaxed: the state carries no data, only which way the wait ended; the waker's
        // own synchronisation orders this store before the woken task's poll, as in
        // `AtomicWaker`'s documented pattern (set the flag, then `wake`; `register`, then
        // read the flag). One location, so racing settles agree on a single winner.
        let settled = self
            .state
            .compare_exchange(WAITING, to, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if settled && to != ABANDONED {
            self.waker.wake();
        }
    }

    /// How the wait ended, if it has, from a task polling with `cx`.
    pub fn poll(&self, cx: &mut Context<'_>) -> Poll<Result<(), SleepError>> {
        let ended = |state| match state {
            FIRED => Poll::Ready(Ok(())),
            GONE => Poll::Ready(Err(SleepError::Shutdown)),
            _ => Poll::Pending,
        };
        // Relaxed, both: see `settle`.
        if let Poll::Ready(done) = ended(self.state.load(Ordering::Relaxed)) {
            return Poll::Ready(done);
        }
        self.waker.register(cx.waker());
        ended(self.state.load(Ordering::Relaxed))
    }
}

/// The timer's end of a `Shared`: the callback rings it; dropped unrun (the timer shut
/// down, and its callbacks were dropped), it tells the sleep.
pub(crate) struct Alarm(Arc<Shared>);

impl Alarm {
    pub(crate) fn ring(self) {
        self.0.fire();
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        // After `ring`, or after the sleep abandoned it, this finds the wait ended and does
        // nothing.
        self.0.settle(GONE);
    }
}

/// The timer of a polled sleep.
struct Armed {
    handle: TimerHandle,
    shared: Arc<Shared>,
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
                && armed.shared.is_waiting()
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
            Some(armed) => armed.shared.state.load(Ordering::Relaxed) == FIRED,
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
        let waker = armed.shared.abandon();
        self.engine.scheduler().cancel(armed.handle);
        // The waker is dropped here, where its task runs, rather than by the reaper with
        // the cancelled callback: the task's reference count stays in this core's cache.
        drop(waker);
    }
}

impl Future for Sleep {
    type Output = Result<(), SleepError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(armed) = &this.armed {
            return armed.shared.poll(cx);
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
        let shared = Arc::new(Shared::default());
        // Before the timer exists, so that its fire finds the waker.
        shared.waker.register(cx.waker());
        let alarm = Alarm(Arc::clone(&shared));
        match scheduler.insert_due(scheduler.within(deadline, this.slack), Callback::wake(alarm)) {
            Ok(handle) => {
                this.armed = Some(Armed { handle, shared });
                Poll::Pending
            }
            Err(refused) => {
                // The refused callback is dropped here: nobody is to be woken by it.
                shared.abandon();
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
