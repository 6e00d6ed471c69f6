//! [`Timeout`], [`timeout`] and [`timeout_at`]: tokio's, on the engine's
//! [`crate::Timeout`], at its cost.
//!
//! The engine's timeout is inside as it is; the variant for tokio's paused clock (feature
//! `test-util`) holds a type with no value without the feature, so the enum is the
//! engine's timeout alone, with no tag, and its branches compile away (W7 in
//! `benches/futures.rs` measures it beside the engine's).

use super::Instant;
use super::error::Elapsed;
#[cfg(feature = "test-util")]
use super::paused;
use super::paused::TokioTimeout;
use super::sleep::timer_error;
use crate::TimeoutError;
use std::future::{Future, IntoFuture};
use std::marker::PhantomPinned;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

pin_project_lite::pin_project! {
    /// A future that runs `F` until a deadline, as tokio's `time::Timeout`: output
    /// `Result<F::Output, Elapsed>`, [`get_ref`](Self::get_ref),
    /// [`get_mut`](Self::get_mut), [`into_inner`](Self::into_inner). From [`timeout`] or
    /// [`timeout_at`], on the process-wide timer: the engine's [`crate::Timeout`] inside.
    ///
    /// Differs from tokio's:
    /// - [`timeout`]'s limit counts from the first poll (tokio's: from the call), as the
    ///   engine's: a future ready at its first poll then costs no clock read and no timer;
    ///   for `timeout(d, f).await`, the usual form, the two are the same instant;
    /// - it panics at a poll if the engine was shut down before the deadline or is full,
    ///   where tokio's panics if its runtime's driver is gone ([`crate::Timeout`] gives
    ///   these as values); it works on any executor;
    /// - it takes no part in tokio's cooperative budget: a future that exhausts the budget
    ///   still sees its deadline, as with tokio's (which polls its timer unconstrained).
    ///
    /// Like tokio's, it is not `Unpin` (so that the same code compiles whichever timer
    /// serves, under feature `test-util` too).
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    ///
    /// # futures::executor::block_on(async {
    /// let reply = time::timeout(Duration::from_secs(5), async { 7 }).await;
    /// assert_eq!(reply, Ok(7));
    /// let stuck = time::timeout(Duration::from_millis(2), std::future::pending::<()>());
    /// assert!(stuck.await.is_err());
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Timeout<F> {
        #[pin]
        inner: Inner<F>,
        #[pin]
        _pinned: PhantomPinned,
    }
}

pin_project_lite::pin_project! {
    #[project = InnerProjection]
    enum Inner<F> {
        Engine { #[pin] timeout: crate::Timeout<F> },
        // Made while tokio's clock was paused (feature `test-util`, see `paused`).
        Tokio { #[pin] timeout: TokioTimeout<F> },
    }
}

impl<F> Timeout<F> {
    #[inline(always)]
    fn engine(timeout: crate::Timeout<F>) -> Self {
        Timeout {
            inner: Inner::Engine { timeout },
            _pinned: PhantomPinned,
        }
    }

    /// The wrapped future.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    ///
    /// let timeout = time::timeout(Duration::from_secs(1), std::future::ready(7));
    /// assert_eq!(timeout.get_ref().clone().into_inner(), 7);
    /// ```
    pub fn get_ref(&self) -> &F {
        match &self.inner {
            Inner::Engine { timeout } => timeout.get_ref(),
            Inner::Tokio { timeout } => timeout.get_ref(),
        }
    }

    /// The wrapped future, mutably.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    ///
    /// let mut timeout = time::timeout(Duration::from_secs(1), std::future::ready(7));
    /// *timeout.get_mut() = std::future::ready(8);
    /// assert_eq!(futures::executor::block_on(timeout), Ok(8));
    /// ```
    pub fn get_mut(&mut self) -> &mut F {
        match &mut self.inner {
            Inner::Engine { timeout } => timeout.get_mut(),
            Inner::Tokio { timeout } => timeout.get_mut(),
        }
    }

    /// The wrapped future, unfinished; its timer is cancelled.
    ///
    /// ```
    /// use shardwheel::time::{self, Duration};
    ///
    /// let timeout = time::timeout(Duration::from_secs(1), async { 7 });
    /// assert_eq!(futures::executor::block_on(timeout.into_inner()), 7);
    /// ```
    pub fn into_inner(self) -> F {
        match self.inner {
            Inner::Engine { timeout } => timeout.into_inner(),
            Inner::Tokio { timeout } => timeout.into_inner(),
        }
    }
}

/// Runs `future` for at most `duration`, as tokio's `time::timeout` (see [`Timeout`]; the
/// limit counts from the first poll). A duration too long for the clock waits about 30
/// years, as tokio's.
///
/// ```
/// use shardwheel::time::{self, Duration};
///
/// # futures::executor::block_on(async {
/// assert_eq!(time::timeout(Duration::from_secs(1), async { 7 }).await, Ok(7));
/// # });
/// ```
#[inline(always)]
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    #[cfg(feature = "test-util")]
    if paused::on_tokio() {
        return Timeout::tokio(tokio::time::timeout(duration, future));
    }
    Timeout::engine(crate::timeout(duration, future.into_future()))
}

/// Runs `future` until `deadline`, as tokio's `time::timeout_at` (see [`Timeout`]).
///
/// ```
/// use shardwheel::time::{self, Duration, Instant};
///
/// # futures::executor::block_on(async {
/// let deadline = Instant::now() + Duration::from_millis(2);
/// assert!(time::timeout_at(deadline, std::future::pending::<()>()).await.is_err());
/// assert!(Instant::now() >= deadline);
/// # });
/// ```
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    #[cfg(feature = "test-util")]
    if paused::on_tokio() {
        return Timeout::tokio(tokio::time::timeout_at(deadline.into(), future));
    }
    Timeout::engine(crate::timeout_at(deadline, future.into_future()))
}

#[cfg(feature = "test-util")]
impl<F> Timeout<F> {
    fn tokio(timeout: tokio::time::Timeout<F>) -> Self {
        Timeout {
            inner: Inner::Tokio { timeout },
            _pinned: PhantomPinned,
        }
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    /// # Panics
    ///
    /// If the engine shut down before the deadline, or is full (see [`Timeout`]).
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().inner.project() {
            InnerProjection::Engine { timeout } => match timeout.poll(cx) {
                Poll::Ready(Ok(output)) => Poll::Ready(Ok(output)),
                Poll::Ready(Err(TimeoutError::Elapsed)) => Poll::Ready(Err(Elapsed::new())),
                Poll::Ready(Err(TimeoutError::Sleep(error))) => timer_error(error),
                Poll::Pending => Poll::Pending,
            },
            InnerProjection::Tokio { timeout } => timeout
                .poll(cx)
                .map(|ready| ready.map_err(|_| Elapsed::new())),
        }
    }
}

impl<F: std::fmt::Debug> std::fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeout")
            .field("future", self.get_ref())
            .finish()
    }
}

#[cfg(all(test, not(feature = "test-util")))]
mod tests {
    use std::future::Ready;
    use std::mem::size_of;

    #[test]
    fn without_test_util_a_timeout_and_a_sleep_are_the_engines_size() {
        // The variant for tokio's paused clock holds a type with no value: no room, no tag.
        assert_eq!(
            size_of::<super::Timeout<Ready<u64>>>(),
            size_of::<crate::Timeout<Ready<u64>>>()
        );
        assert_eq!(size_of::<crate::time::Sleep>(), size_of::<crate::Sleep>());
    }
}
