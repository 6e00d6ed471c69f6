//! [`Sleep`], [`sleep`] and [`sleep_until`]: tokio's, on the engine's [`crate::Sleep`].

use super::Instant;
#[cfg(feature = "test-util")]
use super::paused;
use crate::{SleepError, Timer};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// A future that completes at a deadline, as tokio's `time::Sleep`: output `()`,
/// [`deadline`](Self::deadline) known from the start, [`is_elapsed`](Self::is_elapsed),
/// [`reset`](Self::reset). From [`sleep`] or [`sleep_until`], on the process-wide timer
/// ([`Timer::global`]): the engine's [`crate::Sleep`] inside, nothing more.
///
/// Differs from tokio's:
/// - it is `Unpin` (tokio's is not): it can be polled without pinning, and still works
///   where tokio's is pinned (`tokio::pin!`, `Box::pin`);
/// - it panics at a poll if the engine was shut down ([`Timer::shutdown`]) before its
///   deadline or is full (`max_pending`), where tokio's panics if its runtime's driver is
///   gone: a caller who wants these as values uses [`crate::Sleep`] (its output is a
///   `Result`);
/// - it works on any executor, not only in a tokio runtime (no "no reactor running"
///   panic).
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures::executor::block_on(async {
/// let sleep = time::sleep(Duration::from_millis(5));
/// let deadline = sleep.deadline(); // known before the first poll, as tokio's
/// sleep.await;
/// assert!(Instant::now() >= deadline);
/// # });
/// ```
#[must_use = "futures do nothing unless you `.await` or poll them"]
#[derive(Debug)]
pub struct Sleep {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Engine(crate::Sleep),
    /// Made while tokio's clock was paused (feature `test-util`, see `paused`).
    #[cfg(feature = "test-util")]
    Tokio(Pin<Box<tokio::time::Sleep>>),
}

/// A future that completes `duration` from now, as tokio's `time::sleep` (see [`Sleep`]).
/// A duration too long for the clock sleeps for about 30 years, as tokio's.
///
/// Differs from the engine's [`crate::sleep`], whose delay counts from its first poll:
/// this one counts from the call, as tokio's, so that [`Sleep::deadline`] is known at once.
///
/// ```
/// use shardwheel::time::{self, Duration};
///
/// # futures::executor::block_on(async {
/// time::sleep(Duration::from_millis(2)).await;
/// # });
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(Instant::after(duration))
}

/// A future that completes at `deadline`, as tokio's `time::sleep_until` (see [`Sleep`]).
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures::executor::block_on(async {
/// let deadline = Instant::now() + Duration::from_millis(2);
/// time::sleep_until(deadline).await;
/// assert!(Instant::now() >= deadline);
/// # });
/// ```
pub fn sleep_until(deadline: Instant) -> Sleep {
    #[cfg(feature = "test-util")]
    if paused::on_tokio() {
        let tokio = Box::pin(tokio::time::sleep_until(deadline.into()));
        return Sleep {
            inner: Inner::Tokio(tokio),
        };
    }
    Sleep {
        inner: Inner::Engine(Timer::global().sleep_until(deadline)),
    }
}

impl Sleep {
    /// The instant at which the sleep completes. (On the engine, a deadline before the
    /// engine started reads as its start: the engine counts time from there.)
    ///
    /// ```
    /// use shardwheel::time::{self, Duration, Instant};
    ///
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// assert_eq!(time::sleep_until(deadline).deadline(), deadline);
    /// ```
    pub fn deadline(&self) -> Instant {
        match &self.inner {
            Inner::Engine(sleep) => match sleep.deadline() {
                Some(deadline) => Instant::from_std(deadline),
                // `sleep_until` gives the engine an instant, never a delay.
                None => unreachable!("a time::Sleep is made with an instant"),
            },
            #[cfg(feature = "test-util")]
            Inner::Tokio(sleep) => sleep.deadline().into(),
        }
    }

    /// Whether the deadline has passed (and the sleep's timer fired).
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    ///
    /// assert!(!time::sleep(Duration::from_secs(60)).is_elapsed());
    /// ```
    pub fn is_elapsed(&self) -> bool {
        match &self.inner {
            Inner::Engine(sleep) => sleep.is_elapsed(),
            #[cfg(feature = "test-util")]
            Inner::Tokio(sleep) => sleep.is_elapsed(),
        }
    }

    /// Moves the deadline to `deadline`, whether or not the sleep has completed, as
    /// tokio's: in place (O(1), the same timer) while it is pending.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration, Instant};
    ///
    /// # futures::executor::block_on(async {
    /// let mut sleep = time::sleep(Duration::from_secs(60));
    /// std::pin::Pin::new(&mut sleep).reset(Instant::now() + Duration::from_millis(2));
    /// sleep.await;
    /// # });
    /// ```
    pub fn reset(self: Pin<&mut Self>, deadline: Instant) {
        match &mut self.get_mut().inner {
            Inner::Engine(sleep) => sleep.reset(deadline),
            #[cfg(feature = "test-util")]
            Inner::Tokio(sleep) => sleep.as_mut().reset(deadline.into()),
        }
    }
}

impl Future for Sleep {
    type Output = ();

    /// # Panics
    ///
    /// If the engine shut down before the deadline, or is full (see [`Sleep`]).
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.get_mut().inner {
            Inner::Engine(sleep) => match Pin::new(sleep).poll(cx) {
                Poll::Ready(Ok(())) => Poll::Ready(()),
                Poll::Ready(Err(error)) => timer_error(error),
                Poll::Pending => Poll::Pending,
            },
            #[cfg(feature = "test-util")]
            Inner::Tokio(sleep) => sleep.as_mut().poll(cx),
        }
    }
}

/// Where tokio's timers panic (`timer error: ...`), on an error of the engine's.
#[cold]
#[track_caller]
pub(crate) fn timer_error(error: SleepError) -> ! {
    panic!("shardwheel timer error: {error}")
}
