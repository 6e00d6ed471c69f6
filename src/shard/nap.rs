//! Coalesced wake-ups: a reaper whose timers come due in a dense stream sleeps a nap at
//! least between passes, and fires what came due meanwhile in one pass.
//!
//! With exact deadlines, a reaper that keeps up with timers due microseconds apart would
//! wake for every few of them: tens of thousands of timed sleeps a second, each a context
//! switch in and out, and, where producers keep every core busy, a preemption of the
//! producer sharing its core (its short slice gives a woken reaper the core at once). On
//! two cores, in the load tool's default scenario (ten million timers due over a second),
//! the reapers slept some 40,000 times a second and the producers lost a third of their
//! throughput to them.
//!
//! So the reaper keeps a run of its sleeps planned to last less than a nap (`NAP`,
//! 200 us): how many, since when, and the timers it fired over them. Once the run has
//! `DENSE` sleeps and has fired `DENSE_FIRED` timers a nap or more (ten thousand a
//! second), counting the run `DENSE` naps long at least (eight timers at least), the
//! reaper sleeps a nap at least: the stream's timers fire up to a nap late, a nap's worth
//! to a pass, and its sleeps fall to five thousand a second at most. The first sleep
//! planned for a nap or longer (a gap in the stream) ends the run, and deadlines are
//! exact again. A sparser stream keeps its exact deadlines however close two timers
//! come: at a thousand timers a second (W6) a reaper's sleeps are often short (it wakes
//! for a tick's start, then for its early target, then for the deadline), but eight
//! timers within a run of them hardly ever come.
//!
//! The plan the reaper publishes is the nap's end, so producers do not wake it for
//! timers due later than that. A reaper told to spin before deadlines
//! (`Builder::spin_before_deadline`) does not nap: that is a choice of CPU for exact
//! deadlines.

/// The shortest sleep of a reaper whose timers come due in a dense stream, in
/// nanoseconds.
const NAP: u64 = 200_000;

/// Sleeps in a run, and timers fired over it per nap of its length (`DENSE` naps at
/// least), from which the reaper naps.
const DENSE: u32 = 4;
const DENSE_FIRED: u64 = 2;

/// The reaper's run of sleeps planned shorter than a nap.
#[derive(Debug, Default)]
pub(super) struct Naps {
    /// Sleeps in the run.
    short: u32,
    /// When it began (nanoseconds since the start).
    since: u64,
    /// Timers fired over it.
    fired: u64,
}

impl Naps {
    /// The reaper, at `now` (nanoseconds since the start), having fired `fired` timers
    /// since it last planned a sleep, would sleep until `wake_at` (`None`: until woken,
    /// or its horizon): when its nap ends instead, if its sleeps come too close together
    /// in a stream of timers (see the module doc); `None` to keep its plan.
    pub(super) fn put_off(&mut self, wake_at: Option<u64>, now: u64, fired: u64) -> Option<u64> {
        if wake_at.is_none_or(|at| at.saturating_sub(now) >= NAP) {
            *self = Naps::default();
            return None;
        }
        if self.short == 0 {
            self.since = now;
        }
        self.short = self.short.saturating_add(1);
        self.fired = self.fired.saturating_add(fired);
        let naps = (now - self.since).div_ceil(NAP).max(u64::from(DENSE));
        let dense = self.short >= DENSE && self.fired >= DENSE_FIRED.saturating_mul(naps);
        dense.then(|| now.saturating_add(NAP))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_sleeps_firing_a_stream_become_naps_until_a_gap() {
        let mut naps = Naps::default();
        let step = NAP / 10;
        // A few short sleeps keep their plans, whatever they fire.
        for i in 0..u64::from(DENSE) - 1 {
            assert_eq!(
                naps.put_off(Some(i * step + step), i * step, 2 * DENSE_FIRED),
                None
            );
        }
        // The next one, and those after it, last a nap.
        let now = u64::from(DENSE) * step;
        assert_eq!(naps.put_off(Some(now + step), now, 0), Some(now + NAP));
        assert_eq!(naps.put_off(Some(now + 1), now, 0), Some(now + NAP));
        // A plan a nap or more away is kept and ends the run, as does no plan at all.
        assert_eq!(naps.put_off(Some(now + NAP), now, 0), None);
        assert_eq!(naps.put_off(Some(now + step), now, DENSE_FIRED), None);
        for _ in 1..DENSE {
            naps.put_off(Some(now + step), now, DENSE_FIRED);
        }
        assert_eq!(naps.put_off(None, now, 0), None);
        assert_eq!(naps.put_off(Some(now + step), now, DENSE_FIRED), None);
    }

    #[test]
    fn a_run_of_short_sleeps_firing_fewer_timers_than_a_stream_keeps_its_plans() {
        let mut naps = Naps::default();
        // A timer every other sleep, a sleep every half nap: a timer a nap.
        for i in 0..100 {
            let now = i * NAP / 2;
            let fired = u64::from(i % 2 == 0);
            assert_eq!(naps.put_off(Some(now + NAP / 2), now, fired), None);
        }
    }
}
