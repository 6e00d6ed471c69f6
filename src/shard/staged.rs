//! The shard's side of staging (see `stage`): a producer stages its new timers and hands
//! them over in batches, reclaims the slots of those it cancels while they are staged, and
//! the reaper collects the stages that hold a timer due before its next wake-up.

use super::{BACKLOG, Refused, Shard};
use crate::due::Due;
use crate::slab::NIL;
use crate::slots::{self, CANCELLED, Freed, PENDING, QUEUED, RESETTING, STAGED, Slot, Slots};
use crate::stage::{FREE_LEN, Held, STAGE_LEN, Stage, Take};
use crate::sync::{Ordering, thread};
use std::sync::{Arc, PoisonError};

/// The stages registered with a shard and not yet picked up by its reaper.
#[derive(Debug, Default)]
pub(super) struct Registry {
    new: Vec<Arc<Stage>>,
    /// The shard shut down: no stage is registered any more.
    closed: bool,
}

impl<T> Shard<T> {
    /// A new stage for the calling thread to stage its timers on; none once the shard has
    /// shut down. The reaper picks it up at its next pass.
    pub fn register_stage(&self) -> Option<Arc<Stage>> {
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        if registry.closed {
            return None;
        }
        let stage = Arc::new(Stage::new());
        registry.new.push(Arc::clone(&stage));
        drop(registry);
        // Relaxed: ordered before the reaper's look by the stager's fence (see `stage`);
        // the registry's lock orders the rest.
        self.registered.store(true, Ordering::Relaxed);
        Some(stage)
    }

    /// Schedules `payload`, due at `deadline`, on `stage` (the calling thread's own): as
    /// `schedule`, but the timer waits in the stage unless it is due before the reaper's
    /// planned wake-up, or the stage is full.
    pub fn schedule_staged(
        &self,
        stage: &Stage,
        deadline: u64,
        payload: T,
    ) -> Result<(u32, u32), Refused<T>> {
        let payload = self.admit(payload)?;
        if self.wakeup.plans_past(deadline) || !stage.try_own() {
            return self.schedule_admitted(deadline, payload);
        }
        // SAFETY: taken just above.
        let free = unsafe { stage.with(|held| held.free.pop()) };
        let taken = match free {
            // SAFETY: a free slot the stage kept is its owner's, which keeps its chunk.
            Some(index) => unsafe { self.slots.owned(index) }.map(|slot| (index, slot)),
            None => self.slots.take(),
        };
        let Some((index, slot)) = taken else {
            self.leave(stage);
            self.count_out();
            return Err(Refused::Full(payload));
        };
        // Relaxed: the slot is ours (see `schedule_admitted`).
        let (generation, _) = slots::split(slot.state.load(Ordering::Relaxed));
        // SAFETY: the slot was just taken and is not yet published.
        unsafe { slot.write_payload(payload) };
        // Relaxed: the deadline, place and state are published with the stage (its
        // Release), or with the inbox push that hands the stage over.
        slot.deadline.store(deadline, Ordering::Relaxed);
        // SAFETY: the stage is held.
        let (len, min) = unsafe {
            stage.with(|held| {
                slot.link.store(held.staged.len() as u32, Ordering::Relaxed);
                held.staged.push(index);
                (
                    held.staged.len(),
                    stage.min().map_or(deadline, |min| min.min(deadline)),
                )
            })
        };
        slot.state
            .store(slots::word(generation, PENDING) | STAGED, Ordering::Relaxed);
        stage.set_hints(len, min);
        if len == STAGE_LEN {
            self.hand_over(stage);
        }
        self.leave(stage);
        // The handshake with the reaper's plan (see `stage`): a reaper that planned to
        // sleep past this timer meanwhile gets it now.
        if self.wakeup.sleeps_past(deadline) {
            if stage.try_own() {
                self.hand_over(stage);
                self.leave(stage);
            }
            // Otherwise the reaper took the stage after this timer was staged in it: it
            // has it, and may be about to sleep past it.
            self.wakeup.wake();
        }
        // Relaxed: a count.
        self.counts.scheduled.fetch_add(1, Ordering::Relaxed);
        Ok((index, generation))
    }

    /// The owner gives its stage back, handing its timers over first if the reaper asked.
    fn leave(&self, stage: &Stage) {
        if !stage.leave() {
            self.hand_over(stage);
            stage.release();
        }
    }

