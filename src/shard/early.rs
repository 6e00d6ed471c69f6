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
//! wake that much before each deadline further off than that, and spins the rest (`Shard::spin_until`), so a
//! timer fires within microseconds of its deadline at the median, and the tail is shorter
//! by the same amount.
//!
//! The spin lasts as long as the OS wakes the reaper *earlier* than the estimate, a few
//! microseconds: in W6 (a timer a millisecond, each a wake-up at its tick's start and one
//! at its deadline) the process's CPU time did not grow measurably. But a reaper whose
//! deadlines come every few tens of microseconds would spin a core's tenth away, from
//! producers that share its core (W3 at one producer thread lost 4-13 % of its throughput
//! so), and on a busy machine any spin takes a core from somebody. So the reaper spins
//! for at most 1 % of its time (a budget that grows by a hundredth of the time that
//! passes, up to `MAX_BUDGET`; without the lead's worth in it, a sleep is not shortened);
//! it spins only within a lead of the deadline a sleep that ran to its early target was
//! for (never after a pass a producer woke it for, nor between passes back to back); and a
//! wake-up later than `LOADED` is taken for the machine being busy, not for the OS's
//! usual lateness: it moves the estimate down, so on a saturated machine the lead falls to
//! zero. The estimate is capped (`MAX_LEAD`). Only sleeps until something due count (a
//! deadline, a tick's start, a cascade): a sleep until the tidy interval or the idle
//! horizon wakes nothing that is due, and is not shortened.

/// The largest lead: on a machine where the OS wakes threads later than this at the
/// median, spinning longer would cost a core for little gain.
const MAX_LEAD: u64 = 50_000;

/// A wake-up later than this is the machine being busy (the reaper waited for a core),
/// which a spin does not help: it counts as an earlier one.
const LOADED: u64 = 2 * MAX_LEAD;

/// How far one wake-up moves the estimate, in nanoseconds.
const STEP: u64 = 1_000;

/// The reaper spins for at most one part in `SHARE` of its time (see the module doc).
const SHARE: u64 = 100;

/// The most spinning time a reaper saves up while it does not spin, in nanoseconds.
const MAX_BUDGET: u64 = 1_000_000;

/// A running median of how late the OS ends the reaper's timed sleeps.
#[derive(Debug)]
pub(super) struct EarlyWake {
    /// The estimate, in nanoseconds: how long before a deadline the reaper asks to wake.
    lead: u64,
    /// False: the reaper sleeps until the deadline itself (`Builder::wake_early`).
    enabled: bool,
    /// The lead the last sleep's target was set by, if it was set early.
    led: Option<u64>,
    /// After a sleep that ran to its early target: until when (nanoseconds since the
    /// start) the reaper may spin, and for how long before a deadline.
    window: Option<(u64, u64)>,
    /// Spinning time the reaper may still spend, in nanoseconds, as of `refilled_at`.
    budget: u64,
    refilled_at: u64,
}

impl EarlyWake {
    pub(super) fn new(enabled: bool) -> Self {
        EarlyWake {
            lead: 0,
            enabled,
            led: None,
            window: None,
            budget: 0,
            refilled_at: 0,
        }
    }

    /// When to wake for a deadline at `deadline`, asked at `now` (nanoseconds since the
    /// start): `lead` before it, unless that has passed already (then at the deadline,
    /// without a spin).
    pub(super) fn target(&mut self, deadline: u64, now: u64) -> u64 {
        // The budget grows by a `SHARE`th of the time since it last grew.
        let earned = now.saturating_sub(self.refilled_at) / SHARE;
        self.budget = self.budget.saturating_add(earned).min(MAX_BUDGET);
        self.refilled_at = self.refilled_at.max(now);
        let early = deadline.saturating_sub(self.lead);
        let affordable = self.budget >= self.lead;
        self.led =
            (self.enabled && self.lead > 0 && early > now && affordable).then_some(self.lead);
        if self.led.is_some() { early } else { deadline }
    }

    /// The reaper spun for `nanos` on the lead (`spin_lead`): taken from its budget.
    pub(super) fn spent(&mut self, nanos: u64) {
        self.budget = self.budget.saturating_sub(nanos);
    }

    /// The reaper slept from `asked_at` to wake at `target` and woke at `woke` (all
    /// nanoseconds since the start). A sleep that ended before its target was ended by a
    /// producer, not by the timeout, and says nothing of the OS's lateness; nor does one
    /// that was not asked to wait at all.
    ///
    /// After a sleep that ran to its early target, the reaper may spin until a lead past
    /// the deadline it woke for: to that deadline, to a deadline within a lead after it
    /// (with exact deadlines, the reaper wakes for a tick's start, and then for the first
    /// deadline in it), and again after a spin that new work cut short.
    pub(super) fn observe(&mut self, asked_at: u64, target: u64, woke: u64) {
        let led = self.led.take();
        if !self.enabled || target <= asked_at || woke < target {
            return;
        }
        if let Some(lead) = led {
            self.window = Some((target + 2 * lead, lead));
        }
        let late = woke - target;
        if late > self.lead && late <= LOADED {
            self.lead = (self.lead + STEP).min(MAX_LEAD);
        } else {
            self.lead = self.lead.saturating_sub(STEP);
        }
    }

