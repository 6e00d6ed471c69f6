//! Per-timer slack: timers, sleeps and timeouts that may fire a little after their
//! deadline, so that many share one reaper wake-up, beside timers that keep exact ones.
//!
//! A timer scheduled with `slack` is filed at its deadline rounded up to a multiple of the
//! largest power-of-two number of ticks not above the slack (of nanoseconds, for a slack
//! under a tick): never before the deadline asked for, never more than `slack` after it.
//! Timers whose deadlines fall in one such step share a deadline, and so a bucket and a
//! wake-up; timers scheduled without slack are not moved. Two timers within each other's
//! slack but on either side of a step's boundary still fire in two wake-ups (as Linux's
//! timer slack and Go's timer coalescing round), which keeps the rule simple and the
//! schedule path free of any search: one division.

use crate::callback::Callback;
use crate::clock;
use crate::error::{ScheduleError, StaleHandle};
use crate::handle::TimerHandle;
use crate::scheduler::Scheduler;
use crate::sleep::{Deadline, Sleep};
use crate::timeout::Timeout;
use crate::timer::Timer;
use std::future::Future;
use std::time::{Duration, Instant};

impl Timer {
    /// Schedules `callback` to run once, `delay` from now or up to `slack` later: timers
    /// due within a step of the slack fire in one reaper wake-up (see
    /// [`insert_within`](Timer::insert_within)). Zero slack is [`schedule`](Timer::schedule).
    ///
    /// # Errors
    ///
    /// As [`schedule`](Timer::schedule).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let fired = Arc::new(AtomicUsize::new(0));
    /// for delay in [3, 6] {
    ///     let fired = Arc::clone(&fired);
    ///     let slack = Duration::from_millis(10); // 8 ms steps on a 1 ms tick
    ///     timer
    ///         .schedule_within(Duration::from_millis(delay), slack, move || {
    ///             fired.fetch_add(1, Ordering::Relaxed);
    ///         })
    ///         .unwrap();
    /// }
    /// timer.advance(Duration::from_millis(7)).unwrap();
    /// assert_eq!(fired.load(Ordering::Relaxed), 0);
    /// timer.advance(Duration::from_millis(1)).unwrap(); // both, at 8 ms
    /// assert_eq!(fired.load(Ordering::Relaxed), 2);
    /// ```
    pub fn schedule_within(
        &self,
        delay: Duration,
        slack: Duration,
        callback: impl FnOnce() + Send + 'static,
    ) -> Result<TimerHandle, ScheduleError<Callback>> {
        self.insert_within(delay, slack, Callback::new(callback))
    }

    /// Schedules `callback` to run once at `instant` or up to `slack` later (see
    /// [`schedule_within`](Timer::schedule_within)).
    ///
    /// # Errors
    ///
    /// As [`schedule`](Timer::schedule).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let at = timer.now() + Duration::from_millis(5);
    /// timer.schedule_at_within(at, Duration::from_millis(4), || {}).unwrap();
    /// timer.advance(Duration::from_millis(8)).unwrap(); // 5 ms rounded up to 4 ms steps
    /// assert_eq!(timer.pending(), 0);
    /// ```
    pub fn schedule_at_within(
        &self,
        instant: Instant,
        slack: Duration,
        callback: impl FnOnce() + Send + 'static,
    ) -> Result<TimerHandle, ScheduleError<Callback>> {
        self.insert_at_within(instant, slack, Callback::new(callback))
    }

    /// A future that completes `delay` after its first poll, or up to `slack` later, so
    /// that sleeps due close together wake their tasks in one reaper wake-up (see
    /// [`Timer::sleep`] and [`insert_within`](Timer::insert_within)). Its
    /// [`deadline`](Sleep::deadline) is the one asked for; a [`reset`](Sleep::reset)
    /// keeps the slack.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let start = Instant::now();
    /// let sleep = timer.sleep_within(Duration::from_millis(5), Duration::from_millis(2));
    /// futures::executor::block_on(sleep).unwrap();
    /// assert!(start.elapsed() >= Duration::from_millis(5));
    /// ```
    pub fn sleep_within(&self, delay: Duration, slack: Duration) -> Sleep {
        self.sleep(delay).within(slack)
    }

    /// A future that completes at `deadline`, or up to `slack` later (see
    /// [`sleep_within`](Timer::sleep_within)).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let deadline = timer.now() + Duration::from_millis(5);
    /// let sleep = timer.sleep_until_within(deadline, Duration::from_millis(2));
    /// futures::executor::block_on(sleep).unwrap();
    /// assert!(timer.now() >= deadline);
    /// ```
    pub fn sleep_until_within(&self, deadline: impl Into<Instant>, slack: Duration) -> Sleep {
        self.sleep_until(deadline).within(slack)
    }

    /// Runs `future` for at most `delay` from its first poll, or up to `slack` more: a
    /// network timeout that need not be exact, sharing reaper wake-ups with others (see
    /// [`Timer::timeout`] and [`sleep_within`](Timer::sleep_within)).
    ///
    /// ```
    /// use shardwheel::TimeoutError;
    /// use std::future::pending;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let slack = Duration::from_millis(5);
    /// let stuck = timer.timeout_within(Duration::from_millis(10), slack, pending::<()>());
    /// assert_eq!(futures::executor::block_on(stuck), Err(TimeoutError::Elapsed));
    /// ```
    pub fn timeout_within<F: Future>(
        &self,
        delay: Duration,
        slack: Duration,
        future: F,
    ) -> Timeout<F> {
        let sleep = Sleep::new(self, Deadline::AfterFirstPoll(delay)).within(slack);
        Timeout::new(sleep, future)
    }

