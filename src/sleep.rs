//! Futures on the engine, for any executor: [`Timer::sleep`], [`Timer::sleep_until`] and
//! [`Timer::timeout`].
//!
//! A sleep schedules its timer at its first poll, not when it is made, and a timeout reads
//! the clock only then: a `timeout` whose future is ready at once costs no timer and no
//! clock read at all (pingora-timeout's lesson: most timeouts never need one). A deadline
//! already passed when the sleep is made needs no timer either. The timer's callback owns one end of a `Shared`:
//! a state byte and the waker of the task that awaits the sleep. Each poll registers its
//! waker there (an `AtomicWaker`), so a task that moves to another waker keeps its timer.
//! The callback marks the state and wakes; a sleep dropped before its deadline marks the
//! state first, so that the cancelled callback, dropped later by the reaper, wakes nobody,
//! and then cancels its timer in O(1).

use crate::callback::Callback;
use crate::error::{SleepError, TimeoutError};
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
/// Its timer is scheduled at its first poll (none if the deadline had passed when it was
/// made); polling again, with the same waker or another, keeps that timer. Dropping the sleep cancels it in
/// O(1). A deadline past 584 years after the timer started is clamped to that.
#[must_use = "futures do nothing unless polled"]
pub struct Sleep<'a> {
    timer: &'a Timer,
    due: Due,
    armed: Option<Armed>,
}

/// When a sleep ends.
#[derive(Debug, Clone, Copy)]
enum Due {
    /// At this many nanoseconds since the timer's start.
    At(u64),
    /// This long after the first poll (a timeout's limit).
    AfterFirstPoll(Duration),
    /// It had passed when the sleep was made or reset.
    Passed,
}

impl<'a> Sleep<'a> {
    fn new(timer: &'a Timer, due: Due) -> Self {
        Sleep {
            timer,
            due,
            armed: None,
        }
    }

    /// `Due` for a deadline, by a reading of the clock.
    fn due_at(timer: &Timer, deadline: u64) -> Due {
        if deadline <= timer.scheduler().now() {
            Due::Passed
        } else {
            Due::At(deadline)
        }
    }

    /// Moves the deadline to `deadline`, whether or not the sleep has completed: it
    /// completes again once the new deadline passes. A pending timer is moved in place
    /// (O(1), same timer); one that has fired is replaced at the next poll.
    pub fn reset(&mut self, deadline: Instant) {
        self.due = Self::due_at(self.timer, self.timer.scheduler().deadline_at(deadline));
        if let (Some(armed), Due::At(deadline)) = (&self.armed, self.due) {
            // A timer that has not fired yet moves; a reset that finds it fired (or firing)
            // fails, and the next poll schedules a new one.
            if armed.shared.is_waiting()
                && self
                    .timer
                    .scheduler()
                    .reset_due(armed.handle, deadline)
                    .is_ok()
            {
                return;
            }
        }
        self.disarm();
    }

    /// Whether the deadline has passed and the sleep's timer fired (or was not needed).
    pub fn is_elapsed(&self) -> bool {
        match &self.armed {
            Some(armed) => armed.shared.state.load(Ordering::Relaxed) == FIRED,
            None => match self.due {
                Due::At(deadline) => deadline <= self.timer.scheduler().now(),
                Due::AfterFirstPoll(_) => false,
                Due::Passed => true,
            },
        }
    }

    /// Lets go of the timer: wakes nobody any more, and cancels it if it is pending.
    fn disarm(&mut self) {
        if let Some(armed) = self.armed.take() {
            let waker = armed.shared.abandon();
            self.timer.scheduler().cancel(armed.handle);
            // The waker is dropped here, where its task runs, rather than by the reaper
            // with the cancelled callback: the task's reference count stays in this core's
            // cache.
            drop(waker);
        }
    }
}

