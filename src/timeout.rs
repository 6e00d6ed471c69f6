//! [`Timer::timeout`]: a future run until a deadline, on a [`Sleep`].
//!
//! The future is polled first and the sleep only if it is pending, so a future ready at its
//! first poll never schedules a timer nor reads the clock (see `sleep` for the rule on when
//! a deadline is fixed: a delay counts from the first poll).

use crate::error::TimeoutError;
use crate::sleep::{Deadline, Sleep};
use crate::timer::Timer;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pin_project_lite::pin_project! {
    /// A future that runs `F` until a deadline; from [`Timer::timeout`] or
    /// [`Timer::timeout_at`]. It outputs `F`'s output if `F` finishes first, or
    /// [`TimeoutError::Elapsed`] once the deadline has passed. `F` is polled first: if it is
    /// ready at its first poll, no timer is ever scheduled. Dropping the timeout drops `F`
    /// and cancels the timer in O(1).
    ///
    /// Like [`Sleep`], it is `'static` when `F` is, `Send` / `Sync` when `F` is, and keeps
    /// no borrow of the timer.
    ///
    /// ```
    /// use shardwheel::{Timeout, TimeoutError};
    /// use std::future::{pending, Pending};
    /// use std::time::Duration;
    ///
    /// struct Request {
    ///     reply: Timeout<Pending<u32>>, // owned: no lifetime
    /// }
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let request = Request { reply: timer.timeout(Duration::from_millis(5), pending()) };
    /// assert_eq!(futures::executor::block_on(request.reply), Err(TimeoutError::Elapsed));
    /// ```
    #[must_use = "futures do nothing unless polled"]
    #[derive(Debug)]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        sleep: Sleep,
    }
}

impl<F> Timeout<F> {
    // Always inline, as `shardwheel::timeout` and `Sleep::with`: built out of line, the
    // caller's future is copied in through the stack, and a timeout whose future is ready
    // at once cost twice as much (W7 `mode=ready`: 9 ns an operation instead of 4.5).
    #[inline(always)]
    pub(crate) fn new(sleep: Sleep, future: F) -> Self {
        Timeout { future, sleep }
    }

    /// The wrapped future.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let timeout = timer.timeout(Duration::from_secs(1), std::future::ready(7));
    /// assert_eq!(timeout.get_ref().clone().into_inner(), 7);
    /// ```
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The wrapped future, mutably.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut timeout = timer.timeout(Duration::from_secs(1), std::future::ready(7));
    /// *timeout.get_mut() = std::future::ready(8);
    /// assert_eq!(futures::executor::block_on(timeout), Ok(8));
    /// ```
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// The wrapped future, unfinished; its timer is cancelled.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let timeout = timer.timeout(Duration::from_secs(1), async { 7 });
    /// assert_eq!(futures::executor::block_on(timeout.into_inner()), 7);
    /// ```
    pub fn into_inner(self) -> F {
        self.future
    }

    /// The deadline: `None` for a [`Timer::timeout`] not yet polled (its limit counts from
    /// its first poll), the instant otherwise (see [`Sleep::deadline`]).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let at = timer.now() + Duration::from_secs(1);
    /// assert_eq!(timer.timeout_at(at, async {}).deadline(), Some(at));
    /// ```
    pub fn deadline(&self) -> Option<Instant> {
        self.sleep.deadline()
    }

    /// Moves the deadline to `deadline` (see [`Sleep::reset`]).
    ///
    /// ```
    /// use shardwheel::TimeoutError;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let mut stuck = Box::pin(timer.timeout(Duration::from_secs(60), std::future::pending::<()>()));
    /// stuck.as_mut().reset(timer.now() + Duration::from_millis(5));
    /// assert_eq!(futures::executor::block_on(stuck), Err(TimeoutError::Elapsed));
    /// ```
    pub fn reset(self: Pin<&mut Self>, deadline: impl Into<Instant>) {
        self.project().sleep.reset(deadline);
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, TimeoutError>;

    // Inline: out of line, each of an operation's polls (two in W7 `mode=yield1`: the
    // first arms the sleep, the second finds the work done) paid a call, a frame and a
    // dispatch on the work's state: 50 instructions an operation of W7 `mode=yield1`
    // (scripts/instructions-per-op W7), of the 612 a timeout added to the floor.
    #[inline]
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

/// Timeouts, on any executor, as [`Timer::sleep`].
impl Timer {
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
    pub fn timeout<F: Future>(&self, delay: Duration, future: F) -> Timeout<F> {
        Timeout::new(Sleep::new(self, Deadline::AfterFirstPoll(delay)), future)
    }

    /// Runs `future` until `deadline`, by this timer's clock ([`Timer::now`]).
    ///
    /// ```
    /// use shardwheel::TimeoutError;
    /// use std::future::pending;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let deadline = timer.now() + Duration::from_millis(10);
    /// let stuck = timer.timeout_at(deadline, pending::<()>());
    /// assert_eq!(futures::executor::block_on(stuck), Err(TimeoutError::Elapsed));
    /// assert!(timer.now() >= deadline);
    /// ```
    pub fn timeout_at<F: Future>(&self, deadline: impl Into<Instant>, future: F) -> Timeout<F> {
        Timeout::new(self.sleep_until(deadline), future)
    }
}