    /// Runs `future` until `deadline`, or up to `slack` later (see
    /// [`timeout_within`](Timer::timeout_within)).
    ///
    /// ```
    /// use shardwheel::TimeoutError;
    /// use std::future::pending;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let deadline = timer.now() + Duration::from_millis(10);
    /// let stuck = timer.timeout_at_within(deadline, Duration::from_millis(5), pending::<()>());
    /// assert_eq!(futures::executor::block_on(stuck), Err(TimeoutError::Elapsed));
    /// assert!(timer.now() >= deadline);
    /// ```
    pub fn timeout_at_within<F: Future>(
        &self,
        deadline: impl Into<Instant>,
        slack: Duration,
        future: F,
    ) -> Timeout<F> {
        Timeout::new(self.sleep_until_within(deadline, slack), future)
    }
}

impl<T: Send + 'static> Timer<T> {
    /// Schedules a timer carrying `payload`, due `delay` from now or up to `slack` later.
    ///
    /// Its deadline is rounded up to a multiple of the largest power-of-two number of
    /// ticks not above `slack` (of nanoseconds, for a slack under a tick): it never fires
    /// before `delay` has passed nor, the reaper's own wake-up aside, more than `slack`
    /// after it, and timers whose deadlines fall in one such step fire in one reaper
    /// wake-up. Timers scheduled without slack keep their exact deadlines beside them.
    /// Zero slack is [`insert`](Timer::insert). The slack is the schedule's, not the
    /// timer's: [`reset`](Timer::reset) moves it to an exact deadline,
    /// [`reset_within`](Timer::reset_within) to one with slack.
    ///
    /// # Errors
    ///
    /// As [`insert`](Timer::insert).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let builder = shardwheel::Timer::builder().shards(1).manual();
    /// let timer = builder.build_with(|_: u32| {}).unwrap();
    /// let slack = Duration::from_millis(10); // 8 ms steps on a 1 ms tick
    /// timer.insert_within(Duration::from_millis(3), slack, 1).unwrap();
    /// timer.insert(Duration::from_millis(3), 2).unwrap(); // exact
    /// timer.advance(Duration::from_millis(3)).unwrap();
    /// assert_eq!(timer.pending(), 1); // the exact one fired
    /// timer.advance(Duration::from_millis(5)).unwrap();
    /// assert_eq!(timer.pending(), 0);
    /// ```
    #[inline]
    pub fn insert_within(
        &self,
        delay: Duration,
        slack: Duration,
        payload: T,
    ) -> Result<TimerHandle, ScheduleError<T>> {
        let scheduler = self.scheduler();
        let deadline = after(scheduler, delay, slack);
        scheduler.insert_due(deadline, payload)
    }

    /// Schedules a timer carrying `payload`, due at `instant` or up to `slack` later (see
    /// [`insert_within`](Timer::insert_within)).
    ///
    /// # Errors
    ///
    /// As [`insert`](Timer::insert).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let builder = shardwheel::Timer::builder().shards(1).manual();
    /// let timer = builder.build_with(|_: &str| {}).unwrap();
    /// let at = timer.now() + Duration::from_millis(1);
    /// timer.insert_at_within(at, Duration::from_millis(2), "retry").unwrap();
    /// timer.advance(Duration::from_millis(2)).unwrap();
    /// assert_eq!(timer.pending(), 0);
    /// ```
    pub fn insert_at_within(
        &self,
        instant: Instant,
        slack: Duration,
        payload: T,
    ) -> Result<TimerHandle, ScheduleError<T>> {
        let scheduler = self.scheduler();
        let deadline = scheduler.within(scheduler.deadline_at(instant), clock::nanos(slack));
        scheduler.insert_due(deadline, payload)
    }

    /// Moves a pending timer to `delay` from now or up to `slack` later, as
    /// [`reset`](Timer::reset) does (see [`insert_within`](Timer::insert_within)).
    ///
    /// # Errors
    ///
    /// As [`reset`](Timer::reset).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let slack = Duration::from_millis(10);
    /// let idle = timer.schedule_within(Duration::from_secs(30), slack, || {}).unwrap();
    /// timer.reset_within(idle, Duration::from_secs(60), slack).unwrap();
    /// timer.advance(Duration::from_secs(59)).unwrap();
    /// assert_eq!(timer.pending(), 1);
    /// ```
    pub fn reset_within(
        &self,
        handle: TimerHandle,
        delay: Duration,
        slack: Duration,
    ) -> Result<(), StaleHandle> {
        let scheduler = self.scheduler();
        let deadline = after(scheduler, delay, slack);
        scheduler.reset_due(handle, deadline)
    }
}

/// The deadline of a timer `delay` from now with `slack` of tolerance.
#[inline]
fn after<T: Send + 'static>(scheduler: &Scheduler<T>, delay: Duration, slack: Duration) -> u64 {
    scheduler.within(scheduler.deadline_after(delay), clock::nanos(slack))
}
