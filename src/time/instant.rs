//! [`Instant`]: tokio's `time::Instant`, a point of the monotonic clock.
//!
//! It wraps std's `Instant`, as tokio's does, so it converts to and from std's (and, under
//! feature `tokio`, tokio's) at no cost. Its `now()` reads std's clock; under feature
//! `test-util`, tokio's (the same, unless tokio's clock was paused: see `paused`).

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::time::Duration;

/// A measurement of a monotonically nondecreasing clock, as tokio's `time::Instant`: the
/// same methods and operators, and the same values (std's `Instant` inside).
///
/// Differs from tokio's only in when [`now`](Self::now) follows tokio's paused clock:
/// tokio's does whenever tokio's `test-util` feature is on, this one when this crate's
/// `test-util` is (which turns tokio's on), so that a production build never reads tokio's
/// runtime.
///
/// ```
/// use shardwheel::time::{Duration, Instant};
///
/// let start = Instant::now();
/// let later = start + Duration::from_millis(5);
/// assert_eq!(later - start, Duration::from_millis(5));
/// assert_eq!(start.saturating_duration_since(later), Duration::ZERO);
/// let std: std::time::Instant = later.into();
/// assert_eq!(Instant::from_std(std), later);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    std: std::time::Instant,
}

impl Instant {
    /// The current instant (tokio's clock under feature `test-util`).
    ///
    /// ```
    /// let (a, b) = (shardwheel::time::Instant::now(), shardwheel::time::Instant::now());
    /// assert!(b >= a);
    /// ```
    #[inline]
    pub fn now() -> Instant {
        #[cfg(feature = "test-util")]
        let std = tokio::time::Instant::now().into_std();
        #[cfg(not(feature = "test-util"))]
        let std = std::time::Instant::now();
        Instant { std }
    }

    /// The instant `std` is.
    ///
    /// ```
    /// let std = std::time::Instant::now();
    /// assert_eq!(shardwheel::time::Instant::from_std(std).into_std(), std);
    /// ```
    pub fn from_std(std: std::time::Instant) -> Instant {
        Instant { std }
    }

    /// This instant as std's.
    ///
    /// ```
    /// let now = shardwheel::time::Instant::now();
    /// assert_eq!(shardwheel::time::Instant::from_std(now.into_std()), now);
    /// ```
    pub fn into_std(self) -> std::time::Instant {
        self.std
    }

    /// The time from `earlier` to this instant, zero if `earlier` is later (as tokio's).
    ///
    /// ```
    /// use shardwheel::time::{Duration, Instant};
    ///
    /// let now = Instant::now();
    /// assert_eq!((now + Duration::from_secs(1)).duration_since(now), Duration::from_secs(1));
    /// assert_eq!(now.duration_since(now + Duration::from_secs(1)), Duration::ZERO);
    /// ```
    pub fn duration_since(&self, earlier: Instant) -> Duration {
        self.std.saturating_duration_since(earlier.std)
    }

    /// The time from `earlier` to this instant, `None` if `earlier` is later.
    ///
    /// ```
    /// use shardwheel::time::{Duration, Instant};
    ///
    /// let now = Instant::now();
    /// assert_eq!(now.checked_duration_since(now + Duration::from_secs(1)), None);
    /// ```
    pub fn checked_duration_since(&self, earlier: Instant) -> Option<Duration> {
        self.std.checked_duration_since(earlier.std)
    }

    /// The time from `earlier` to this instant, zero if `earlier` is later.
    ///
    /// ```
    /// use shardwheel::time::{Duration, Instant};
    ///
    /// let now = Instant::now();
    /// assert_eq!(now.saturating_duration_since(now + Duration::from_secs(1)), Duration::ZERO);
    /// ```
    pub fn saturating_duration_since(&self, earlier: Instant) -> Duration {
        self.std.saturating_duration_since(earlier.std)
    }

    /// The time since this instant (by [`Instant::now`]'s clock), zero if it is ahead.
    ///
    /// ```
    /// let start = shardwheel::time::Instant::now();
    /// assert!(start.elapsed() < std::time::Duration::from_secs(60));
    /// ```
    pub fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(*self)
    }

    /// This instant plus `duration`, `None` past what the clock can represent.
    ///
    /// ```
    /// use shardwheel::time::{Duration, Instant};
    ///
    /// assert!(Instant::now().checked_add(Duration::MAX).is_none());
    /// ```
    pub fn checked_add(&self, duration: Duration) -> Option<Instant> {
        self.std.checked_add(duration).map(Instant::from_std)
    }

    /// This instant minus `duration`, `None` before what the clock can represent.
    ///
    /// ```
    /// use shardwheel::time::{Duration, Instant};
    ///
    /// assert!(Instant::now().checked_sub(Duration::MAX).is_none());
    /// ```
    pub fn checked_sub(&self, duration: Duration) -> Option<Instant> {
        self.std.checked_sub(duration).map(Instant::from_std)
    }

    /// About 30 years from now: the deadline of a delay too long for the clock, as tokio's.
    pub(crate) fn far_future() -> Instant {
        Instant::now() + Duration::from_secs(86_400 * 365 * 30)
    }

    /// `delay` after now, or [`Instant::far_future`] if that overflows, as tokio's `sleep`.
    pub(crate) fn after(delay: Duration) -> Instant {
        Instant::now()
            .checked_add(delay)
            .unwrap_or_else(Instant::far_future)
    }
}

impl From<std::time::Instant> for Instant {
    fn from(std: std::time::Instant) -> Instant {
        Instant::from_std(std)
    }
}

impl From<Instant> for std::time::Instant {
    fn from(instant: Instant) -> std::time::Instant {
        instant.into_std()
    }
}

#[cfg(feature = "tokio")]
impl From<tokio::time::Instant> for Instant {
    fn from(instant: tokio::time::Instant) -> Instant {
        Instant::from_std(instant.into_std())
    }
}

#[cfg(feature = "tokio")]
impl From<Instant> for tokio::time::Instant {
    fn from(instant: Instant) -> tokio::time::Instant {
        tokio::time::Instant::from_std(instant.into_std())
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// # Panics
    ///
    /// Past what the clock can represent, as std's (see [`Instant::checked_add`]).
    fn add(self, other: Duration) -> Instant {
        Instant::from_std(self.std + other)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub for Instant {
    type Output = Duration;

    /// Zero if `rhs` is later, as tokio's.
    fn sub(self, rhs: Instant) -> Duration {
        self.std.saturating_duration_since(rhs.std)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;

    /// # Panics
    ///
    /// Before what the clock can represent, as std's (see [`Instant::checked_sub`]).
    fn sub(self, rhs: Duration) -> Instant {
        Instant::from_std(self.std - rhs)
    }
}

impl SubAssign<Duration> for Instant {
    fn sub_assign(&mut self, rhs: Duration) {
        *self = *self - rhs;
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, fmt: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.std.fmt(fmt)
    }
}
