//! `time::error`: tokio's `time::error::Elapsed`.

use std::fmt;
use std::io;

/// A [`Timeout`](super::Timeout)'s deadline passed before its future finished, as tokio's
/// `time::error::Elapsed`: the same `Display` text and conversion into an `io::Error`
/// (`TimedOut`).
///
/// ```
/// use shardwheel::time::{self, Duration};
///
/// # futures::executor::block_on(async {
/// let elapsed = time::timeout(Duration::from_millis(1), std::future::pending::<()>())
///     .await
///     .unwrap_err();
/// assert_eq!(elapsed.to_string(), "deadline has elapsed");
/// assert_eq!(std::io::Error::from(elapsed).kind(), std::io::ErrorKind::TimedOut);
/// # });
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct Elapsed(());

impl Elapsed {
    pub(crate) fn new() -> Self {
        Elapsed(())
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, fmt: &mut fmt::Formatter<'_>) -> fmt::Result {
        "deadline has elapsed".fmt(fmt)
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for io::Error {
    fn from(_err: Elapsed) -> io::Error {
        io::ErrorKind::TimedOut.into()
    }
}