    /// The owner, holding its stage, hands the timers staged to the inbox in one push,
    /// and reclaims the slots of those cancelled meanwhile.
    fn hand_over(&self, stage: &Stage) {
        let mut spill = Freed::new();
        let mut dropped = Vec::new();
        // SAFETY: the caller holds the stage.
        let (first, last, count) = unsafe {
            stage.with(|Held { staged, free }| {
                let (mut first, mut last, mut count) = (NIL, NIL, 0);
                for index in staged.drain(..) {
                    let slot = self.staged_slot(index);
                    if let Some(payload) = self.reclaim_slot(free, index, slot, &mut spill) {
                        dropped.push(payload);
                        continue;
                    }
                    // Relaxed: published by the push below.
                    slot.link.store(first, Ordering::Relaxed);
                    if first == NIL {
                        last = index;
                    }
                    first = index;
                    count += 1;
                }
                (first, last, count)
            })
        };
        let min = stage.min().unwrap_or(u64::MAX);
        stage.set_hints(0, u64::MAX);
        self.slots.recycle(&mut spill);
        if first != NIL {
            // The stage is not closed (the owner holds it), so neither is the inbox: the
            // shutdown closes the stages first (see `close_stages`).
            let waiting = self
                .inbox
                .push_chain(first, &self.staged_slot(last).link, count)
                .expect("the inbox closes after the stages");
            // As a push (see `wakeup`): a reaper that planned to sleep past the earliest
            // of them is woken. It may have looked at the stage before they were staged.
            self.wakeup.notify(min);
            if waiting < BACKLOG && waiting + count >= BACKLOG {
                self.wakeup.notify_backlog();
            }
        }
        for payload in dropped {
            self.contain(|| drop(payload));
        }
    }

    /// Takes the payload of a staged slot that was cancelled and frees the slot into the
    /// stage's `free` slots (or `spill`, if they are full), if no change and no reset
    /// holds it; `None` (and nothing done) otherwise.
    fn reclaim_slot(
        &self,
        free: &mut Vec<u32>,
        index: u32,
        slot: &Slot<T>,
        spill: &mut Freed,
    ) -> Option<T> {
        // Acquire: pairs with the reaper's Release as it clears `QUEUED`, after its last
        // read of the slot's `change_link`, which a later timer in the slot may write.
        let word = slot.state.load(Ordering::Acquire);
        let (generation, state) = slots::split(word);
        if state != CANCELLED || word & (QUEUED | RESETTING) != 0 {
            return None;
        }
        debug_assert_ne!(word & STAGED, 0, "only the stage's holder unstages");
        // SAFETY: the slot is staged here, so no reaper has seen it, and it is cancelled
        // with no change or reset on it: nobody else takes its payload or touches it.
        let payload = unsafe { slot.take_payload() };
        if free.len() < FREE_LEN {
            if Slots::renew(slot, generation) {
                free.push(index);
            }
        } else {
            self.slots.release(index, slot, generation, spill);
        }
        Some(payload)
    }

    /// The owner cancelled the timer of generation `generation` in slot `index` while it
    /// was staged: if it is still in `stage`, takes it out, and its slot for the owner's
    /// next timer; returns the payload to drop.
    pub(super) fn reclaim(&self, stage: &Stage, index: u32, slot: &Slot<T>) -> Option<T> {
        if !stage.try_own() {
            return None;
        }
        let mut spill = Freed::new();
        // SAFETY: taken just above.
        let (payload, len) = unsafe {
            stage.with(|held| {
                // Relaxed: the slot's place was written by this thread when it staged it.
                // If the slot is no longer in this stage, the check below fails: a slot is
                // in one stage at most, only the owner puts it there, and it is not
                // staging now.
                let place = slot.link.load(Ordering::Relaxed) as usize;
                if held.staged.get(place) != Some(&index) {
                    return (None, held.staged.len());
                }
                let payload = self.reclaim_slot(&mut held.free, index, slot, &mut spill);
                if payload.is_some() {
                    held.staged.swap_remove(place);
                    if let Some(&moved) = held.staged.get(place) {
                        // Relaxed: as above.
                        self.staged_slot(moved)
                            .link
                            .store(place as u32, Ordering::Relaxed);
                    }
                }
                (payload, held.staged.len())
            })
        };
        // The earliest deadline stays as it was: a hint that may be early, never late.
        stage.set_hints(len, stage.min().unwrap_or(u64::MAX));
        self.slots.recycle(&mut spill);
        self.leave(stage);
        payload
    }

