//! Shutdown's last step on a shard: after the reaper's last pass it collects and closes
//! every producer's stage (from then on producers go to the inbox), then closes both
//! inboxes (producers whose push is refused take their timer back; cancellers and resetters whose
//! change is refused drop a cancelled payload themselves), fires what came in due (a
//! reaper's wind-up: an owner inside its stage at the last pass hands its timers over
//! only now), and hands back every timer still pending, held ones by the generation they
//! were held at.

use super::Shard;
use super::reaper::List;
use crate::due::Due;
use crate::slots::{self, Freed, PENDING, RESETTING};
use crate::sync::{self, Ordering};

impl<T> Shard<T> {
    /// At shutdown, after the last pass: refuses new timers and changes, and hands back
    /// every pending payload, firing none (a manual timer's wind-up: its timers fire only
    /// in `advance`; the reapers' is `wind_up_firing`).
    pub fn wind_up(&self, due: &mut Due) -> Vec<T> {
        let mut freed = std::mem::take(&mut due.freed);
        self.close(due, &mut freed);
        self.hand_back_pending(due, freed)
    }

    /// `wind_up` for a reaper: what came in as it closed (the timers of owners that were
    /// inside their stages during its last pass, the inbox's last) and is due by tick
    /// `now` fires first, with `handler`, as it would have in that pass; so a drain hands
    /// back no timer due within its bound, whatever the owners were doing.
    pub(crate) fn wind_up_firing(
        &self,
        due: &mut Due,
        now: u64,
        elapsed: &dyn Fn() -> u64,
        handler: &(dyn Fn(T) + Sync),
    ) -> Vec<T> {
        let mut freed = std::mem::take(&mut due.freed);
        self.close(due, &mut freed);
        self.fire_due(due, now, elapsed, handler, &mut freed);
        self.hand_back_pending(due, freed)
    }

    /// Collects and closes the stages, then the inboxes, and takes in what they held.
    fn close(&self, due: &mut Due, freed: &mut Freed) {
        // The stages first: an owner asked to hand its timers over pushes them on the inbox.
        self.close_stages(due, freed);
        let changes = self.changes.close();
        let arrivals = self.inbox.close();
        self.walk(List::Arrivals, due, arrivals, freed, &mut |_, _| {});
        self.walk(List::Changes, due, changes, freed, &mut |_, _| {});
        // The cancels the stages held, now that the inbox's last timers are in.
        self.apply_cancels(due, freed, &mut |_, _| {});
    }

    /// Hands back every timer still pending in the wheel or held.
    fn hand_back_pending(&self, due: &mut Due, mut freed: Freed) -> Vec<T> {
        // A held timer names its generation: its slot may have moved on since (cancelled,
        // freed and taken again by a producer that is still to find the inbox closed, so
        // its new timer is not the reaper's to take). A slot in the wheel is current: the
        // reaper unlinks every slot it frees.
        let held: Vec<(u32, Option<u32>)> = due
            .drain_near()
            .map(|near| (near.index, Some(near.generation)))
            .collect();
        let in_wheel =
            std::iter::from_fn(|| self.poll_wheel(due, u64::MAX)).map(|index| (index, None));
        let slots: Vec<(u32, Option<u32>)> = held.into_iter().chain(in_wheel).collect();
        // A timer held and also back in the wheel (reset) is handed back once: the first
        // claim takes it.
        let unfired = slots
            .into_iter()
            .filter_map(|(index, generation)| self.hand_back(index, generation, &mut freed))
            .collect();
        self.slots.recycle(&mut freed);
        unfired
    }

    /// At shutdown: takes the payload of slot `index` if it is pending, in `generation`
    /// if one is given.
    pub(super) fn hand_back(
        &self,
        index: u32,
        generation: Option<u32>,
        freed: &mut Freed,
    ) -> Option<T> {
        // SAFETY: the reaper may look at any slot (see `Slots::owned`). A held timer's
        // slot may be gone: freed since, and its chunk given back.
        let slot = unsafe { self.slots.owned(index) }?;
        // A reset that comes now still finds its slot pending, and a cancel still wins;
        // neither can queue a change any more, so take the slot as it stands.
        let mut seen = slot.state.load(Ordering::Acquire);
        loop {
            let (current, state) = slots::split(seen);
            if generation.is_some_and(|generation| generation != current) {
                return None;
            }
            if seen & RESETTING != 0 {
                // The resetter is between two instructions; it never waits on us.
                sync::thread::yield_now();
                seen = slot.state.load(Ordering::Acquire);
                continue;
            }
            if state != PENDING {
                return None;
            }
            match self.claim(index, slot, seen, freed) {
                Ok(payload) => return Some(payload),
                Err(now_seen) => seen = now_seen,
            }
        }
    }
}