    /// How long before a deadline the reaper may spin at `now` (nanoseconds since the
    /// start): the lead its last sleep woke early by, within that sleep's window (see
    /// `observe`); zero at any other time.
    pub(super) fn spin_lead(&self, now: u64) -> u64 {
        match self.window {
            Some((until, lead)) if now <= until => lead,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `oversleeps` (nanoseconds) as timed sleeps to an early target, 1 ms each.
    fn feed(early: &mut EarlyWake, oversleeps: impl IntoIterator<Item = u64>) {
        for (i, late) in oversleeps.into_iter().enumerate() {
            let asked_at = i as u64 * 2_000_000;
            let target = early.target(asked_at + 1_000_000, asked_at);
            early.observe(asked_at, target, target + late);
        }
    }

    #[test]
    fn the_lead_settles_at_the_median_oversleep() {
        let mut early = EarlyWake::new(true);
        // 30, 40 and 90 us in turn: the median is 40 us, the mean 53.
        feed(
            &mut early,
            [30_000, 40_000, 90_000].into_iter().cycle().take(3_000),
        );
        assert!(
            (38_000..=41_000).contains(&early.lead),
            "lead {}",
            early.lead
        );
    }

    #[test]
    fn the_lead_follows_the_oversleep_down_again() {
        let mut early = EarlyWake::new(true);
        feed(&mut early, std::iter::repeat_n(45_000, 100));
        assert!(
            (44_000..=45_000).contains(&early.lead),
            "lead {}",
            early.lead
        );
        feed(&mut early, std::iter::repeat_n(5_000, 100));
        assert!(early.lead <= 6_000, "lead {}", early.lead);
    }

    #[test]
    fn the_lead_is_capped() {
        let mut early = EarlyWake::new(true);
        feed(&mut early, std::iter::repeat_n(80_000, 500));
        assert_eq!(early.lead, MAX_LEAD);
    }

    #[test]
    fn a_busy_machine_brings_the_lead_down() {
        let mut early = EarlyWake::new(true);
        feed(&mut early, std::iter::repeat_n(45_000, 100));
        // The reaper waited milliseconds for a core: spinning would not have helped.
        feed(&mut early, std::iter::repeat_n(3_000_000, 100));
        assert_eq!(early.lead, 0);
    }

    #[test]
    fn sleeps_ended_by_a_producer_or_never_asked_teach_nothing() {
        let mut early = EarlyWake::new(true);
        feed(&mut early, std::iter::repeat_n(20_000, 50));
        let lead = early.lead;
        // Unparked half-way through: woke before the target.
        early.observe(0, 1_000_000, 500_000);
        // Asked to sleep until a target already passed: a pass's worth late, not the OS's.
        early.observe(2_000_000, 1_000_000, 2_100_000);
        assert_eq!(early.lead, lead);
    }

    #[test]
    fn the_reaper_spins_only_within_a_lead_of_a_deadline_it_woke_early_for() {
        let mut early = EarlyWake::new(true);
        feed(&mut early, std::iter::repeat_n(20_000, 50));
        let lead = early.lead;
        assert!(lead > 0);
        // Ran to its early target: the reaper may spin until a lead past the deadline.
        let target = early.target(10_000_000, 9_000_000);
        assert_eq!(target, 10_000_000 - lead);
        early.observe(9_000_000, target, target + 5_000);
        assert_eq!(early.spin_lead(target + 5_000), lead);
        assert_eq!(early.spin_lead(10_000_000 + lead), lead);
        assert_eq!(early.spin_lead(10_000_000 + lead + 1), 0);
        // Woken by a producer before its target: no spin.
        let target = early.target(20_000_000, 19_000_000);
        early.observe(19_000_000, target, target - 100_000);
        assert_eq!(early.spin_lead(target - 100_000), 0);
        assert_eq!(early.spin_lead(20_000_000), 0);
        // The deadline was nearer than the lead: sleep to it, and no spin after.
        let lead = early.lead;
        let target = early.target(30_000_000, 30_000_000 - lead / 2);
        assert_eq!(target, 30_000_000);
        early.observe(30_000_000 - lead / 2, target, target + 5_000);
        assert_eq!(early.spin_lead(target + 5_000), 0);
        // Asked to sleep until a target already passed: no window either.
        early.observe(40_000_000, 39_000_000, 40_000_000);
        assert_eq!(early.spin_lead(40_000_000), 0);
    }

    #[test]
    fn the_reaper_spins_for_at_most_a_hundredth_of_its_time() {
        let mut early = EarlyWake::new(true);
        feed(&mut early, std::iter::repeat_n(20_000, 100));
        // Deadlines every 100 us, each spun for a whole lead, for 100 ms: the budget saved
        // up (1 ms) and what 100 ms earn (1 ms) pay for about a hundred spins of 20 us.
        let mut now = 1_000_000_000;
        let mut spun = 0;
        let mut led = 0;
        for _ in 0..1_000 {
            let deadline = now + 100_000;
            let target = early.target(deadline, now);
            // The OS wakes the reaper 20 us late every time.
            early.observe(now, target, target + 20_000);
            if target < deadline {
                led += 1;
                let lead = early.spin_lead(target + 20_000);
                early.spent(lead);
                spun += lead;
            }
            now = deadline;
        }
        assert!(
            (1_900_000..=2_100_000).contains(&spun),
            "spun {spun} in {led} spins"
        );
        // A quiet second later, the reaper leads again.
        let now = now + 1_000_000_000;
        assert!(early.target(now + 1_000_000, now) < now + 1_000_000);
    }

    #[test]
    fn turned_off_it_never_leads() {
        let mut early = EarlyWake::new(false);
        feed(&mut early, std::iter::repeat_n(40_000, 100));
        assert_eq!(early.lead, 0);
        let target = early.target(10_000_000, 0);
        assert_eq!(target, 10_000_000);
        early.observe(0, target, target + 40_000);
        assert_eq!(early.spin_lead(target + 40_000), 0);
    }
}
