//! The engine's errors: what [`Timer`](crate::Timer)'s calls and futures can return.

use std::fmt;

/// A [`TimerHandle`](crate::TimerHandle) that names no pending timer of this
/// [`Timer`](crate::Timer): its timer ran (or is running) or was cancelled, or the handle is
/// another timer's (rejected but for a chance of at most about one in 2^27, see
/// [`TimerHandle`](crate::TimerHandle)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleHandle;

impl fmt::Display for StaleHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("handle names no pending timer: it fired, was cancelled, or is another timer's")
    }
}

impl std::error::Error for StaleHandle {}

/// Why [`Timer::schedule`](crate::Timer::schedule) refused a timer; the payload (the
/// callback) is handed back, so nothing is dropped silently.
#[non_exhaustive]
pub enum ScheduleError<T> {
    /// `max_pending` timers are pending (or all of a shard's slots are in use: 2^31, fewer
    /// in a timer of over 64 shards).
    Full(T),
    /// The timer was shut down.
    Shutdown(T),
}

impl<T> ScheduleError<T> {
    /// The payload that was not scheduled.
    pub fn into_inner(self) -> T {
        match self {
            ScheduleError::Full(payload) | ScheduleError::Shutdown(payload) => payload,
        }
    }

    /// The same error with the payload `f` makes of it.
    ///
    /// ```
    /// use shardwheel::ScheduleError;
    ///
    /// let refused: ScheduleError<u32> = ScheduleError::Full(7);
    /// assert!(matches!(refused.map(|id| id * 2), ScheduleError::Full(14)));
    /// ```
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> ScheduleError<U> {
        match self {
            ScheduleError::Full(payload) => ScheduleError::Full(f(payload)),
            ScheduleError::Shutdown(payload) => ScheduleError::Shutdown(f(payload)),
        }
    }
}

impl<T> fmt::Debug for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScheduleError::Full(_) => "Full(..)",
            ScheduleError::Shutdown(_) => "Shutdown(..)",
        })
    }
}

impl<T> fmt::Display for ScheduleError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScheduleError::Full(_) => {
                "too many pending timers (max_pending, or all of a shard's slots)"
            }
            ScheduleError::Shutdown(_) => "the timer was shut down",
        })
    }
}

impl<T> std::error::Error for ScheduleError<T> {}

/// Why [`Timer::advance`](crate::Timer::advance) did not move time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdvanceError {
    /// The timer runs on its own reaper threads and real time; only a timer built with
    /// [`Builder::manual`](crate::Builder::manual) is advanced by hand.
    NotManual,
    /// Another `advance` is running: on another thread, or this one (a callback called it).
    Busy,
}

impl fmt::Display for AdvanceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AdvanceError::NotManual => "only a manual timer is advanced by hand",
            AdvanceError::Busy => "another advance of this timer is running",
        })
    }
}

impl std::error::Error for AdvanceError {}

/// Why [`Builder::build`](crate::Builder::build) failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// The shard count must be between 1 and 65,536.
    Shards(usize),
    /// The tick must be longer than zero.
    ZeroTick,
    /// A reaper thread could not be started.
    Thread(std::io::Error),
    /// The process has built 2^64 - 1 timers: every timer id was given out once, and an
    /// id is never given twice (it keys each thread's records of the timer).
    Ids,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Shards(n) => {
                write!(
                    f,
                    "invalid shard count {n}: between 1 and 65,536 are allowed"
                )
            }
            BuildError::Ids => f.write_str("every timer id has been used (2^64 - 1 timers built)"),
            BuildError::ZeroTick => f.write_str("the tick must be longer than zero"),
            BuildError::Thread(error) => write!(f, "cannot start a reaper thread: {error}"),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Thread(error) => Some(error),
            _ => None,
        }
    }
}

/// Why a [`Sleep`](crate::Sleep) ended without reaching its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SleepError {
    /// Its timer could not be scheduled: `max_pending` timers are pending.
    Full,
    /// The timer was shut down before the deadline (or the sleep was first polled after).
    Shutdown,
}

impl fmt::Display for SleepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SleepError::Full => {
                "cannot sleep: too many pending timers (max_pending, or all of a shard's slots)"
            }
            SleepError::Shutdown => "cannot sleep: the timer was shut down",
        })
    }
}

impl std::error::Error for SleepError {}

impl<T> From<ScheduleError<T>> for SleepError {
    fn from(error: ScheduleError<T>) -> Self {
        match error {
            ScheduleError::Full(_) => SleepError::Full,
            ScheduleError::Shutdown(_) => SleepError::Shutdown,
        }
    }
}

/// Why a [`Timeout`](crate::Timeout) ended without its future's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeoutError {
    /// The deadline came first; the future had not finished (it is dropped with the
    /// `Timeout`).
    Elapsed,
    /// The deadline could not be watched (see [`SleepError`]).
    Sleep(SleepError),
}

impl fmt::Display for TimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeoutError::Elapsed => f.write_str("deadline elapsed"),
            TimeoutError::Sleep(error) => fmt::Display::fmt(error, f),
        }
    }
}

impl std::error::Error for TimeoutError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TimeoutError::Elapsed => None,
            TimeoutError::Sleep(error) => Some(error),
        }
    }
}

/// Why [`Timer::schedule_periodic`](crate::Timer::schedule_periodic) refused a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeriodicError {
    /// The period is zero: the series would run without end at one instant.
    ZeroPeriod,
    /// `max_pending` timers are pending.
    Full,
    /// The timer was shut down.
    Shutdown,
}

impl fmt::Display for PeriodicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PeriodicError::ZeroPeriod => "a periodic timer's period must be longer than zero",
            PeriodicError::Full => {
                "too many pending timers (max_pending, or all of a shard's slots)"
            }
            PeriodicError::Shutdown => "the timer was shut down",
        })
    }
}

impl std::error::Error for PeriodicError {}