    /// A slot in a stage held by the caller.
    fn staged_slot(&self, index: u32) -> &Slot<T> {
        // SAFETY: a staged slot is pending or cancelled, never free, so its chunk stays.
        unsafe { self.slots.owned(index) }.expect("staged slots are installed")
    }

    /// The reaper's collection at the end of a pass: picks up new stages, and collects
    /// those that hold a timer due at or before `by` (nanoseconds since the start; all of
    /// them if a change asked for it), or whose owner let go. Returns how many timers it
    /// took in.
    pub(super) fn collect_stages(&self, due: &mut Due, freed: &mut Freed, by: u64) -> u64 {
        // Relaxed: see `register_stage`.
        if self.registered.swap(false, Ordering::Relaxed) {
            let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
            due.stages.append(&mut registry.new);
        }
        let all = std::mem::take(&mut due.collect_all);
        let shrinking = freed.is_shrinking();
        let mut arrived = 0;
        let mut stages = std::mem::take(&mut due.stages);
        stages.retain(|stage| {
            let gone = stage.is_gone();
            if all || gone || shrinking || stage.min().is_some_and(|min| min <= by) {
                match stage.try_take() {
                    Take::Taken => {
                        arrived += self.take_stage(due, stage, freed, gone || shrinking);
                        stage.release();
                    }
                    // The owner hands it over as it leaves; gone, it is not inside.
                    Take::Asked => {}
                    Take::Closed => return false,
                }
            }
            !gone
        });
        due.stages = stages;
        arrived
    }

    /// Takes in the timers of a stage the reaper holds, and its free slots if `free` (its
    /// owner let go, or a shrink needs them). Returns how many timers it took in.
    fn take_stage(&self, due: &mut Due, stage: &Stage, freed: &mut Freed, free: bool) -> u64 {
        // SAFETY: the caller holds the stage.
        let arrived = unsafe {
            stage.with(|held| {
                if free {
                    for index in held.free.drain(..) {
                        self.slots.keep(index, self.slot(index), freed);
                    }
                }
                let arrived = held.staged.len() as u64;
                // Newest first, as the inbox hands them over: timers overdue by the same
                // pass then fire oldest first.
                for index in held.staged.drain(..).rev() {
                    self.arrive_slot(due, index, self.slot(index), freed);
                }
                arrived
            })
        };
        stage.set_hints(0, u64::MAX);
        arrived
    }

    /// At shutdown, before the inboxes close: collects every stage, waiting for owners
    /// inside to leave, and closes it, so that from now on producers go to the inbox.
    /// Returns how many timers it took in.
    pub(super) fn close_stages(&self, due: &mut Due, freed: &mut Freed) -> u64 {
        {
            let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
            registry.closed = true;
            due.stages.append(&mut registry.new);
        }
        let mut arrived = 0;
        for stage in std::mem::take(&mut due.stages) {
            loop {
                match stage.try_take() {
                    Take::Taken => {
                        arrived += self.take_stage(due, &stage, freed, false);
                        stage.close();
                        break;
                    }
                    // The owner is between two instructions and hands its timers to the
                    // inbox as it leaves; it never waits on us.
                    Take::Asked => thread::yield_now(),
                    Take::Closed => break,
                }
            }
        }
        arrived
    }

    /// The earliest deadline staged in any stage, as last recorded (nanoseconds since the
    /// start): the reaper wakes for it.
    pub(super) fn next_staged(&self, due: &Due) -> Option<u64> {
        due.stages.iter().filter_map(|stage| stage.min()).min()
    }

    /// Whether a stage holds a timer due before `wake_at`, or one was registered since the
    /// last pass: the reaper's last look before it parks (see `stage`).
    pub(super) fn stages_due_before(&self, due: &Due, wake_at: u64) -> bool {
        // Relaxed: ordered by the park handshake's fence, as the hints are.
        self.registered.load(Ordering::Relaxed)
            || due
                .stages
                .iter()
                .any(|stage| stage.min().is_some_and(|min| min < wake_at))
    }
}
