//! [`Interval`]: an async stream of ticks a period apart, as tokio's `time::Interval`, on a
//! shardwheel [`Timer`].
//!
//! An interval is one [`Sleep`] moved to each next tick's deadline in place (no timer made
//! or freed per tick). When a tick is missed (polled more than 5 ms after its deadline,
//! tokio's threshold: a busy task, a slow executor), the [`MissedTickBehavior`] picks the
//! next deadline, as tokio documents each one: make up the missed ticks at once
//! (`Burst`), start again a period after now (`Delay`), or go on at the next tick of the
//! original grid after now (`Skip`).

use crate::clock;
use crate::error::{PeriodicError, SleepError};
use crate::sleep::Sleep;
use crate::timer::Timer;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How late a tick may come before it counts as missed (tokio's threshold).
const MISSED_AFTER: Duration = Duration::from_millis(5);

/// What an [`Interval`] does when a tick comes late, as tokio's `MissedTickBehavior`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissedTickBehavior {
    /// The missed ticks come at once, one per poll, until the interval is back on its
    /// grid (`start + k * period`). The default, as tokio's.
    #[default]
    Burst,
    /// The next tick is a period after the late one came: the grid moves.
    Delay,
    /// The missed ticks are skipped: the next is the first tick of the grid after now.
    Skip,
}

impl MissedTickBehavior {
    /// The deadline of the tick after the one due at `tick`, which came at `now`.
    fn next(self, tick: Instant, now: Instant, period: Duration) -> Instant {
        // A period too long for an `Instant` puts the next tick far away, never back at
        // this one (which would tick without end).
        let on_grid = clock::instant_after(tick, period);
        let missed = tick
            .checked_add(MISSED_AFTER)
            .is_some_and(|late| now > late);
        match self {
            _ if !missed => on_grid,
            MissedTickBehavior::Burst => on_grid,
            MissedTickBehavior::Delay => clock::instant_after(now, period),
            MissedTickBehavior::Skip => {
                let period_nanos = period.as_nanos();
                let behind = (now - tick).as_nanos() % period_nanos;
                // `behind < period`, so it fits a u64 whenever the period does; a period
                // too long for that is never missed by `now`.
                let to_next = u64::try_from(period_nanos - behind).unwrap_or(u64::MAX);
                clock::instant_after(now, Duration::from_nanos(to_next))
            }
        }
    }
}

/// Ticks a period apart, from [`Timer::interval`] or [`Timer::interval_at`]: await
/// [`tick`](Self::tick) in a loop. Any executor; `Stream` under feature `stream`.
///
/// Each tick gives the instant it was due at (the timer's clock, [`Timer::now`]); it comes
/// at or after it, never before. A tick that comes late is handled by the interval's
/// [`MissedTickBehavior`].
///
/// ```
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
/// let mut interval = timer.interval(Duration::from_millis(2)).unwrap();
/// futures::executor::block_on(async {
///     let first = interval.tick().await.unwrap(); // at once
///     let second = interval.tick().await.unwrap();
///     assert_eq!(second - first, Duration::from_millis(2));
/// });
/// ```
#[derive(Debug)]
pub struct Interval {
    sleep: Sleep,
    /// The deadline of the next tick.
    next: Instant,
    period: Duration,
    missed: MissedTickBehavior,
    timer: Timer,
}

impl Interval {
    /// The next tick: `Ready(Ok(instant it was due))`, or `Pending` (the task is woken when
    /// it comes due).
    ///
    /// # Errors
    ///
    /// [`SleepError`] if the tick's timer could not be scheduled or the timer shut down.
    ///
    /// ```
    /// use std::task::{Context, Waker};
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut interval = timer.interval(Duration::from_secs(1)).unwrap();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(interval.poll_tick(&mut cx).is_ready()); // the first tick: at once
    /// assert!(interval.poll_tick(&mut cx).is_pending());
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// assert!(interval.poll_tick(&mut cx).is_ready());
    /// ```
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Result<Instant, SleepError>> {
        if let Err(error) = std::task::ready!(Pin::new(&mut self.sleep).poll(cx)) {
            return Poll::Ready(Err(error));
        }
        let tick = self.next;
        self.next = self.missed.next(tick, self.timer.now(), self.period);
        self.sleep.reset(self.next);
        Poll::Ready(Ok(tick))
    }

