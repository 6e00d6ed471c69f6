//! Time in ticks: a monotonic count of tick-sized steps since the engine started.
//!
//! Deadlines round *up* to the next tick and the current tick rounds *down*, so a timer is
//! never due before its instant (the early-fire trap of tokio-timer#14 and akka#1547), and
//! at most one tick after it. Delays past the end of the `u64` tick range (half a billion
//! years at 1 ms) saturate to the last tick instead of wrapping or panicking.

use std::time::{Duration, Instant};

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
            tick_nanos: u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1),
        }
    }

    /// The current tick, rounded down.
    pub(crate) fn now(&self) -> u64 {
        self.ticks_floor(self.start.elapsed())
    }

    /// The tick at which `instant` has certainly passed (rounded up).
    pub(crate) fn deadline_at(&self, instant: Instant) -> u64 {
        self.ticks_ceil(instant.saturating_duration_since(self.start))
    }

    /// The deadline of a timer `delay` from now.
    pub(crate) fn deadline_after(&self, delay: Duration) -> u64 {
        match Instant::now().checked_add(delay) {
            Some(instant) => self.deadline_at(instant),
            None => u64::MAX,
        }
    }

    /// How long from now until tick `tick` starts (zero if it has).
    pub(crate) fn until(&self, tick: u64) -> Duration {
        let at = u128::from(tick) * u128::from(self.tick_nanos);
        let at = Duration::from_nanos(u64::try_from(at).unwrap_or(u64::MAX));
        at.saturating_sub(self.start.elapsed())
    }

    /// The tick `elapsed` after the start falls in (rounded down): the current tick when
    /// that much time has passed.
    pub(crate) fn ticks_floor(&self, elapsed: Duration) -> u64 {
        u64::try_from(elapsed.as_nanos() / u128::from(self.tick_nanos)).unwrap_or(u64::MAX)
    }

    /// The first tick at or after `elapsed` from the start (rounded up): the deadline of a
    /// timer due then.
    pub(crate) fn ticks_ceil(&self, elapsed: Duration) -> u64 {
        let ticks = elapsed.as_nanos().div_ceil(u128::from(self.tick_nanos));
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_and_now_rounds_down() {
        let clock = Clock::new(Duration::from_millis(1));
        let start = clock.start;
        assert_eq!(clock.deadline_at(start), 0);
        assert_eq!(clock.deadline_at(start + Duration::from_micros(1)), 1);
        assert_eq!(clock.deadline_at(start + Duration::from_millis(1)), 1);
        assert_eq!(clock.deadline_at(start + Duration::from_micros(1_001)), 2);
        assert_eq!(clock.ticks_floor(Duration::from_micros(1_999)), 1);
        // Instants before the start are due at once.
        if let Some(before) = start.checked_sub(Duration::from_millis(5)) {
            assert_eq!(clock.deadline_at(before), 0);
        }
    }

    #[test]
    fn huge_delays_saturate() {
        let clock = Clock::new(Duration::from_nanos(1));
        assert_eq!(clock.deadline_after(Duration::MAX), u64::MAX);
        assert!(clock.until(u64::MAX) > Duration::from_secs(1 << 20));
        let coarse = Clock::new(Duration::MAX);
        assert_eq!(coarse.now(), 0);
    }
}
