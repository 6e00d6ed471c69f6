//! [`Interval`], [`interval`] and [`interval_at`]: tokio's, on the engine's
//! [`crate::Interval`].

#[cfg(feature = "test-util")]
use super::paused;
use super::sleep::timer_error;
use super::{Instant, MissedTickBehavior};
use crate::Timer;
use std::task::{Context, Poll};
use std::time::Duration;

/// Ticks a period apart, as tokio's `time::Interval`: [`tick`](Self::tick) gives the
/// [`Instant`] each tick was due at, the first at once; late ticks follow the
/// [`MissedTickBehavior`] (tokio's three, with tokio's 5 ms threshold). From [`interval`]
/// or [`interval_at`], on the process-wide timer: the engine's [`crate::Interval`]
/// inside (one timer moved from tick to tick).
///
/// Differs from tokio's: it panics at a tick if the engine was shut down or is full,
/// where tokio's panics if its runtime's driver is gone ([`crate::Interval`] gives these as
/// values); it works on any executor.
///
/// ```
/// use shardwheel::time::{self, Duration};
///
/// # futures::executor::block_on(async {
/// let mut heartbeat = time::interval(Duration::from_millis(2));
/// let first = heartbeat.tick().await; // at once
/// let second = heartbeat.tick().await;
/// assert_eq!(second - first, Duration::from_millis(2));
/// # });
/// ```
#[derive(Debug)]
pub struct Interval {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Engine(crate::Interval),
    /// Made while tokio's clock was paused (feature `test-util`, see `paused`).
    #[cfg(feature = "test-util")]
    Tokio(tokio::time::Interval),
}

/// Ticks every `period`, the first at once, as tokio's `time::interval`.
///
/// # Panics
///
/// If `period` is zero, as tokio's (the engine's [`Timer::interval`] returns an error
/// instead).
///
/// ```
/// use shardwheel::time::{self, Duration};
///
/// let interval = time::interval(Duration::from_secs(1));
/// assert_eq!(interval.period(), Duration::from_secs(1));
/// ```
#[track_caller]
pub fn interval(period: Duration) -> Interval {
    interval_at(Instant::now(), period)
}

