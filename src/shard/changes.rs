//! Changes of a pending timer from any thread: a cancel claims the slot's state word from
//! `PENDING` (so it and the reaper's firing never both win, see `slots`) and hands the
//! slot to whoever frees it: the reaper, through the cancelling thread's stage when it
//! holds it (see `staged`) or the list of changes; a reset under way; or the holder of
//! the stage the timer is still staged in. A reset owns the deadline field under the
//! `RESETTING` flag and then queues its change, so that the reaper moves the timer.

use super::{Shard, is_backlog};
use crate::inbox::Closed;
use crate::slots::{self, CANCELLED, FIRING, FLAGS, PENDING, Pin, QUEUED, RESETTING, STAGED, Slot};
use crate::stage::Stage;
use crate::sync::Ordering;

/// What `Shard::cancel_pending` did.
pub(super) enum Cancelled<T> {
    /// Nothing: the handle names no pending timer.
    Not,
    /// Cancelled, and handed to whoever frees it; the payload, if the caller is to drop
    /// it (the reaper refused the change as it wound up).
    Done(Option<T>),
    /// Cancelled while staged: the stage's holder frees it.
    Staged,
}

impl<T> Shard<T> {
    /// Cancels the timer in slot `index` of generation `generation`; true if it was pending
    /// (it will never run now), false for a fired, cancelled or unknown one.
    #[cfg(any(test, loom))]
    pub fn cancel(&self, index: u32, generation: u32) -> bool {
        self.cancel_from(None, index, generation)
    }

    /// `cancel`, from the thread that owns `stage` (if given): a timer still staged there
    /// is taken out at once, and its slot kept for the thread's next timer; and the owner
    /// looks at the slot without a pin where its stage allows (see `cancel_owned`).
    /// Inlined into `Scheduler::cancel`, which is not inlined in turn (see there).
    #[inline]
    pub fn cancel_from(&self, stage: Option<&Stage>, index: u32, generation: u32) -> bool {
        if let Some(cancelled) = stage.and_then(|stage| self.cancel_owned(stage, index, generation))
        {
            return cancelled;
        }
        // Pinned if need be: a stale handle's slot may be in a chunk the reaper gives back
        // meanwhile.
        let guard = Pin::for_slot(index);
        let Some(slot) = self.slots.get(index, &guard) else {
            return false;
        };
        let payload = match self.cancel_pending(slot, index, generation, stage, false) {
            Cancelled::Not => return false,
            Cancelled::Done(payload) => payload,
            Cancelled::Staged => stage.and_then(|stage| self.reclaim(stage, index, slot)),
        };
        if let Some(payload) = payload {
            drop(guard);
            self.discard(payload);
        }
        true
    }

