//! Time: exact deadlines in nanoseconds since the engine started, filed in the wheel under
//! ticks.
//!
//! A timer's deadline is kept exact (what lateness is measured against); the reaper files it
//! under the first tick that starts at or after it (rounded *up*), and the current tick
//! rounds *down*, so a timer is never due before its instant (the early-fire trap of
//! tokio-timer#14 and akka#1547), and at most one tick after it. Deadlines past the end of
//! the `u64` nanosecond range (584 years) saturate to its end instead of wrapping or
//! panicking.

use std::time::{Duration, Instant};

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The tick a deadline is filed under: the first that starts at or after it.
pub(crate) fn tick_of(deadline: u64, tick_nanos: u64) -> u64 {
    deadline.div_ceil(tick_nanos)
}

/// The current tick once `elapsed` nanoseconds have passed (rounded down).
pub(crate) fn tick_at(elapsed: u64, tick_nanos: u64) -> u64 {
    elapsed / tick_nanos
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    start: Instant,
    tick_nanos: u64,
}

impl Clock {
    /// A clock starting now. `tick` must be at least a nanosecond (the builder checks).
    pub(crate) fn new(tick: Duration) -> Self {
        Clock {
            start: Instant::now(),
            tick_nanos: nanos(tick).max(1),
        }
    }

    pub(crate) fn tick_nanos(&self) -> u64 {
        self.tick_nanos
    }

    /// Nanoseconds since the start.
    pub(crate) fn elapsed(&self) -> u64 {
        nanos(self.start.elapsed())
    }

    /// The current tick, rounded down.
    pub(crate) fn now(&self) -> u64 {
        self.tick_at(self.elapsed())
    }

    /// The current tick once `elapsed` nanoseconds have passed (rounded down).
    pub(crate) fn tick_at(&self, elapsed: u64) -> u64 {
        tick_at(elapsed, self.tick_nanos)
    }

    /// The deadline of `instant`; instants before the start are due at once.
    pub(crate) fn deadline_at(&self, instant: Instant) -> u64 {
        nanos(instant.saturating_duration_since(self.start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_and_now_rounds_down() {
        let clock = Clock::new(Duration::from_millis(1));
        let start = clock.start;
        let tick = |instant| tick_of(clock.deadline_at(instant), clock.tick_nanos());
        assert_eq!(tick(start), 0);
        assert_eq!(tick(start + Duration::from_micros(1)), 1);
        assert_eq!(tick(start + Duration::from_millis(1)), 1);
        assert_eq!(tick(start + Duration::from_micros(1_001)), 2);
        assert_eq!(clock.tick_at(1_999_999), 1);
        // Instants before the start are due at once.
        if let Some(before) = start.checked_sub(Duration::from_millis(5)) {
            assert_eq!(clock.deadline_at(before), 0);
        }
    }

    #[test]
    fn huge_delays_saturate() {
        assert_eq!(nanos(Duration::MAX), u64::MAX);
        assert_eq!(tick_of(u64::MAX, 1), u64::MAX);
        let coarse = Clock::new(Duration::MAX);
        assert_eq!(coarse.now(), 0);
        assert_eq!(tick_of(u64::MAX, coarse.tick_nanos()), 1);
    }
}