/// Ticks every `period`, the first at `start`, as tokio's `time::interval_at`.
///
/// # Panics
///
/// If `period` is zero, as tokio's.
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures::executor::block_on(async {
/// let start = Instant::now() + Duration::from_millis(2);
/// let mut interval = time::interval_at(start, Duration::from_secs(1));
/// assert_eq!(interval.tick().await, start);
/// # });
/// ```
#[track_caller]
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    assert!(period > Duration::ZERO, "`period` must be non-zero.");
    #[cfg(feature = "test-util")]
    if paused::on_tokio() {
        let tokio = tokio::time::interval_at(start.into(), period);
        return Interval {
            inner: Inner::Tokio(tokio),
        };
    }
    match Timer::global().interval_at(start, period) {
        Ok(interval) => Interval {
            inner: Inner::Engine(interval),
        },
        Err(error) => unreachable!("the period was checked: {error}"),
    }
}

impl Interval {
    /// The next tick: the instant it was due at, once it has come.
    ///
    /// # Panics
    ///
    /// As [`poll_tick`](Self::poll_tick).
    ///
    /// ```
    /// use shardwheel::time::{self, Duration, Instant};
    ///
    /// # futures::executor::block_on(async {
    /// let mut interval = time::interval(Duration::from_millis(1));
    /// let tick = interval.tick().await;
    /// assert!(tick <= Instant::now());
    /// # });
    /// ```
    pub async fn tick(&mut self) -> Instant {
        std::future::poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// The next tick: `Ready(instant it was due at)`, or `Pending` (the task is woken when
    /// it comes).
    ///
    /// # Panics
    ///
    /// If the engine shut down or is full (see [`Interval`]).
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    /// use std::task::{Context, Waker};
    ///
    /// let mut interval = time::interval(Duration::from_secs(60));
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(interval.poll_tick(&mut cx).is_ready()); // the first tick: at once
    /// assert!(interval.poll_tick(&mut cx).is_pending());
    /// ```
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        match &mut self.inner {
            Inner::Engine(interval) => match interval.poll_tick(cx) {
                Poll::Ready(Ok(tick)) => Poll::Ready(Instant::from_std(tick)),
                Poll::Ready(Err(error)) => timer_error(error),
                Poll::Pending => Poll::Pending,
            },
            #[cfg(feature = "test-util")]
            Inner::Tokio(interval) => interval.poll_tick(cx).map(Instant::from),
        }
    }

    /// Starts again: the next tick a period from now.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    /// use std::task::{Context, Waker};
    ///
    /// let mut interval = time::interval(Duration::from_secs(60));
    /// interval.reset(); // the first tick is no longer at once
    /// assert!(interval.poll_tick(&mut Context::from_waker(Waker::noop())).is_pending());
    /// ```
    pub fn reset(&mut self) {
        match &mut self.inner {
            Inner::Engine(interval) => interval.reset(),
            #[cfg(feature = "test-util")]
            Inner::Tokio(interval) => interval.reset(),
        }
    }

    /// Starts again: the next tick at once.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    /// use std::task::{Context, Waker};
    ///
    /// let mut interval = time::interval(Duration::from_secs(60));
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(interval.poll_tick(&mut cx).is_ready());
    /// interval.reset_immediately();
    /// assert!(interval.poll_tick(&mut cx).is_ready());
    /// ```
    pub fn reset_immediately(&mut self) {
        match &mut self.inner {
            Inner::Engine(interval) => interval.reset_immediately(),
            #[cfg(feature = "test-util")]
            Inner::Tokio(interval) => interval.reset_immediately(),
        }
    }

    /// Starts again: the next tick `after` from now.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    /// use std::task::{Context, Waker};
    ///
    /// let mut interval = time::interval(Duration::from_millis(1));
    /// interval.reset_after(Duration::from_secs(60));
    /// assert!(interval.poll_tick(&mut Context::from_waker(Waker::noop())).is_pending());
    /// ```
    pub fn reset_after(&mut self, after: Duration) {
        match &mut self.inner {
            Inner::Engine(interval) => interval.reset_after(after),
            #[cfg(feature = "test-util")]
            Inner::Tokio(interval) => interval.reset_after(after),
        }
    }

    /// Starts again: the next tick at `deadline`.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration, Instant};
    ///
    /// # futures::executor::block_on(async {
    /// let mut interval = time::interval(Duration::from_secs(60));
    /// let at = Instant::now() + Duration::from_millis(2);
    /// interval.reset_at(at);
    /// assert_eq!(interval.tick().await, at);
    /// # });
    /// ```
    pub fn reset_at(&mut self, deadline: Instant) {
        match &mut self.inner {
            Inner::Engine(interval) => interval.reset_at(deadline),
            #[cfg(feature = "test-util")]
            Inner::Tokio(interval) => interval.reset_at(deadline.into()),
        }
    }

    /// The period between ticks.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    ///
    /// assert_eq!(time::interval(Duration::from_secs(3)).period(), Duration::from_secs(3));
    /// ```
    pub fn period(&self) -> Duration {
        match &self.inner {
            Inner::Engine(interval) => interval.period(),
            #[cfg(feature = "test-util")]
            Inner::Tokio(interval) => interval.period(),
        }
    }

    /// What the interval does when a tick comes late ([`MissedTickBehavior::Burst`] at
    /// first, as tokio's).
    ///
    /// ```
    /// use shardwheel::time::{self, Duration, MissedTickBehavior};
    ///
    /// let interval = time::interval(Duration::from_secs(1));
    /// assert_eq!(interval.missed_tick_behavior(), MissedTickBehavior::Burst);
    /// ```
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        match &self.inner {
            Inner::Engine(interval) => interval.missed_tick_behavior(),
            #[cfg(feature = "test-util")]
            Inner::Tokio(interval) => match interval.missed_tick_behavior() {
                tokio::time::MissedTickBehavior::Burst => MissedTickBehavior::Burst,
                tokio::time::MissedTickBehavior::Delay => MissedTickBehavior::Delay,
                tokio::time::MissedTickBehavior::Skip => MissedTickBehavior::Skip,
            },
        }
    }

    /// Sets what the interval does when a tick comes late.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration, MissedTickBehavior};
    ///
    /// let mut interval = time::interval(Duration::from_secs(1));
    /// interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
    /// assert_eq!(interval.missed_tick_behavior(), MissedTickBehavior::Skip);
    /// ```
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        match &mut self.inner {
            Inner::Engine(interval) => interval.set_missed_tick_behavior(behavior),
            #[cfg(feature = "test-util")]
            Inner::Tokio(interval) => interval.set_missed_tick_behavior(match behavior {
                MissedTickBehavior::Burst => tokio::time::MissedTickBehavior::Burst,
                MissedTickBehavior::Delay => tokio::time::MissedTickBehavior::Delay,
                MissedTickBehavior::Skip => tokio::time::MissedTickBehavior::Skip,
            }),
        }
    }
}
