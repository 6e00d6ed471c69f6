//! The queue's clock and its one sleep: deadlines as the queue's wheel counts them
//! (milliseconds since the queue was made, rounded up, so that nothing comes out early),
//! and the engine sleep that wakes the queue's task when the wheel's next bucket is due.
//!
//! The sleep is made in one place, [`sleep_until`], and moved with `Sleep::reset` from then
//! on: a queue makes one sleep in its life (again after it ran empty), whatever the number
//! of values that pass through it.

use crate::clock;
use crate::error::SleepError;
use crate::sleep::Sleep;
use crate::timer::Timer;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Nanoseconds in a tick of the queue's wheel.
const TICK_NANOS: u64 = 1_000_000;

/// The one sleep a queue waits on, at `at`, on `timer`'s engine.
fn sleep_until(timer: &Timer, at: Instant) -> Sleep {
    timer.sleep_until(at)
}

/// The ticks that have begun in `since`.
fn ticks(since: Duration) -> u64 {
    u64::try_from(since.as_nanos() / u128::from(TICK_NANOS)).unwrap_or(u64::MAX)
}

/// A deadline as the queue keeps it: nanoseconds since the queue's start, plus one (so that
/// an `Option` of an entry costs nothing more: the placeholders of `reserve` are `None`).
pub(super) type Stamp = NonZeroU64;

/// The queue's clock and its sleep.
pub(super) struct Alarm {
    timer: Timer,
    /// The instant tick 0 and stamp 1 stand for.
    start: Instant,
    sleep: Option<Sleep>,
    /// The tick the sleep is set for, while there is one.
    armed: Option<u64>,
}

impl Alarm {
    pub(super) fn new(timer: &Timer) -> Self {
        Alarm {
            timer: timer.clone(),
            start: timer.now(),
            sleep: None,
            armed: None,
        }
    }

    /// The timer's clock.
    pub(super) fn clock(&self) -> Instant {
        self.timer.now()
    }

    /// `deadline` as a stamp (one before the queue's start counts as its start), and the
    /// tick to file it under: the first at or after it, or, if it has passed by `now` (the
    /// timer's clock, read by the caller), the tick under way, so that it comes out at the
    /// next poll.
    pub(super) fn file(&self, deadline: Instant, now: Instant) -> (Stamp, u64) {
        let since = deadline.saturating_duration_since(self.start);
        let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX);
        let tick = if deadline <= now {
            ticks(now.saturating_duration_since(self.start))
        } else {
            nanos.div_ceil(TICK_NANOS)
        };
        (Stamp::MIN.saturating_add(nanos), tick)
    }

    /// The instant a stamp stands for.
    pub(super) fn instant(&self, stamp: Stamp) -> Instant {
        clock::instant_after(self.start, Duration::from_nanos(stamp.get() - 1))
    }

    /// The tick under way by the timer's clock.
    pub(super) fn now(&self) -> u64 {
        ticks(self.timer.now().saturating_duration_since(self.start))
    }

    /// The tick the sleep is set for, if any.
    pub(super) fn armed(&self) -> Option<u64> {
        self.armed
    }

    /// Drops the sleep, cancelling its timer.
    pub(super) fn disarm(&mut self) {
        (self.sleep, self.armed) = (None, None);
    }

    /// Polls the sleep, set for tick `tick` (moved there first if it was set elsewhere).
    pub(super) fn poll(&mut self, tick: u64, cx: &mut Context<'_>) -> Poll<Result<(), SleepError>> {
        let at = clock::instant_after(self.start, Duration::from_millis(tick));
        let sleep = match (&mut self.sleep, self.armed == Some(tick)) {
            (Some(sleep), true) => sleep,
            (Some(sleep), false) => {
                sleep.reset(at);
                sleep
            }
            (None, _) => self.sleep.insert(sleep_until(&self.timer, at)),
        };
        self.armed = Some(tick);
        Pin::new(sleep).poll(cx)
    }
}