    /// [`poll_tick`](Self::poll_tick) as a future.
    ///
    /// # Errors
    ///
    /// As [`poll_tick`](Self::poll_tick).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let mut heartbeat = timer.interval(Duration::from_millis(1)).unwrap();
    /// futures::executor::block_on(async {
    ///     for _ in 0..3 {
    ///         heartbeat.tick().await.unwrap();
    ///     }
    /// });
    /// ```
    pub async fn tick(&mut self) -> Result<Instant, SleepError> {
        std::future::poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Starts the interval again: the next tick a period from now.
    ///
    /// ```
    /// use std::task::{Context, Waker};
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut interval = timer.interval(Duration::from_secs(1)).unwrap();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(interval.poll_tick(&mut cx).is_ready()); // the first tick: at once
    /// timer.advance(Duration::from_millis(500)).unwrap();
    /// interval.reset(); // the next tick at 1.5 s, not 1 s
    /// timer.advance(Duration::from_millis(500)).unwrap();
    /// assert!(interval.poll_tick(&mut cx).is_pending());
    /// timer.advance(Duration::from_millis(500)).unwrap();
    /// assert!(interval.poll_tick(&mut cx).is_ready());
    /// ```
    pub fn reset(&mut self) {
        self.reset_after(self.period);
    }

    /// Starts the interval again with its next tick at once (as tokio's).
    ///
    /// ```
    /// use std::task::{Context, Waker};
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut interval = timer.interval(Duration::from_secs(1)).unwrap();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(interval.poll_tick(&mut cx).is_ready()); // the first tick: at once
    /// assert!(interval.poll_tick(&mut cx).is_pending());
    /// interval.reset_immediately();
    /// assert!(interval.poll_tick(&mut cx).is_ready());
    /// ```
    pub fn reset_immediately(&mut self) {
        self.reset_at(self.timer.now());
    }

    /// Starts the interval again with its next tick `after` from now (as tokio's).
    ///
    /// ```
    /// use std::task::{Context, Waker};
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut interval = timer.interval(Duration::from_secs(1)).unwrap();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(interval.poll_tick(&mut cx).is_ready()); // the first tick: at once
    /// interval.reset_after(Duration::from_secs(3));
    /// timer.advance(Duration::from_secs(2)).unwrap();
    /// assert!(interval.poll_tick(&mut cx).is_pending());
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// assert!(interval.poll_tick(&mut cx).is_ready());
    /// ```
    pub fn reset_after(&mut self, after: Duration) {
        self.reset_at(clock::instant_after(self.timer.now(), after));
    }

    /// Starts the interval again with its next tick at `deadline` (by the timer's clock,
    /// [`Timer::now`]), and the ticks after it a period apart (as tokio's).
    ///
    /// ```
    /// use std::task::{Context, Poll, Waker};
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut interval = timer.interval(Duration::from_secs(1)).unwrap();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(interval.poll_tick(&mut cx).is_ready()); // the first tick: at once
    /// let at = timer.now() + Duration::from_millis(300);
    /// interval.reset_at(at);
    /// timer.advance(Duration::from_millis(300)).unwrap();
    /// assert_eq!(interval.poll_tick(&mut cx).map(Result::unwrap), Poll::Ready(at));
    /// ```
    pub fn reset_at(&mut self, deadline: impl Into<Instant>) {
        self.next = deadline.into();
        self.sleep.reset(self.next);
    }

    /// The period between ticks.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let interval = timer.interval(Duration::from_secs(3)).unwrap();
    /// assert_eq!(interval.period(), Duration::from_secs(3));
    /// ```
    pub fn period(&self) -> Duration {
        self.period
    }

    /// What the interval does when a tick comes late.
    ///
    /// ```
    /// use shardwheel::MissedTickBehavior;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let interval = timer.interval(Duration::from_secs(1)).unwrap();
    /// assert_eq!(interval.missed_tick_behavior(), MissedTickBehavior::Burst);
    /// ```
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.missed
    }

    /// Sets what the interval does when a tick comes late.
    ///
    /// ```
    /// use shardwheel::MissedTickBehavior;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut interval = timer.interval(Duration::from_secs(1)).unwrap();
    /// interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
    /// assert_eq!(interval.missed_tick_behavior(), MissedTickBehavior::Skip);
    /// ```
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.missed = behavior;
    }
}

#[cfg(feature = "stream")]
impl futures_core::Stream for Interval {
    type Item = Result<Instant, SleepError>;

    /// [`Interval::poll_tick`]: never ends.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_tick(cx).map(Some)
    }
}

/// Intervals, on any executor, as [`Timer::sleep`].
impl Timer {
    /// Ticks every `period`, the first at once (see [`Interval`]).
    ///
    /// # Errors
    ///
    /// [`PeriodicError::ZeroPeriod`] for a zero period.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// assert!(timer.interval(Duration::ZERO).is_err());
    /// let interval = timer.interval(Duration::from_millis(10)).unwrap();
    /// assert_eq!(interval.period(), Duration::from_millis(10));
    /// ```
    pub fn interval(&self, period: Duration) -> Result<Interval, PeriodicError> {
        self.interval_at(self.now(), period)
    }

    /// Ticks every `period`, the first at `start` (by [`Timer::now`]'s clock).
    ///
    /// # Errors
    ///
    /// [`PeriodicError::ZeroPeriod`] for a zero period.
    ///
    /// ```
    /// use std::task::{Context, Waker};
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let start = timer.now() + Duration::from_secs(5);
    /// let mut interval = timer.interval_at(start, Duration::from_secs(1)).unwrap();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(interval.poll_tick(&mut cx).is_pending());
    /// timer.advance(Duration::from_secs(5)).unwrap();
    /// assert_eq!(interval.poll_tick(&mut cx).map(Result::unwrap), std::task::Poll::Ready(start));
    /// ```
    pub fn interval_at(
        &self,
        start: impl Into<Instant>,
        period: Duration,
    ) -> Result<Interval, PeriodicError> {
        let start = start.into();
        if period.is_zero() {
            return Err(PeriodicError::ZeroPeriod);
        }
        Ok(Interval {
            sleep: self.sleep_until(start),
            next: start,
            period,
            missed: MissedTickBehavior::default(),
            timer: self.clone(),
        })
    }
}
