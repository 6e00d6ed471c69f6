//! The queue's clock and its one sleep: deadlines as the queue's wheel counts them
//! (milliseconds of the timer's clock, rounded up, so that nothing comes out early),
//! and the engine sleep that wakes the queue's task when the wheel's next bucket is due.
//!
//! The sleep is made in one place, [`sleep_until`], and moved with `Sleep::reset` from then
//! on: a queue makes one sleep in its life (again after it ran empty), whatever the number
//! of values that pass through it.
//!
//! Under feature `test-util`, a queue made on the process-wide timer while tokio's clock is
//! paused has tokio's clock and a tokio sleep instead (see `paused`): [`Clock`] has a second
//! variant. Without the feature it has one, so each `match` on it is no branch at all.

#[cfg(feature = "test-util")]
use super::paused::TokioClock;
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
    clock: Clock,
    /// The tick the sleep is set for, while there is one.
    armed: Option<u64>,
}

/// Whose clock and sleep the queue has.
enum Clock {
    /// The engine's: `timer`'s clock, and a sleep on it.
    Engine { timer: Timer, sleep: Option<Sleep> },
    /// tokio's paused clock, and a tokio sleep (see `paused`).
    #[cfg(feature = "test-util")]
    Tokio(TokioClock),
}

impl Alarm {
    pub(super) fn new(timer: &Timer) -> Self {
        Alarm::with(Clock::Engine {
            timer: timer.clone(),
            sleep: None,
        })
    }

    /// On the process-wide timer, or, under feature `test-util`, on tokio's clock if it is
    /// paused on this thread (see `paused`).
    pub(super) fn global() -> Self {
        #[cfg(feature = "test-util")]
        if let Some(tokio) = TokioClock::if_paused() {
            return Alarm::with(Clock::Tokio(tokio));
        }
        Alarm::new(Timer::global())
    }

    fn with(clock: Clock) -> Self {
        Alarm { clock, armed: None }
    }

    /// The queue's clock: nanoseconds since it started.
    pub(super) fn clock(&self) -> u64 {
        match &self.clock {
            Clock::Engine { timer, .. } => timer.scheduler().now(),
            #[cfg(feature = "test-util")]
            Clock::Tokio(tokio) => tokio.now(),
        }
    }

    /// `instant` by the queue's clock (one before it started reads as its start).
    pub(super) fn at(&self, instant: Instant) -> u64 {
        match &self.clock {
            Clock::Engine { timer, .. } => timer.scheduler().deadline_at(instant),
            #[cfg(feature = "test-util")]
            Clock::Tokio(tokio) => tokio.at(instant),
        }
    }

    /// `delay` from now by the queue's clock, never before any reading of it so far (on the
    /// engine, its cheap reading: the time-stamp counter where the engine trusts it).
    fn after(&self, delay: Duration) -> u64 {
        match &self.clock {
            Clock::Engine { timer, .. } => timer.scheduler().deadline_after(delay),
            #[cfg(feature = "test-util")]
            Clock::Tokio(tokio) => tokio.after(delay),
        }
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
        let deadline = self.after(timeout);
        (
            Stamp::MIN.saturating_add(deadline),
            deadline.div_ceil(TICK_NANOS),
        )
    }

    /// `deadline` as a stamp, and the tick to file it under: the first at or after it, or,
    /// if it has passed (see [`passed`](Self::passed)), the tick under way, so that it comes
    /// out at the next poll.
    pub(super) fn file(&self, deadline: u64) -> (Stamp, u64) {
        let tick = self
            .passed(deadline)
            .unwrap_or_else(|| deadline.div_ceil(TICK_NANOS));
        (Stamp::MIN.saturating_add(deadline), tick)
    }

    /// The tick under way, if `deadline` has passed by the queue's time: on the engine, its
    /// clock (read only for a deadline that the cheap reading does not put in the future);
    /// on tokio's clock, the tick the queue's sleep last reached (see [`now`](Self::now)).
    fn passed(&self, deadline: u64) -> Option<u64> {
        #[cfg(feature = "test-util")]
        if let Clock::Tokio(tokio) = &self.clock {
            let reached = tokio.reached();
            return (deadline <= reached.saturating_mul(TICK_NANOS)).then_some(reached);
        }
        if deadline > self.after(Duration::ZERO) {
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
        match &self.clock {
            Clock::Engine { timer, .. } => timer.scheduler().clock().instant_of(nanos),
            #[cfg(feature = "test-util")]
            Clock::Tokio(tokio) => tokio.instant_of(nanos),
        }
    }

    /// The tick under way by the queue's time: on the engine, its clock's; on tokio's
    /// clock, the tick the queue's sleep last reached, as tokio-util's queue counts time by
    /// its sleep (tokio's timer fires a sleep up to a millisecond after its deadline, and
    /// auto-advance moves the clock there; values come out when tokio's timer says, as
    /// tokio-util's, not when the clock passes their deadline).
    pub(super) fn now(&self) -> u64 {
        match &self.clock {
            Clock::Engine { timer, .. } => timer.scheduler().now() / TICK_NANOS,
            #[cfg(feature = "test-util")]
            Clock::Tokio(tokio) => tokio.reached(),
        }
    }

    /// The tick the sleep is set for, if any.
    pub(super) fn armed(&self) -> Option<u64> {
        self.armed
    }

    /// Drops the sleep, cancelling its timer.
    pub(super) fn disarm(&mut self) {
        self.armed = None;
        match &mut self.clock {
            Clock::Engine { sleep, .. } => *sleep = None,
            #[cfg(feature = "test-util")]
            Clock::Tokio(tokio) => tokio.disarm(),
        }
    }

    /// Polls the sleep, set for tick `tick` (moved there first if it was set elsewhere).
    pub(super) fn poll(&mut self, tick: u64, cx: &mut Context<'_>) -> Poll<Result<(), SleepError>> {
        let at = self.instant_of(tick.saturating_mul(TICK_NANOS));
        let set = self.armed == Some(tick);
        let (timer, sleep) = match &mut self.clock {
            Clock::Engine { timer, sleep } => (timer, sleep),
            #[cfg(feature = "test-util")]
            Clock::Tokio(tokio) => {
                self.armed = Some(tick);
                return tokio.poll(tick, at, set, cx).map(Ok);
            }
        };
        let sleep = match (sleep, set) {
            (Some(sleep), true) => sleep,
            (Some(sleep), false) => {
                sleep.reset(at);
                sleep
            }
            (sleep @ None, _) => sleep.insert(sleep_until(timer, at)),
        };
        self.armed = Some(tick);
        Pin::new(sleep).poll(cx)
    }
}
