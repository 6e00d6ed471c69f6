//! Time: exact deadlines in nanoseconds since the engine started, filed in the wheel under
//! ticks.
//!
//! A timer's deadline is kept exact (what lateness is measured against); the reaper files it
//! under the first tick that starts at or after it (rounded *up*), and the current tick
//! rounds *down*, so a timer is never due before its instant (the early-fire trap of
//! tokio-timer#14 and akka#1547), and at most one tick after it. Deadlines past the end of
//! the `u64` nanosecond range (584 years) saturate to its end instead of wrapping or
//! panicking.
//!
//! Every schedule reads the clock, so the read is kept cheap: on Linux it is one
//! `clock_gettime(CLOCK_MONOTONIC)` (the clock `Instant` reads, through the vDSO) and
//! integer arithmetic against the reading taken at the start, some 30 instructions where
//! `Instant::elapsed` and the `Duration` it returns took about 90 (callgrind). The start
//! reading is taken just after the start `Instant`, so the engine's time never runs ahead
//! of an `Instant`'s: a timer due at an `Instant` never fires before it. The base a delay
//! is added to ([`Clock::elapsed_ceiling`]) is cheaper still on x86-64 Linux: the
//! processor's counter, extrapolated so that it is never behind the clock (see `tsc`).

use std::time::{Duration, Instant};

#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]
mod tsc;

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
pub(crate) const fn nanos(duration: Duration) -> u64 {
    let nanos = duration.as_nanos();
    if nanos > u64::MAX as u128 {
        u64::MAX
    } else {
        nanos as u64
    }
}

/// `now + delay`; past what an `Instant` can hold (centuries away), 30 years after `now`,
/// as tokio's far future.
pub(crate) fn instant_after(now: Instant, delay: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
    now.checked_add(delay)
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

/// The tick a deadline is filed under: the first that starts at or after it.
pub(crate) fn tick_of(deadline: u64, tick_nanos: u64) -> u64 {
    deadline.div_ceil(tick_nanos)
}

/// The deadline a timer with `slack` nanoseconds of tolerance is filed at: `deadline`
/// rounded up to a multiple of the largest power-of-two number of ticks not above `slack`
/// (of the largest power-of-two number of nanoseconds, for a slack under a tick). Never
/// before `deadline`, never more than `slack` after it (the step is at most `slack`), and
/// timers whose deadlines fall in one step share the rounded deadline, so the reaper fires
/// them in one wake-up. Zero slack (or a rounding past the end of the range) leaves the
/// deadline as it is.
#[inline]
pub(crate) fn within(deadline: u64, slack: u64, tick_nanos: u64) -> u64 {
    // Zero slack first: every schedule without slack (nearly all of them) comes here, and
    // with the comparison against the tick first it made two compare-and-branches.
    if slack == 0 {
        return deadline;
    }
    let step = if slack >= tick_nanos {
        // The largest `tick << k` not above `slack`, without a division (the one below
        // is the schedule path's only other): `k` is the difference of the logarithms,
        // or one less.
        let step = tick_nanos << (slack.ilog2() - tick_nanos.ilog2());
        if step > slack { step >> 1 } else { step }
    } else {
        1 << slack.ilog2()
    };
    deadline
        .div_ceil(step)
        .checked_mul(step)
        .unwrap_or(deadline)
}

/// The current tick once `elapsed` nanoseconds have passed (rounded down).
pub(crate) fn tick_at(elapsed: u64, tick_nanos: u64) -> u64 {
    elapsed / tick_nanos
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    start: Instant,
    /// The monotonic clock's reading, in nanoseconds, taken just after `start`.
    #[cfg(all(target_os = "linux", not(miri)))]
    start_nanos: u64,
    /// Whether a delay's base is read from the processor's counter (see `tsc`).
    #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]
    counter: bool,
    tick_nanos: u64,
}

/// The monotonic clock (`Instant`'s on Linux), in nanoseconds. On x86-64, asked of the
/// kernel itself on a thread that may not run `rdtsc` (see `tsc::may_count`), where the
/// vDSO's reading would fault.
#[cfg(all(target_os = "linux", not(miri)))]
#[inline]
pub(crate) fn monotonic_nanos() -> u64 {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    if !tsc::may_count() {
        return tsc::read_by_syscall(libc::CLOCK_MONOTONIC);
    }
    read(libc::CLOCK_MONOTONIC)
}

/// A clock's reading in nanoseconds: the monotonic clock, or (for `tsc`) the raw monotonic
/// or the boot clock.
#[cfg(all(target_os = "linux", not(miri)))]
#[inline]
fn read(clock: libc::clockid_t) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the pointer, which points at a
    // live, writable one; the clocks asked for (monotonic, raw, boot time) exist on every
    // Linux since 2.6.39, so it does not fail (std's `Instant::now` relies on the same
    // call).
    unsafe { libc::clock_gettime(clock, &mut now) };
    // These clocks count from boot: seconds and nanoseconds are not negative, and the sum
    // fits in a u64 for 584 years of uptime.
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64)
}

