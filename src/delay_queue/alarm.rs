//! The queue's clock and its one sleep: deadlines as the queue's wheel counts them
//! (milliseconds of the timer's clock, rounded up, so that nothing comes out early),
//! and the engine sleep that wakes the queue's task when the wheel's next bucket is due.
//!
//! The sleep is made in one place, [`sleep_until`], and moved with `Sleep::reset` from then
//! on: a queue makes one sleep in its life (again after it ran empty), whatever the number
//! of values that pass through it.

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

/// A deadline as the queue keeps it: nanoseconds since the timer started (its clock's
/// reading, see `Scheduler::now`), plus one (so that an `Option` of an entry costs nothing
/// more: the placeholders of `reserve` are `None`).
pub(super) type Stamp = NonZeroU64;

/// The queue's clock and its sleep.
pub(super) struct Alarm {
    timer: Timer,
    sleep: Option<Sleep>,
    /// The tick the sleep is set for, while there is one.
    armed: Option<u64>,
}

impl Alarm {
    pub(super) fn new(timer: &Timer) -> Self {
        Alarm {
            timer: timer.clone(),
            sleep: None,
            armed: None,
        }
    }

    /// The timer's clock: nanoseconds since it started.
    pub(super) fn clock(&self) -> u64 {
        self.timer.scheduler().now()
    }

    /// `instant` by the timer's clock (one before it started reads as its start).
    pub(super) fn at(&self, instant: Instant) -> u64 {
        self.timer.scheduler().deadline_at(instant)
    }

    /// A deadline `timeout` from now, as a stamp, and the tick to file it under (see
    /// [`file`](Self::file)). Its base is the engine's cheap reading of its clock, never
    /// behind it (the time-stamp counter where the engine trusts it), as for a timer's
    /// delay; a zero timeout is due now, by the clock itself.
    pub(super) fn file_after(&self, timeout: Duration) -> (Stamp, u64) {
        if timeout.is_zero() {
            return self.file(self.clock());
        }
        // After any reading of the clock so far: in the future.
        let deadline = self.timer.scheduler().deadline_after(timeout);
        (Stamp::MIN.saturating_add(deadline), deadline.div_ceil(TICK_NANOS))
    }

    /// `deadline` as a stamp, and the tick to file it under: the first at or after it, or,
    /// if it has passed by the timer's clock, the tick under way, so that it comes out at
    /// the next poll. The clock is read only for a deadline that the cheap reading does not
    /// put in the future.
    pub(super) fn file(&self, deadline: u64) -> (Stamp, u64) {
        let tick = self
            .passed(deadline)
            .unwrap_or_else(|| deadline.div_ceil(TICK_NANOS));
        (Stamp::MIN.saturating_add(deadline), tick)
    }

    /// The tick under way, if `deadline` has passed by the timer's clock.
    fn passed(&self, deadline: u64) -> Option<u64> {
        if deadline > self.timer.scheduler().deadline_after(Duration::ZERO) {
            return None;
        }
        let now = self.clock();
        (deadline <= now).then_some(now / TICK_NANOS)
    }

    /// The instant a stamp stands for.
    pub(super) fn instant(&self, stamp: Stamp) -> Instant {
        self.instant_of(stamp.get() - 1)
    }

    fn instant_of(&self, nanos: u64) -> Instant {
        self.timer.scheduler().clock().instant_of(nanos)
    }

    /// The tick under way by the timer's clock.
    pub(super) fn now(&self) -> u64 {
        self.clock() / TICK_NANOS
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
        let at = self.instant_of(tick.saturating_mul(TICK_NANOS));
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
