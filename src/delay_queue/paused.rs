//! The clock and sleep of a queue made on the process-wide timer while tokio's clock is
//! paused (feature `test-util`): tokio's clock and one tokio sleep, so that
//! `#[tokio::test(start_paused = true)]`, `time::pause()`, auto-advance and `advance` move
//! the queue as they move tokio-util's.
//!
//! Whether tokio's clock is paused is read as `time::sleep` reads it (`time::paused`), once,
//! when the queue is made: a queue stays on the clock it was made on. Deadlines count in
//! nanoseconds from tokio's instant at that moment (an instant before it is due at once,
//! as before the engine's start on the engine's clock), in the same ticks of a millisecond
//! as on the engine, so the queue's wheel and its order are the same on both clocks.
//!
//! The queue's time, which says what is due, is the tick its sleep last completed at, not
//! the clock: tokio-util's queue counts time so, and tokio's timer fires a sleep up to a
//! millisecond after its deadline (its ticks round up), with auto-advance moving the clock
//! there. Read from the clock, a value due at 10 ms would come out after `sleep`s asking
//! for 8 ms; read from the sleep, it comes out when tokio's timer reaches it, as
//! tokio-util's does, and tokio-util's tests decide what users expect.
//!
//! Without the feature this module is not built, and the queue's alarm has one clock.

use crate::clock::{instant_after, nanos};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// tokio's clock, from the queue's start, and the queue's tokio sleep.
pub(super) struct TokioClock {
    start: Instant,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The latest tick the sleep completed at: the queue's time.
    reached: u64,
}

impl TokioClock {
    /// tokio's clock, if a timer made now on this thread must run on tokio's timer (its
    /// clock is paused, or shifted from real time by an earlier pause).
    pub(super) fn if_paused() -> Option<TokioClock> {
        crate::time::paused::on_tokio().then(|| TokioClock {
            start: tokio::time::Instant::now().into_std(),
            sleep: None,
            reached: 0,
        })
    }

    /// Nanoseconds since the start, by tokio's clock.
    pub(super) fn now(&self) -> u64 {
        self.at(tokio::time::Instant::now().into_std())
    }

    /// `instant` in nanoseconds since the start (zero before it).
    pub(super) fn at(&self, instant: Instant) -> u64 {
        nanos(instant.saturating_duration_since(self.start))
    }

    /// `delay` from now, in nanoseconds since the start.
    pub(super) fn after(&self, delay: Duration) -> u64 {
        self.now().saturating_add(nanos(delay))
    }

    /// The instant `nanos` after the start.
    pub(super) fn instant_of(&self, nanos: u64) -> Instant {
        instant_after(self.start, Duration::from_nanos(nanos))
    }

    /// The latest tick the sleep completed at (0, the start, before it first does).
    pub(super) fn reached(&self) -> u64 {
        self.reached
    }

    /// Polls the sleep for tick `tick`, at `at`, made there or moved there first unless
    /// `set` (it is there); once it completes, the queue's time has reached `tick`.
    pub(super) fn poll(
        &mut self,
        tick: u64,
        at: Instant,
        set: bool,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        let at = tokio::time::Instant::from_std(at);
        let sleep = match &mut self.sleep {
            Some(sleep) if set => sleep,
            Some(sleep) => {
                sleep.as_mut().reset(at);
                sleep
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
        };
        let polled = sleep.as_mut().poll(cx);
        if polled.is_ready() {
            self.reached = self.reached.max(tick);
        }
        polled
    }

    /// Drops the sleep.
    pub(super) fn disarm(&mut self) {
        self.sleep = None;
    }
}