impl Clock {
    /// A clock starting now. `tick` must be at least a nanosecond (the builder checks).
    pub(crate) fn new(tick: Duration) -> Self {
        let start = Instant::now();
        Clock {
            start,
            // After `start`: see the module doc.
            #[cfg(all(target_os = "linux", not(miri)))]
            start_nanos: monotonic_nanos(),
            #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]
            counter: tsc::start(),
            tick_nanos: nanos(tick).max(1),
        }
    }

    pub(crate) fn tick_nanos(&self) -> u64 {
        self.tick_nanos
    }

    /// Nanoseconds since the start.
    #[inline]
    pub(crate) fn elapsed(&self) -> u64 {
        #[cfg(all(target_os = "linux", not(miri)))]
        return monotonic_nanos().saturating_sub(self.start_nanos);
        #[cfg(not(all(target_os = "linux", not(miri))))]
        nanos(self.start.elapsed())
    }

    /// Nanoseconds since the start, read as the base of a delay's deadline: never less
    /// than `elapsed` read at any moment before the call, and at most a few microseconds
    /// more than it after (see `tsc`), so a timer due `delay` after it is never early. Only
    /// a deadline's base: whether a timer is due reads `elapsed`, which this reading would
    /// make early.
    #[inline]
    pub(crate) fn elapsed_ceiling(&self) -> u64 {
        #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri), not(loom)))]
        if self.counter {
            return tsc::ceiling().saturating_sub(self.start_nanos);
        }
        self.elapsed()
    }

    /// The current tick, rounded down.
    pub(crate) fn now(&self) -> u64 {
        self.tick_at(self.elapsed())
    }

    /// The current tick once `elapsed` nanoseconds have passed (rounded down).
    pub(crate) fn tick_at(&self, elapsed: u64) -> u64 {
        tick_at(elapsed, self.tick_nanos)
    }

    /// The instant of a deadline (`elapsed` nanoseconds since the start).
    pub(crate) fn instant_of(&self, elapsed: u64) -> Instant {
        instant_after(self.start, Duration::from_nanos(elapsed))
    }

    /// The deadline of `instant`; instants before the start are due at once.
    #[inline]
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

    // The engine's time must never run ahead of `Instant`'s, or a timer due at an
    // instant could fire before it.
    #[test]
    fn the_engines_time_never_runs_ahead_of_instants() {
        let clock = Clock::new(Duration::from_millis(1));
        for _ in 0..100_000 {
            let engine = clock.elapsed();
            let instant = clock.deadline_at(Instant::now());
            assert!(engine <= instant, "{engine} ns ahead of {instant} ns");
        }
        std::thread::sleep(Duration::from_millis(5));
        let engine = clock.elapsed();
        let instant = clock.deadline_at(Instant::now());
        assert!(engine <= instant && engine >= 5_000_000);
        assert!(
            instant - engine < 1_000_000,
            "the same clock, to within a millisecond"
        );
    }

    #[test]
    fn instants_and_deadlines_round_trip() {
        let clock = Clock::new(Duration::from_millis(1));
        for elapsed in [0, 1, 999_999, 5_000_000_000] {
            assert_eq!(clock.deadline_at(clock.instant_of(elapsed)), elapsed);
        }
        assert!(clock.instant_of(u64::MAX) > clock.instant_of(1 << 60));
    }

    #[test]
    fn slack_rounds_up_to_a_power_of_two_ticks_within_it() {
        const MS: u64 = 1_000_000;
        // 10 ms of slack on a 1 ms tick: 8 ms steps.
        assert_eq!(within(3 * MS, 10 * MS, MS), 8 * MS);
        assert_eq!(within(6 * MS + 1, 10 * MS, MS), 8 * MS);
        assert_eq!(within(8 * MS, 10 * MS, MS), 8 * MS, "on a step: as asked");
        assert_eq!(within(8 * MS + 1, 10 * MS, MS), 16 * MS);
        // Under a tick: a power of two nanoseconds.
        assert_eq!(within(1_000, 600, MS), 1_024);
        // None: as asked.
        assert_eq!(within(3 * MS + 7, 0, MS), 3 * MS + 7);
        assert_eq!(within(u64::MAX - 1, 10 * MS, MS), u64::MAX - 1);
    }

    proptest::proptest! {
        #[test]
        fn slack_never_fires_early_nor_past_the_slack(
            deadline in 0u64..1 << 50,
            other in 0u64..1 << 50,
            slack in 0u64..1 << 40,
            tick in 1u64..1 << 30,
        ) {
            let rounded = within(deadline, slack, tick);
            proptest::prop_assert!(rounded >= deadline);
            proptest::prop_assert!(rounded - deadline <= slack);
            // Two deadlines rounded to one value are within each other's slack.
            if within(other, slack, tick) == rounded {
                proptest::prop_assert!(deadline.abs_diff(other) <= slack);
            }
            // Rounding is stable: a rounded deadline is a step boundary.
            proptest::prop_assert_eq!(within(rounded, slack, tick), rounded);
            // The step is the largest power-of-two number of ticks within the slack.
            if slack >= tick {
                let step = tick << (slack / tick).ilog2();
                proptest::prop_assert_eq!(rounded, deadline.div_ceil(step) * step);
            }
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
