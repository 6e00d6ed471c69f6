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
//! A sleep allocates nothing: its timer's callback is the task's waker itself (see
//! `callback`), kept in the timer's slot, and the sleep keeps only the timer's handle. The
//! slot's state says how the wait stands. While the timer is pending, the wait goes on; once
//! the reaper has taken it (to fire it, or to hand it back at shutdown), the wake-up comes,
//! and the sleep finds its deadline passed (`Ok`) or not (the timer shut down). A sleep
//! dropped before its deadline cancels its timer in O(1); the reaper later discards the
//! cancelled waker without waking the task. A timer still in this thread's stage (a
//! timeout whose work finished first, the common case) comes back with its waker, which is
//! dropped on the task's own core and nothing else is touched. (Dropped on another thread
//! while still staged, the timer is cancelled and its waker stays in that stage until the
//! stage is handed over or collected.)
//!
//! A poll with the waker of another task (rare: a task's waker stays the same from poll to
//! poll) cancels the timer and schedules it anew with that waker, at the same deadline;
//! a cancel that finds the timer taken means the wait has ended. The sleep knows its
//! waker by its data pointer and its table's functions (see `Wakes`), holding no
//! reference.

use crate::callback::Callback;
use crate::error::SleepError;
use crate::global::{self, EngineRef};
use crate::handle::TimerHandle;
use crate::timer::Timer;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, RawWakerVTable, Waker};
use std::time::{Duration, Instant};

/// The timer of a polled sleep.
struct Armed {
    handle: TimerHandle,
    /// The waker whose clone its slot holds (see `Wakes`).
    waker: Wakes,
    /// The forks the process descended from when it was armed: in a forked child, its
    /// engine has no reaper (see `global`), and the handle may name a slot of the
    /// process-wide timer rebuilt there.
    forks: u32,
}

/// Which task a waker wakes: its data pointer's address and its table. A poll whose waker
/// has the same data and the same functions (the same table, or one with the same
/// functions in it: the table's address can differ between a waker and its clone, as
/// `Waker::noop`'s does) would be woken by the slot's clone exactly as by its own waker,
/// so the timer stays; any other waker moves the wait to a new timer.
struct Wakes {
    data: usize,
    table: &'static RawWakerVTable,
}

impl Wakes {
    fn of(waker: &Waker) -> Self {
        Wakes {
            data: waker.data().addr(),
            table: waker.vtable(),
        }
    }

    /// Whether `waker` wakes as this one does.
    #[inline]
    fn as_does(&self, waker: &Waker) -> bool {
        waker.data().addr() == self.data && *waker.vtable() == *self.table
    }
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
/// [`shutdown`](Timer::shutdown) ends it with [`SleepError::Shutdown`] (with `Ok` if its
/// deadline had passed, its timer not yet fired). On
/// [`Timer::global`] it holds no reference count, and costs less.
///
/// The deadline of [`Timer::sleep`]`(delay)` is `delay` after the sleep's first poll (see
/// [`deadline`](Self::deadline)); that of [`Timer::sleep_until`] is the instant given. Its
/// timer is scheduled at its first poll (none if the deadline has passed by then); polling
/// again with the same waker keeps that timer, and a poll with another task's waker moves
/// the wait to a new timer at the same deadline (which a full timer can refuse:
/// [`SleepError::Full`]). Dropping the sleep cancels its timer in O(1). A deadline past
/// 584 years after the timer started is clamped to that.
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
        if let Some(armed) = self
            .armed
            .as_ref()
            .filter(|armed| armed.forks == global::forks())
        {
            // A timer that has not fired yet moves; a reset that finds it fired (or firing)
            // fails, and the next poll schedules a new one. A deadline already passed
            // needs no timer: the next poll finds it passed.
            if deadline > scheduler.now()
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
        let scheduler = self.engine.scheduler();
        self.armed.as_ref().is_none_or(|armed| {
            armed.forks != global::forks() || !scheduler.is_pending(armed.handle)
        }) && self.deadline_passed()
    }

    /// Lets go of the timer: wakes nobody any more, and cancels it if it is pending.
    #[inline]
    fn disarm(&mut self) {
        if let Some(armed) = self.armed.take() {
            // Armed before a fork: nothing here to cancel (see `listen`).
            if armed.forks == global::forks() {
                self.let_go_inlined(armed.handle);
            }
        }
    }

