//! Sleeps no longer than the timers coming in are ahead: a reaper that a producer woke for
//! a deadline still far off caps its sleeps for a while, so that the next such timer finds
//! it planned to wake in time and is staged without waking it.
//!
//! A producer wakes the reaper for a timer due before the reaper's planned wake-up (see
//! `wakeup`), however far off that deadline is. A reaper with nothing due soon plans to
//! wake at its horizon (`IDLE_HORIZON`, a second), or at the earliest deadline it knows,
//! and where timers come in a few hundred milliseconds ahead and are cancelled soon after
//! (request timeouts), each one due before every other known becomes a wake-up: the plan
//! then moves down to its deadline, the timer is cancelled, the reaper tidies the cancel
//! away and plans its horizon again, and the next such timer does it again. In the futures
//! bench's W3 made of tasks (timeouts uniform in 100 ms to 10 s, all but one in a thousand
//! cancelled at once), producers woke the reapers some 4,000 times in a run of seven
//! rounds of a million requests for timers due 65 ms to 1 s ahead, each wake-up a system
//! call for the producer and a context switch in and out on a core it keeps busy.
//!
//! So a reaper woken at `now` for a deadline `lead` ahead, more than `SHORTEST` (a wake-up
//! a timer due that soon needs anyway), sleeps at most `lead / 2` (not less than
//! `SHORTEST`) for the next `HOLD`, each such wake-up lowering the cap further: a timer as
//! far ahead as the one that woke it, or farther than the cap, is then staged without a
//! wake-up, and the reaper wakes some `1 / cap` times a second instead (twenty a second
//! for leads of 100 ms). After `HOLD` without such a wake-up the cap lapses, so that a
//! reaper whose producers went quiet sleeps to its horizon again, at the price of one
//! more early wake-up a `HOLD` where they did not.

use super::{IDLE_HORIZON, TIDY_INTERVAL};
use crate::clock;

/// The shortest cap, and the least lead of a wake-up that sets one (nanoseconds): a
/// timer due sooner than this needs the reaper that soon.
const SHORTEST: u64 = clock::nanos(TIDY_INTERVAL);

/// How long a cap holds after the last wake-up that set or lowered it (nanoseconds).
const HOLD: u64 = clock::nanos(IDLE_HORIZON);

/// The reaper's cap on its sleeps (see the module doc).
#[derive(Debug, Default)]
pub(super) struct Lead {
    /// When the reaper last planned to wake, as it parked (nanoseconds since the start;
    /// 0 once that sleep is accounted for).
    planned: u64,
    /// The longest it sleeps while the cap holds (nanoseconds).
    cap: u64,
    /// Until when the cap holds (nanoseconds since the start; 0: none).
    until: u64,
}

impl Lead {
    /// The reaper parks, planning to wake at `plan` (nanoseconds since the start).
    pub(super) fn parks(&mut self, plan: u64) {
        self.planned = plan;
    }

    /// The reaper is awake at `now` (nanoseconds since the start), and a producer last
    /// asked it to be at work by `woken_for` (`u64::MAX`: none; see `Wakeup::woken_for`):
    /// if that was before its plan, and far off, the producer woke it early for it, and the
    /// cap comes down to half that lead.
    pub(super) fn woke(&mut self, woken_for: u64, now: u64) {
        let planned = std::mem::take(&mut self.planned);
        let lead = woken_for.saturating_sub(now);
        if woken_for >= planned || lead <= SHORTEST {
            return;
        }
        let cap = (lead / 2).max(SHORTEST);
        self.cap = if now < self.until {
            self.cap.min(cap)
        } else {
            cap
        };
        self.until = now.saturating_add(HOLD);
    }

    /// The latest the reaper plans to wake at `now` (nanoseconds since the start), at
    /// `horizon` without a cap.
    pub(super) fn limit(&self, horizon: u64, now: u64) -> u64 {
        if now < self.until {
            horizon.min(now.saturating_add(self.cap))
        } else {
            horizon
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_wake_up_for_a_far_deadline_caps_sleeps_at_half_its_lead_for_a_while() {
        let mut lead = Lead::default();
        let horizon = |now: u64| now + 1_000 * MS;
        assert_eq!(lead.limit(horizon(0), 0), horizon(0), "no cap yet");
        // Planned to wake at 1 s, woken at 5 ms for a timer due at 405 ms.
        lead.parks(1_000 * MS);
        lead.woke(405 * MS, 5 * MS);
        assert_eq!(lead.limit(horizon(5 * MS), 5 * MS), 205 * MS);
        // A later wake-up for a nearer deadline lowers it; a farther one does not raise it.
        lead.parks(205 * MS);
        lead.woke(180 * MS, 20 * MS);
        assert_eq!(lead.limit(horizon(20 * MS), 20 * MS), 100 * MS);
        lead.parks(300 * MS);
        lead.woke(290 * MS, 30 * MS);
        assert_eq!(
            lead.limit(horizon(30 * MS), 30 * MS),
            110 * MS,
            "cap still 80 ms"
        );
        // It lapses a `HOLD` after the last wake-up that set it.
        let lapsed = 30 * MS + HOLD;
        assert_eq!(lead.limit(horizon(lapsed), lapsed), horizon(lapsed));
        assert_eq!(
            lead.limit(horizon(lapsed - 1), lapsed - 1),
            lapsed - 1 + 80 * MS
        );
    }

    #[test]
    fn wake_ups_that_are_not_early_for_a_far_deadline_set_no_cap() {
        let mut lead = Lead::default();
        // At its plan (or later), by its own timeout or not.
        lead.parks(100 * MS);
        lead.woke(u64::MAX, 100 * MS);
        lead.parks(100 * MS);
        lead.woke(100 * MS, 10 * MS);
        // For a deadline no more than `SHORTEST` ahead: needed anyway.
        lead.parks(1_000 * MS);
        lead.woke(10 * MS + SHORTEST, 10 * MS);
        // Not asleep: the deadline asked for was not of this sleep.
        lead.woke(500 * MS, 10 * MS);
        assert_eq!(lead.limit(u64::MAX, 10 * MS), u64::MAX);
        // A deadline just past `SHORTEST` ahead caps at `SHORTEST`.
        lead.parks(1_000 * MS);
        lead.woke(10 * MS + SHORTEST + 1, 10 * MS);
        assert_eq!(lead.limit(u64::MAX, 10 * MS), 10 * MS + SHORTEST);
    }
}
