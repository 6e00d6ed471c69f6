//! Feature `tower`: tower's timeout middleware (`tower::timeout`) on the engine.
//!
//! [`TimeoutLayer`] and [`Timeout`] have tower's API; each request's future is the
//! engine's [`crate::Timeout`] (on the process-wide timer) around the inner service's,
//! inside [`ResponseFuture`], a plain struct: nothing is boxed per request (an error is
//! boxed, as tower's `BoxError` wants, only when there is one). As everywhere in the
//! engine, the limit counts from the response future's first poll (tower's: from `call`);
//! a service's future is polled at once by every server and by `ServiceExt::oneshot`, so
//! the two are the same instant in practice, and a response ready at its first poll costs
//! no timer at all.

use crate::TimeoutError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The error type of a [`Timeout`] service, as tower's `BoxError`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Applies a [`Timeout`] to the requests of the service it wraps, as tower's
/// `timeout::TimeoutLayer`.
///
/// ```
/// use shardwheel::tower::TimeoutLayer;
/// use std::time::Duration;
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// # futures::executor::block_on(async {
/// let mut service = ServiceBuilder::new()
///     .layer(TimeoutLayer::new(Duration::from_millis(5)))
///     .service_fn(|request: u32| async move {
///         if request == 0 {
///             std::future::pending::<()>().await; // never answers
///         }
///         Ok::<_, std::io::Error>(request * 2)
///     });
/// assert_eq!(service.ready().await.unwrap().call(21).await.unwrap(), 42);
/// let late = service.ready().await.unwrap().call(0).await.unwrap_err();
/// assert!(late.is::<shardwheel::time::error::Elapsed>());
/// # });
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TimeoutLayer {
    timeout: Duration,
}

impl TimeoutLayer {
    /// A layer whose requests fail with [`Elapsed`](crate::time::error::Elapsed) after
    /// `timeout`.
    ///
    /// ```
    /// let layer = shardwheel::tower::TimeoutLayer::new(std::time::Duration::from_secs(1));
    /// # let _ = layer;
    /// ```
    pub const fn new(timeout: Duration) -> Self {
        TimeoutLayer { timeout }
    }
}

impl<S> tower_layer::Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, service: S) -> Self::Service {
        Timeout::new(service, self.timeout)
    }
}

/// A service whose requests fail with [`Elapsed`](crate::time::error::Elapsed) if the inner
/// service has not answered within the timeout, as tower's `timeout::Timeout`.
///
/// Differs from tower's: the error is shardwheel's
/// [`time::error::Elapsed`](crate::time::error::Elapsed) (tower's cannot be made outside
/// tower), boxed; an engine that was shut down or is full gives its
/// [`SleepError`](crate::SleepError), boxed, rather than a panic; the limit counts from the
/// response future's first poll (see the module docs).
///
/// ```
/// use shardwheel::tower::Timeout;
/// use std::time::Duration;
/// use tower::{Service, ServiceExt};
///
/// # futures::executor::block_on(async {
/// let next = tower::service_fn(|request: u32| async move { Ok::<_, std::io::Error>(request + 1) });
/// let mut service = Timeout::new(next, Duration::from_secs(1));
/// assert_eq!(service.ready().await.unwrap().call(1).await.unwrap(), 2);
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
    timeout: Duration,
}

impl<S> Timeout<S> {
    /// `inner`, its requests limited to `timeout`.
    ///
    /// ```
    /// let service = shardwheel::tower::Timeout::new((), std::time::Duration::from_secs(1));
    /// # let _ = service;
    /// ```
    pub const fn new(inner: S, timeout: Duration) -> Self {
        Timeout { inner, timeout }
    }

    /// The inner service.
    ///
    /// ```
    /// let service = shardwheel::tower::Timeout::new(7, std::time::Duration::from_secs(1));
    /// assert_eq!(*service.get_ref(), 7);
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    ///
    /// ```
    /// let mut service = shardwheel::tower::Timeout::new(7, std::time::Duration::from_secs(1));
    /// *service.get_mut() = 8;
    /// assert_eq!(service.into_inner(), 8);
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service.
    ///
    /// ```
    /// let service = shardwheel::tower::Timeout::new(7, std::time::Duration::from_secs(1));
    /// assert_eq!(service.into_inner(), 7);
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, Request> tower_service::Service<Request> for Timeout<S>
where
    S: tower_service::Service<Request>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        ResponseFuture {
            timeout: crate::timeout(self.timeout, self.inner.call(request)),
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of a [`Timeout`] service: the engine's [`crate::Timeout`] around
    /// the inner service's future, unboxed.
    pub struct ResponseFuture<F> {
        #[pin]
        timeout: crate::Timeout<F>,
    }
}

impl<F: fmt::Debug> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().timeout.poll(cx).map(|ready| match ready {
            Ok(response) => response.map_err(Into::into),
            Err(TimeoutError::Elapsed) => Err(crate::time::error::Elapsed::new().into()),
            Err(TimeoutError::Sleep(error)) => Err(error.into()),
        })
    }
}
