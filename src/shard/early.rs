//! The reaper's early wake-up: how long before a deadline it ends its sleep.
//!
//! The OS ends a timed sleep some time after its timeout: the timer interrupt, the wake of
//! an idle core (on a virtual machine, of the host thread behind it), the scheduler. On
//! this project's 2-core VM that is about 40 us at the median and over 100 us at the 99th
//! percentile, and every exactly-due timer would be that much late. So the reaper learns
//! it: after each sleep that ran to its timeout it compares when it woke with when it
//! asked to, and keeps a running median of that oversleep (one step up when a wake-up is
//! later than the estimate, one down when it is earlier: the estimate settles where half
//! the wake-ups are later, and one wild wake-up moves it by a step only). It then asks to
//! wake that much before each deadline and spins the rest (`Shard::spin_until`), so a
//! timer fires within microseconds of its deadline at the median, and the tail is shorter
//! by the same amount.
//!
//! The spin lasts as long as the OS wakes the reaper *earlier* than the estimate, which
//! is short next to a wake-up's own cost: at W6's 1,000 wake-ups a second the process's
//! CPU time did not grow measurably. The estimate is capped (`MAX_LEAD`), so a loaded
//! machine, whose wake-ups come milliseconds late, never makes the reaper spin for long.
//! Only sleeps until a deadline count: a sleep until the tidy interval or the idle horizon
//! wakes nothing that is due, and is not shortened.

/// The largest lead: on a machine where the OS wakes threads later than this at the
/// median, spinning longer would cost a core for little gain.
const MAX_LEAD: u64 = 50_000;

/// How far one wake-up moves the estimate, in nanoseconds.
const STEP: u64 = 1_000;

/// A running median of how late the OS ends the reaper's timed sleeps.
#[derive(Debug)]
pub(super) struct EarlyWake {
    /// The estimate, in nanoseconds: how long before a deadline the reaper asks to wake.
    lead: u64,
    /// False: the reaper sleeps until the deadline itself (`Builder::wake_early`).
    enabled: bool,
}

impl EarlyWake {
    pub(super) fn new(enabled: bool) -> Self {
        EarlyWake { lead: 0, enabled }
    }

    /// How long before a deadline to wake, in nanoseconds.
    pub(super) fn lead(&self) -> u64 {
        self.lead
    }

    /// The reaper slept from `asked_at` to wake at `target` and woke at `woke` (all
    /// nanoseconds since the start). A sleep that ended before its target was ended by a
    /// producer, not by the timeout, and says nothing of the OS's lateness; nor does one
    /// that was not asked to wait at all.
    pub(super) fn observe(&mut self, asked_at: u64, target: u64, woke: u64) {
        if !self.enabled || target <= asked_at || woke < target {
            return;
        }
        if woke - target > self.lead {
            self.lead = (self.lead + STEP).min(MAX_LEAD);
        } else {
            self.lead = self.lead.saturating_sub(STEP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `oversleeps` (nanoseconds) as timed sleeps of 1 ms each.
    fn feed(early: &mut EarlyWake, oversleeps: impl IntoIterator<Item = u64>) {
        for (i, late) in oversleeps.into_iter().enumerate() {
            let asked_at = i as u64 * 2_000_000;
            let target = asked_at + 1_000_000;
            early.observe(asked_at, target, target + late);
        }
    }

    #[test]
    fn the_lead_settles_at_the_median_oversleep() {
        let mut early = EarlyWake::new(true);
        // 30, 40 and 120 us in turn: the median is 40 us, the mean 63.
        feed(&mut early, [30_000, 40_000, 120_000].into_iter().cycle().take(3_000));
        assert!(
            (38_000..=41_000).contains(&early.lead()),
            "lead {}",
            early.lead()
        );
    }

    #[test]
    fn the_lead_follows_the_oversleep_down_again() {
        let mut early = EarlyWake::new(true);
        feed(&mut early, std::iter::repeat_n(45_000, 100));
        assert!((44_000..=45_000).contains(&early.lead()), "lead {}", early.lead());
        feed(&mut early, std::iter::repeat_n(5_000, 100));
        assert!(early.lead() <= 6_000, "lead {}", early.lead());
    }

    #[test]
    fn a_loaded_machine_caps_the_lead() {
        let mut early = EarlyWake::new(true);
        feed(&mut early, std::iter::repeat_n(3_000_000, 500));
        assert_eq!(early.lead(), MAX_LEAD);
    }

    #[test]
    fn sleeps_ended_by_a_producer_or_never_asked_teach_nothing() {
        let mut early = EarlyWake::new(true);
        feed(&mut early, std::iter::repeat_n(20_000, 50));
        let lead = early.lead();
        // Unparked half-way through: woke before the target.
        early.observe(0, 1_000_000, 500_000);
        // Asked to sleep until a target already passed: a pass's worth late, not the OS's.
        early.observe(2_000_000, 1_000_000, 2_100_000);
        assert_eq!(early.lead(), lead);
    }

    #[test]
    fn turned_off_it_never_leads() {
        let mut early = EarlyWake::new(false);
        feed(&mut early, std::iter::repeat_n(40_000, 100));
        assert_eq!(early.lead(), 0);
    }
}