impl Future for Sleep<'_> {
    type Output = Result<(), SleepError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(armed) = &this.armed {
            return armed.shared.poll(cx);
        }
        // A deadline that passes between the making and this poll is not looked for: its
        // timer fires at the reaper's next pass.
        let deadline = match this.due {
            Due::At(deadline) => deadline,
            Due::AfterFirstPoll(delay) if !delay.is_zero() => {
                let deadline = this.timer.scheduler().deadline_after(delay);
                this.due = Due::At(deadline);
                deadline
            }
            Due::AfterFirstPoll(_) | Due::Passed => {
                this.due = Due::Passed;
                return Poll::Ready(Ok(()));
            }
        };
        let shared = Arc::new(Shared::default());
        // Before the timer exists, so that its fire finds the waker.
        shared.waker.register(cx.waker());
        let alarm = Alarm(Arc::clone(&shared));
        match this
            .timer
            .scheduler()
            .insert_due(deadline, Callback::wake(alarm))
        {
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

impl Drop for Sleep<'_> {
    fn drop(&mut self) {
        self.disarm();
    }
}

impl std::fmt::Debug for Sleep<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleep")
            .field("due", &self.due)
            .field("armed", &self.armed.is_some())
            .finish()
    }
}

pin_project_lite::pin_project! {
    /// A future that runs `F` until a deadline; from [`Timer::timeout`]. It outputs `F`'s
    /// output if `F` finishes first, or [`TimeoutError::Elapsed`] once the deadline has
    /// passed. `F` is polled first: if it is ready at its first poll, no timer is ever
    /// scheduled. Dropping the timeout drops `F` and cancels the timer in O(1).
    #[must_use = "futures do nothing unless polled"]
    #[derive(Debug)]
    pub struct Timeout<'a, F> {
        #[pin]
        future: F,
        sleep: Sleep<'a>,
    }
}

impl<F> Timeout<'_, F> {
    /// The wrapped future, unfinished.
    pub fn into_inner(self) -> F {
        self.future
    }
}

impl<F: Future> Future for Timeout<'_, F> {
    type Output = Result<F::Output, TimeoutError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match Pin::new(this.sleep).poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Err(TimeoutError::Elapsed)),
            Poll::Ready(Err(error)) => Poll::Ready(Err(TimeoutError::Sleep(error))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Futures: these work on any executor (tokio, smol, `futures::executor::block_on`), as the
/// timer's reapers wake the tasks. Share the timer between tasks by reference or in an
/// `Arc`.
impl Timer {
    /// A future that completes `delay` from now (see [`Sleep`]).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let start = Instant::now();
    /// futures::executor::block_on(timer.sleep(Duration::from_millis(20))).unwrap();
    /// assert!(start.elapsed() >= Duration::from_millis(20));
    /// ```
    pub fn sleep(&self, delay: Duration) -> Sleep<'_> {
        if delay.is_zero() {
            return Sleep::new(self, Due::Passed);
        }
        Sleep::new(self, Due::At(self.scheduler().deadline_after(delay)))
    }

    /// A future that completes at `deadline` (at its first poll if that has passed).
    pub fn sleep_until(&self, deadline: Instant) -> Sleep<'_> {
        Sleep::new(
            self,
            Sleep::due_at(self, self.scheduler().deadline_at(deadline)),
        )
    }

    /// Runs `future` for at most `delay` from its first poll (see [`Timeout`]).
    ///
    /// ```
    /// use shardwheel::TimeoutError;
    /// use std::future::pending;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// futures::executor::block_on(async {
    ///     let quick = timer.timeout(Duration::from_secs(5), async { 7 });
    ///     assert_eq!(quick.await, Ok(7)); // ready at once: no timer was scheduled
    ///     let stuck = timer.timeout(Duration::from_millis(10), pending::<()>());
    ///     assert_eq!(stuck.await, Err(TimeoutError::Elapsed));
    /// });
    /// ```
    pub fn timeout<F: Future>(&self, delay: Duration, future: F) -> Timeout<'_, F> {
        Timeout {
            future,
            sleep: Sleep::new(self, Due::AfterFirstPoll(delay)),
        }
    }
}