    /// The cancel's step on `slot` (slot `index`, looked up by the caller): marks the timer
    /// of generation `generation` cancelled if it is pending, and hands it to whoever
    /// frees it: the reaper (through `stage`, if the caller `holds` it, or the list of
    /// changes), a reset under way, or the holder of the stage it is staged in (`Staged`:
    /// the caller, if it is the owner).
    #[inline]
    pub(super) fn cancel_pending(
        &self,
        slot: Slot<'_, T>,
        index: u32,
        generation: u32,
        stage: Option<&Stage>,
        holds: bool,
    ) -> Cancelled<T> {
        // Relaxed: only a first guess for the CAS, which checks it. A load rather than a
        // CAS first: the slot's line comes in once either way, and a guess that fails
        // (another generation, or a timer that fired) writes nothing.
        let mut current = slot.state.load(Ordering::Relaxed);
        loop {
            if current & !FLAGS != slots::word(generation, PENDING) {
                return Cancelled::Not;
            }
            // A reset under way pushes the change when it is done, and the holder of a
            // staged timer's stage frees it; otherwise this pushes the change.
            let queue = if current & (RESETTING | STAGED) == 0 {
                QUEUED
            } else {
                0
            };
            let cancelled = slots::word(generation, CANCELLED) | (current & FLAGS) | queue;
            // AcqRel on success: Acquire sees the payload the producer published (the
            // reaper drops it later on our behalf) and orders the push below after the
            // reaper's read of `change_link`; Release hands the CANCELLED state to the
            // reaper. Relaxed on failure: the value is only looked at again.
            match slot.state.compare_exchange_weak(
                current,
                cancelled,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        self.count_cancelled(stage);
        if current & STAGED != 0 {
            return Cancelled::Staged;
        }
        if current & (RESETTING | QUEUED) != 0 {
            return Cancelled::Done(None);
        }
        if let Some(stage) = stage.filter(|_| holds) {
            self.stage_cancel(stage, index);
            return Cancelled::Done(None);
        }
        match self.changes.push(index, slot.change_link) {
            Ok(0) => self.wakeup.notify_sleeping(),
            Ok(waiting) if is_backlog(waiting) => self.notify_backlog(),
            Ok(_) => {}
            // The reaper is winding up and will never take this change: the payload is the
            // canceller's to drop (a periodic series' payload owns the shards, so left in
            // its slot it would keep them, and itself, alive for ever).
            Err(Closed) => return Cancelled::Done(Some(self.take_refused(slot, generation))),
        }
        Cancelled::Done(None)
    }

    /// The payload of a slot cancelled after the reaper closed its list of changes, taken
    /// by whoever's push of the change was refused. The slot is marked `FIRING` (payload
    /// taken, slot not free) and stays so: the wind-up may still walk it in the inbox
    /// through its `link`, so it must not go back on the free stack, and the slots' drop
    /// must not drop its payload again.
    fn take_refused(&self, slot: Slot<'_, T>, generation: u32) -> T {
        // SAFETY: the slot is `generation|CANCELLED` and its change was refused, so no
        // reaper pass or wind-up will take the payload (the wind-up hands back only
        // pending slots, and frees only the changes it took when it closed the list); the
        // caller, whose push was refused, is the only one left to take it, once. The
        // canceller's Acquire CAS made the producer's payload visible (and a resetter's
        // Acquire RMW the canceller's state).
        let payload = unsafe { slot.take_payload() };
        // Relaxed: nothing reads the payload after this; the slots' drop, which looks at
        // the state, runs with `&mut` after the shard's last `Arc` went, which orders it.
        slot.state
            .store(slots::word(generation, FIRING), Ordering::Relaxed);
        payload
    }

    /// Whether the timer in slot `index` of generation `generation` is still pending:
    /// neither fired (nor firing), cancelled, nor handed back at shutdown.
    ///
    /// A sleep asks as its task is polled. A stale `true` only means the task waits for the
    /// wake-up, which the reaper sends after its CAS took the slot from `PENDING` (in
    /// `claim`).
    pub fn is_pending(&self, index: u32, generation: u32) -> bool {
        // Pinned if need be: once fired, the slot's chunk may be given back.
        let guard = Pin::for_slot(index);
        // Acquire: pairs with that CAS's Release (and the Release of the slot's freeing
        // after it), so a poll that finds the timer taken, woken or not (a sibling in a
        // `join!` polls it too), also sees the time the reaper took it at: a manual
        // timer's `advance` stores it before the pass, and the sleep reads it next.
        self.slots.get(index, &guard).is_some_and(|slot| {
            slot.state.load(Ordering::Acquire) & !FLAGS == slots::word(generation, PENDING)
        })
    }

    /// Moves the pending timer in slot `index` of generation `generation` to `deadline`
    /// (nanoseconds since the start); true if it was pending, false (and nothing changed)
    /// otherwise.
    pub fn reset(&self, index: u32, generation: u32, deadline: u64) -> bool {
        // Pinned if need be: as in `cancel`.
        let guard = Pin::for_slot(index);
        let Some(slot) = self.slots.get(index, &guard) else {
            return false;
        };
        let mut current = slot.state.load(Ordering::Relaxed);
        loop {
            if current & !FLAGS != slots::word(generation, PENDING) {
                return false;
            }
            if current & RESETTING != 0 {
                // Another reset of this timer is under way and ends after this instant:
                // this one counts as done just before it, and its deadline as overwritten.
                self.counts.resets.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            // Acquire on success: orders the deadline store below after the last
            // resetter's (whose flag-clearing RMW was a Release), so the newest wins.
            match slot.state.compare_exchange_weak(
                current,
                current | RESETTING,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        // Relaxed: published by the Release below.
        slot.deadline.store(deadline, Ordering::Relaxed);
        // AcqRel: Release publishes the deadline to the reaper, whose Acquire clears
        // QUEUED; Acquire orders a push below after the reaper's read of `change_link`.
        // The closure always returns `Some`, so the update cannot fail.
        let before = slot
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |word| {
                Some((word & !RESETTING) | QUEUED)
            })
            .unwrap_or_else(|word| word);
        if before & QUEUED == 0 && self.changes.push(index, slot.change_link).is_err() {
            // The reaper is winding up: it finds a pending slot in its wheel all the same.
            // The slot must not stay `QUEUED`, or a cancel would count on a change that
            // never comes; and a cancel that came during the reset left the push to us.
            // Only this generation's flag is cleared.
            let cleared = slot
                .state
                .fetch_update(Ordering::Acquire, Ordering::Relaxed, |word| {
                    let ours = slots::split(word).0 == generation && word & QUEUED != 0;
                    ours.then_some(word & !QUEUED)
                });
            if let Ok(word) = cleared
                && slots::split(word) == (generation, CANCELLED)
            {
                let payload = self.take_refused(slot, generation);
                drop(guard);
                self.discard(payload);
                return false;
            }
        }
        self.wakeup.notify_reset(deadline);
        // A cancel that came while the reset was under way won: the timer is gone.
        let reset = slots::split(before).1 == PENDING;
        // Relaxed: a count.
        self.counts
            .resets
            .fetch_add(u64::from(reset), Ordering::Relaxed);
        reset
    }
}