    /// Cancels the timer `handle` names; false if it was not pending any more (the wait
    /// has ended). The handle alone, in a register: given the whole `Armed`, a drop copied
    /// it to the stack to pass it.
    #[inline(never)]
    fn let_go(&self, handle: TimerHandle) -> bool {
        self.let_go_inlined(handle)
    }

    /// `let_go` inlined into its caller, the drop (a timeout's, in the user's crate, with
    /// `EngineRef::scheduler` and `Timer::global` inlined there too): the call saved and
    /// restored six registers the drop had saved already, and the engine's lookup was a
    /// call through the GOT (callgrind, `scripts/instructions-per-op W7`: 515 -> 508
    /// instructions over the floor). `listen` and `reset`, rarer, keep the call.
    #[inline(always)]
    fn let_go_inlined(&self, handle: TimerHandle) -> bool {
        let scheduler = self.engine.scheduler();
        // A timer still in this thread's stage (a timeout whose work finished first, the
        // common case) comes back unrun with its waker, dropped here, on the task's core.
        // SAFETY: a sleep's handle never leaves it (`Armed` is private, and no method
        // hands it out), and the sleep is borrowed here: no other thread holds it.
        if let Some(callback) = unsafe { scheduler.take_staged(handle) } {
            callback.discard();
            return true;
        }
        // Otherwise the reaper discards the cancelled waker, waking nobody.
        scheduler.cancel(handle)
    }

    /// Whether the deadline has passed (a delay not yet started has not, unless zero).
    fn deadline_passed(&self) -> bool {
        match self.due {
            Deadline::At(deadline) => deadline <= self.engine.scheduler().now(),
            Deadline::AfterFirstPoll(delay) => delay.is_zero(),
        }
    }

    /// The output of a wait whose timer is gone: its deadline has passed, or the timer
    /// shut down before (the reaper handed the timer back).
    fn outcome(&self) -> Poll<Result<(), SleepError>> {
        Poll::Ready(if self.deadline_passed() {
            Ok(())
        } else {
            Err(SleepError::Shutdown)
        })
    }

    /// A poll of an armed sleep: pending while its timer is, with the timer moved to a
    /// new waker if the task's has changed.
    fn listen(&mut self, waker: &Waker) -> Option<Poll<Result<(), SleepError>>> {
        let armed = self.armed.as_ref()?;
        if armed.forks != global::forks() {
            // Armed before a fork: its engine is gone here, as if shut down.
            self.armed = None;
            return Some(self.outcome());
        }
        if !self.engine.scheduler().is_pending(armed.handle) {
            return Some(self.outcome());
        }
        if armed.waker.as_does(waker) {
            return Some(Poll::Pending);
        }
        let armed = self.armed.take()?;
        if !self.let_go(armed.handle) {
            // Taken by the reaper meanwhile: the old waker is woken, but this poll ends it.
            return Some(self.outcome());
        }
        // Cancelled: the caller schedules the timer anew, with this waker.
        None
    }
}

impl Future for Sleep {
    type Output = Result<(), SleepError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(polled) = this.listen(cx.waker()) {
            return polled;
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
        // What the clone the slot keeps wakes, not the waker polled with: the clone lives
        // while the timer is pending, so its data cannot be another task's meanwhile.
        let waker = cx.waker().clone();
        let wakes = Wakes::of(&waker);
        let due = scheduler.within(deadline, this.slack);
        match scheduler.insert_due_inlined(due, Callback::wake(waker)) {
            Ok(handle) => {
                this.armed = Some(Armed {
                    handle,
                    waker: wakes,
                    // The count the schedule just checked `global::forks()` against
                    // (it schedules nothing under another): a field of the scheduler at
                    // hand, not the static's load through the GOT again.
                    forks: scheduler.forks(),
                });
                Poll::Pending
            }
            Err(refused) => {
                // Discarded: the refused wake-up wakes nobody.
                Poll::Ready(Err(refused.map(Callback::discard).into()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    struct Task;

    impl Wake for Task {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn a_waker_wakes_as_its_clone_does_and_not_as_another_tasks() {
        let noop = Waker::noop();
        assert!(Wakes::of(&noop.clone()).as_does(noop));
        let (first, second) = (Waker::from(Arc::new(Task)), Waker::from(Arc::new(Task)));
        assert!(Wakes::of(&first.clone()).as_does(&first));
        assert!(!Wakes::of(&first).as_does(&second), "another task's");
        assert!(!Wakes::of(&first).as_does(noop), "another kind of waker");
    }
}
