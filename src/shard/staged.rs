//! The shard's side of staging (see `stage`): a producer stages its new timers, and its
//! cancels of timers handed over, and hands them over in batches; the reaper collects the
//! stages that hold a timer due, or cancels once a tidy interval. (The owner's cancels of
//! timers still in its stage are in `unstage`.)
//!
//! A batch is handed over as the stage's list of slot numbers, put in the shard's registry
//! under its lock (once per `STAGE_LEN` timers), rather than linked through the slots onto
//! the inbox: linking would make the owner touch every slot again, long after it wrote
//! it, and with a million timers pending those lines are out of its cache by then.
//!
//! A cancel the reaper takes from a stage or the registry may be of a timer still on the
//! inbox (scheduled straight there, then cancelled): the list of changes settles that by
//! being taken before the inbox (see the shard's module doc), and cancels taken from the
//! stages are applied after a look at the inbox that follows their taking (`Due::cancels`).

use super::{PREFETCH_AHEAD, Refused, Shard, TIDY_INTERVAL};
use std::time::Duration;

/// How often the reaper comes back to a stage holding a timer due whose owner it asked to
/// hand over, while the owner stays inside (see `next_staged`).
pub(super) const ASKED_RETRY: Duration = Duration::from_millis(1);
use crate::barrier;
use crate::clock;
use crate::due::Due;
use crate::slab::NIL;
use crate::slots::{self, Freed, PENDING, STAGED, Slot};
use crate::stage::{Held, Leave, STAGE_LEN, Stage, Staged, Take};
use crate::sync::{Ordering, thread};
#[cfg(loom)]
use loom::sync::MutexGuard;
use std::mem::ManuallyDrop;
#[cfg(not(loom))]
use std::sync::MutexGuard;
use std::sync::{Arc, PoisonError};

/// The stages registered with a shard, and the batches handed over, that its reaper has
/// not yet picked up.
#[derive(Debug, Default)]
pub(super) struct Registry {
    new: Vec<Arc<Stage>>,
    /// Batches of staged timers handed over by their owners.
    handed: Vec<Vec<Staged>>,
    /// Batches of cancels (slot numbers) handed over by their owners.
    cancels: Vec<Vec<u32>>,
    /// Every stage whose owner has not let go: their counts are the shard's.
    pub(super) all: Vec<Arc<Stage>>,
    /// The shard shut down: no stage is registered any more.
    closed: bool,
}

impl<T> Shard<T> {
    /// A new stage for the calling thread to stage its timers on; none once the shard has
    /// shut down. The reaper picks it up at its next pass.
    pub fn register_stage(&self) -> Option<Arc<Stage>> {
        let mut registry = self.registry();
        if registry.closed {
            return None;
        }
        let stage = Arc::new(Stage::new());
        registry.new.push(Arc::clone(&stage));
        registry.all.push(Arc::clone(&stage));
        drop(registry);
        self.announce();
        Some(stage)
    }

    /// Tells the reaper the registry has news. Relaxed: ordered before the reaper's look
    /// by the fence of the stager's or hand-over's handshake (see `stage`); the registry's
    /// lock orders the rest. A swap rather than a store: loom checks the fence handshake
    /// for a read-modify-write (as the inbox push), not for a plain store, and news is
    /// rare.
    fn announce(&self) {
        self.news.swap(true, Ordering::Relaxed);
    }

    /// Schedules `payload`, due at `deadline`, on `stage` (the calling thread's own): as
    /// `schedule`, but the timer waits in the stage unless it is due before the reaper's
    /// planned wake-up, or the stage is full. (Inlined into the caller's schedule, with the
    /// rare steps out of line.)
    #[inline]
    pub fn schedule_staged(
        &self,
        stage: &Stage,
        deadline: u64,
        payload: T,
    ) -> Result<(u32, u32), Refused<T>> {
        self.schedule_kept(stage, deadline, ManuallyDrop::new(payload))
    }

    /// `schedule_staged` with the payload in a `ManuallyDrop` until it is written to its
    /// slot or handed back: a payload to be dropped, were a step on the way to unwind,
    /// was copied to the stack and back three times on every schedule. Were one to unwind
    /// (none does, short of the engine's own bug), the payload would be leaked, not
    /// dropped twice.
    #[inline(always)]
    pub(crate) fn schedule_kept(
        &self,
        stage: &Stage,
        deadline: u64,
        payload: ManuallyDrop<T>,
    ) -> Result<(u32, u32), Refused<T>> {
        if !self.admit() {
            return Err(Refused::Full(ManuallyDrop::into_inner(payload)));
        }
        if self.wakeup.plans_past(deadline) || !stage.try_own() {
            return self.schedule_unstaged(stage, deadline, ManuallyDrop::into_inner(payload));
        }
        // SAFETY: taken just above.
        let taken = unsafe { stage.with(|held| self.take_slot(held)) };
        let Some((index, slot)) = taken else {
            return self.refuse_staged(stage, ManuallyDrop::into_inner(payload));
        };
        // Relaxed: the slot is ours (see `schedule_admitted`).
        let (generation, _) = slots::split(slot.state.load(Ordering::Relaxed));
        // SAFETY: the slot was just taken and is not yet published.
        unsafe { slot.write_payload(ManuallyDrop::into_inner(payload)) };
        // Relaxed: the deadline, place and state are published with the stage (its
        // Release), or with the inbox push that hands the stage over.
        slot.deadline.store(deadline, Ordering::Relaxed);
        // SAFETY: the stage is held.
        let len = unsafe {
            stage.with(|held| {
                slot.link.store(held.staged.len() as u32, Ordering::Relaxed);
                held.staged.push(Staged::new(index, &slot.link));
                held.staged.len()
            })
        };
        slot.state
            .store(slots::word(generation, PENDING) | STAGED, Ordering::Relaxed);
        // Whether this timer is the earliest staged since the stage was last emptied by a
        // hand-over or a collection, as the holder of the stage (this thread, now) last
        // recorded it. Read here, where it is used, rather than before the push: held
        // across it, it was kept as two flags on the stack.
        let earliest = stage.min().is_none_or(|min| deadline < min);
        if earliest {
            stage.set_min(deadline);
        }
        if len == STAGE_LEN {
            self.hand_over(stage);
        }
        self.leave(stage);
        // The handshake with the reaper's plan (see `stage`): a reaper that planned to
        // sleep past this timer meanwhile gets it now. Only for a new earliest deadline:
        // a timer due no earlier than one staged since the stage was last emptied is
        // covered by that one's handshake, even if the owner took that one back since
        // (the recorded earliest stays, `Stage::min`): the reaper wakes for it and
        // collects the whole stage then, or its owner handed the stage over and it was
        // empty. So a thread that schedules and cancels one timer at a time makes the
        // handshake's SeqCst fence once until the reaper collects its stage, not once a
        // timer.
        if earliest && self.wakeup.sleeps_past(deadline) {
            self.hand_over_to_sleeper(stage, deadline);
        }
        stage.count_scheduled();
        Ok((index, generation))
    }

    /// A free slot for the owner of the stage whose contents are `held`: one it kept, or
    /// the next of its batch (whose following slot it prefetches: by the next schedule
    /// its line is here, wherever the reaper left it), or one from the shard.
    #[inline]
    fn take_slot(&self, held: &mut Held) -> Option<(u32, Slot<'_, T>)> {
        if let Some((index, raw)) = held.free.pop() {
            // SAFETY: a free slot the stage kept is its owner's, which keeps its chunk, and
            // its addresses are of a slot of this shard's (the stage's).
            return Some((index, unsafe { Slot::from_raw(raw) }));
        }
        if held.chain == NIL && !self.take_batch(held) {
            // The shard has no free slot: a new one.
            let (index, slot) = self.slots.take()?;
            held.chunks.took(index);
            return Some((index, slot));
        }
        let index = held.chain;
        // SAFETY: a slot of the stage's batch is its owner's, which keeps its chunk.
        let slot = unsafe { self.slots.owned(index) }.expect("free slots are installed");
        // Relaxed: published with the batch (the take's Acquire).
        held.chain = slot.link.load(Ordering::Relaxed);
        self.slots.prefetch(held.chain);
        held.chunks.took(index);
        Some((index, slot))
    }

    /// The owner, holding `stage`, keeps its cancel of the timer in slot `index` (handed
    /// over, now `CANCELLED` and `QUEUED`) for the reaper, and hands the stage over once
    /// `STAGE_LEN` cancels wait.
    #[inline]
    pub(super) fn stage_cancel(&self, stage: &Stage, index: u32) {
        // SAFETY: the caller holds the stage.
        let waiting = unsafe {
            stage.with(|held| {
                held.cancels.push(index);
                held.cancels.len()
            })
        };
        if waiting == 1 {
            self.first_cancel_staged(stage);
        } else if waiting == STAGE_LEN {
            self.hand_over(stage);
        }
    }

    /// The first cancel waits in `stage`: as the first change on the list, it wakes a
    /// reaper asleep past its tidy interval, so that the cancelled timers' memory comes
    /// back soon (the hint, then the fence in `notify_sleeping`, against the reaper's plan,
    /// fence and look at the hints in `may_sleep`).
    #[cold]
    #[inline(never)]
    fn first_cancel_staged(&self, stage: &Stage) {
        stage.set_cancels(true);
        self.wakeup.notify_sleeping();
    }

    /// `take_slot` with the stage's batch used up: takes another; false if the shard has
    /// no free slot.
    #[cold]
    #[inline(never)]
    fn take_batch(&self, held: &mut Held) -> bool {
        held.chain = self.slots.take_chain().unwrap_or(NIL);
        held.chain != NIL
    }

    /// `schedule_staged` for a timer due before the reaper's planned wake-up, or while the
    /// reaper holds the stage: straight to the inbox.
    #[cold]
    #[inline(never)]
    fn schedule_unstaged(
        &self,
        stage: &Stage,
        deadline: u64,
        payload: T,
    ) -> Result<(u32, u32), Refused<T>> {
        let scheduled = self.schedule_admitted(deadline, payload)?;
        stage.count_scheduled();
        Ok(scheduled)
    }

    /// `schedule_staged` with no slot to be had: the owner gives the stage and the timer's
    /// place under the bound back.
    #[cold]
    #[inline(never)]
    fn refuse_staged(&self, stage: &Stage, payload: T) -> Result<(u32, u32), Refused<T>> {
        self.leave(stage);
        self.discharge();
        Err(Refused::Full(payload))
    }

    /// The owner staged a timer due at `deadline` that the reaper plans to sleep past:
    /// hands its stage over and wakes the reaper.
    #[cold]
    #[inline(never)]
    fn hand_over_to_sleeper(&self, stage: &Stage, deadline: u64) {
        if stage.try_own() {
            self.hand_over(stage);
            self.leave(stage);
        }
        // Otherwise the reaper took the stage after this timer was staged in it: it has
        // it, and may be about to sleep past it.
        self.wakeup.wake_for(deadline);
    }

    /// The owner gives its stage back, and hands its timers over if the reaper asked for
    /// them (see `Stage::leave`).
    #[inline]
    pub(super) fn leave(&self, stage: &Stage) {
        if stage.leave() == Leave::Asked {
            self.leave_asked(stage);
        }
    }

    /// `leave`, once the reaper asked for the timers: the owner enters again, hands them
    /// over and answers, unless the reaper took the stage meanwhile (it collects the
    /// timers itself then).
    #[cold]
    #[inline(never)]
    fn leave_asked(&self, stage: &Stage) {
        while stage.try_own() {
            self.hand_over(stage);
            stage.answer();
            if stage.leave() == Leave::Left {
                return;
            }
        }
    }

    /// The owner, holding its stage, hands the timers staged and the cancels over to the
    /// reaper as one batch each, and wakes it if it planned to sleep past the earliest
    /// timer.
    fn hand_over(&self, stage: &Stage) {
        // SAFETY: the caller holds the stage. The next batch starts with the room this one
        // needed.
        let (batch, cancels) = unsafe {
            stage.with(|held| {
                let room = held.staged.len();
                let batch = std::mem::replace(&mut held.staged, Vec::with_capacity(room));
                for staged in &batch {
                    held.chunks.gave(staged.index);
                }
                let room = held.cancels.len();
                let cancels = std::mem::replace(&mut held.cancels, Vec::with_capacity(room));
                (batch, cancels)
            })
        };
        let min = stage.min().unwrap_or(u64::MAX);
        stage.clear_min();
        if !cancels.is_empty() {
            stage.set_cancels(false);
        }
        if batch.is_empty() && cancels.is_empty() {
            return;
        }
        {
            // The stage is not closed (the owner holds it), so neither is the registry: the
            // shutdown closes the stages first and takes the batches then
            // (`close_stages`).
            let mut registry = self.registry();
            if !batch.is_empty() {
                registry.handed.push(batch);
            }
            if !cancels.is_empty() {
                registry.cancels.push(cancels);
            }
        }
        self.announce();
        // As a push (see `wakeup`): a reaper that planned to sleep past the earliest of
        // them is woken. It may have looked at the stage before they were staged. Cancels
        // alone wake it as a first change does (the same fence orders the news before
        // the look at its plan).
        if min != u64::MAX {
            self.wakeup.notify(min);
        } else {
            self.wakeup.notify_sleeping();
        }
        self.notify_backlog();
    }

    /// The reaper's collection at the end of a pass: picks up new stages, and collects
    /// those that hold a timer due at or before `by` (nanoseconds since the start; all of
    /// them if a change asked for it), cancels once a tidy interval, or whose owner let go.
    /// Returns how many timers it took in; the cancels wait in `due.cancels`.
    pub(super) fn collect_stages(
        &self,
        due: &mut Due,
        freed: &mut Freed,
        by: u64,
        between: &mut dyn FnMut(&mut Due, &mut Freed),
    ) -> u64 {
        // Relaxed: see `register_stage`.
        let mut arrived = 0;
        // Relaxed: see `announce`.
        if self.news.swap(false, Ordering::Relaxed) {
            let handed = {
                let mut registry = self.registry();
                due.stages.append(&mut registry.new);
                due.cancels.extend(registry.cancels.drain(..).flatten());
                std::mem::take(&mut registry.handed)
            };
            arrived += self.take_batches(due, freed, handed, between);
        }
        let all = std::mem::take(&mut due.collect_all);
        let shrinking = freed.is_shrinking();
        let tidy = by >= due.tidy_at;
        let stages = std::mem::take(&mut due.stages);
        // Each stage wanted (its owner let go, a change asked for them all, a shrink wants
        // its free slots, or it holds a timer due) is taken in the steps of
        // `Stage::try_take`, for all of them at once: one heavy fence a step, whatever the
        // number of stages.
        let gone: Vec<bool> = stages.iter().map(|stage| stage.is_gone()).collect();
        let mut closed = vec![false; stages.len()];
        // A stage wanted for its cancels alone keeps its timers: they may yet be cancelled
        // there, and none is due.
        let whole: Vec<bool> = stages
            .iter()
            .zip(&gone)
            .map(|(stage, &gone)| {
                all || gone || shrinking || stage.min().is_some_and(|min| min <= by)
            })
            .collect();
        let mut marked = Vec::new();
        for (at, stage) in stages.iter().enumerate() {
            let for_cancels = tidy && !whole[at] && stage.has_cancels();
            if for_cancels {
                due.tidy_at = by.saturating_add(clock::nanos(TIDY_INTERVAL));
            }
            if whole[at] || for_cancels {
                if stage.mark_held() {
                    marked.push(at);
                } else {
                    closed[at] = true;
                }
            }
        }
        let mut take_in = |due: &mut Due, at: usize| {
            let stage = &stages[at];
            if whole[at] {
                arrived += self.take_stage(due, stage, freed, gone[at] || shrinking);
            } else {
                // SAFETY: the stage was just taken.
                unsafe { stage.with(|held| due.cancels.append(&mut held.cancels)) };
                stage.set_cancels(false);
            }
            stage.release();
        };
        let mut asked = Vec::new();
        if !marked.is_empty() {
            let fenced = barrier::heavy();
            for at in marked {
                match stages[at].settle(whole[at], fenced) {
                    Take::Taken => take_in(due, at),
                    // Wanted for its cancels alone: they wait for the next tidy interval.
                    _ if !whole[at] => {}
                    _ => asked.push(at),
                }
            }
        }
        // Unfenced (see `barrier`), an owner that looks out proves nothing: the reaper
        // comes back to its stage at the next pass.
        if !asked.is_empty() && barrier::heavy() {
            // The owner hands its timers over as it leaves (gone, it is not inside), unless
            // it left before the request: then the reaper takes them after all.
            for at in asked {
                if stages[at].left_unasked() {
                    match stages[at].try_take() {
                        Take::Taken => take_in(due, at),
                        Take::Asked => {}
                        Take::Closed => closed[at] = true,
                    }
                }
            }
        }
        for (at, stage) in stages.into_iter().enumerate() {
            if gone[at] {
                self.retire(&stage);
            } else if !closed[at] {
                due.stages.push(stage);
            }
        }
        arrived
    }

    /// Takes in batches of staged timers their owners handed over, with `between` after
    /// each (what is due fires between batches, not after a backlog of them); returns how
    /// many.
    fn take_batches(
        &self,
        due: &mut Due,
        freed: &mut Freed,
        handed: Vec<Vec<Staged>>,
        between: &mut dyn FnMut(&mut Due, &mut Freed),
    ) -> u64 {
        let mut arrived = 0;
        for batch in handed {
            arrived += batch.len() as u64;
            // Newest first, as the inbox hands timers over: timers overdue by the same
            // pass then fire oldest first.
            // The slots come in out of the owner's cache: fetched a few ahead, their
            // misses overlap.
            for at in (0..batch.len()).rev() {
                if let Some(ahead) = at.checked_sub(PREFETCH_AHEAD) {
                    self.slots.prefetch(batch[ahead].index);
                }
                let index = batch[at].index;
                self.arrive_slot(due, index, self.slot(index), freed);
            }
            between(due, freed);
        }
        arrived
    }

    /// Forgets a stage whose owner let go, keeping its counts.
    fn retire(&self, stage: &Arc<Stage>) {
        let mut registry = self.registry();
        let (scheduled, cancelled) = stage.counts();
        // Relaxed: counts; folded in and the stage forgotten under the registry's lock,
        // under which `scheduled_and_cancelled` reads both.
        self.counts
            .scheduled
            .fetch_add(scheduled, Ordering::Relaxed);
        self.counts
            .cancelled
            .fetch_add(cancelled, Ordering::Relaxed);
        registry.all.retain(|kept| !Arc::ptr_eq(kept, stage));
    }

    /// The registry of stages, locked.
    pub(super) fn registry(&self) -> MutexGuard<'_, Registry> {
        // Nothing panics while it is held: a poisoned one is whole.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes in the timers of a stage the reaper holds, and its free slots if `free` (its
    /// owner let go, or a shrink needs them). Returns how many timers it took in.
    fn take_stage(&self, due: &mut Due, stage: &Stage, freed: &mut Freed, free: bool) -> u64 {
        // SAFETY: the caller holds the stage.
        let arrived = unsafe {
            stage.with(|held| {
                if free {
                    let chain = std::mem::replace(&mut held.chain, NIL);
                    self.slots.give_chain(chain, freed);
                    for (index, _) in held.free.drain(..) {
                        held.chunks.gave(index);
                        self.slots.keep(index, self.slot(index), freed);
                    }
                }
                let arrived = held.staged.len() as u64;
                // Newest first, as the inbox hands them over: timers overdue by the same
                // pass then fire oldest first.
                for Staged { index, .. } in held.staged.drain(..).rev() {
                    held.chunks.gave(index);
                    self.arrive_slot(due, index, self.slot(index), freed);
                }
                due.cancels.append(&mut held.cancels);
                arrived
            })
        };
        stage.clear_min();
        stage.set_cancels(false);
        arrived
    }

    /// At shutdown, before the inboxes close: collects every stage, waiting for owners
    /// inside to leave, and closes it, so that from now on producers go to the inbox.
    /// Returns how many timers it took in.
    pub(super) fn close_stages(&self, due: &mut Due, freed: &mut Freed) -> u64 {
        {
            let mut registry = self.registry();
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
        // What owners handed over, before the stages closed or while they waited.
        let handed = {
            let mut registry = self.registry();
            due.cancels.extend(registry.cancels.drain(..).flatten());
            std::mem::take(&mut registry.handed)
        };
        arrived + self.take_batches(due, freed, handed, &mut |_, _| {})
    }

    /// The earliest deadline staged in any stage, as last recorded (nanoseconds since the
    /// start): the reaper wakes for it. A stage whose owner it asked to hand over (the
    /// owner was inside) stays in the plan, not earlier than `ASKED_RETRY` after `now`:
    /// the owner's push wakes the reaper as soon as it leaves, and an owner kept off its
    /// CPU (preempted, or its virtual CPU descheduled) is asked again every `ASKED_RETRY`
    /// meanwhile, rather than its timers waiting for it unseen, or the reaper spinning.
    pub(super) fn next_staged(&self, due: &Due, now: u64) -> Option<u64> {
        let retry = now.saturating_add(clock::nanos(ASKED_RETRY));
        due.stages
            .iter()
            .filter_map(|stage| {
                let min = stage.min()?;
                Some(if stage.is_asked() {
                    min.max(retry)
                } else {
                    min
                })
            })
            .min()
    }

    /// Whether a stage holds a timer due before `wake_at`, or the registry has news: the
    /// reaper's last look before it parks (see `stage`). A stage whose owner the reaper
    /// asked to hand over does not count: `next_staged` planned for it, and the owner's
    /// push wakes the reaper.
    pub(super) fn stages_due_before(&self, due: &Due, wake_at: u64) -> bool {
        // Relaxed: ordered by the park handshake's fence, as the hints are.
        self.news.load(Ordering::Relaxed)
            || due
                .stages
                .iter()
                .any(|stage| stage.min().is_some_and(|min| min < wake_at) && !stage.is_asked())
    }

    /// Whether cancels wait in a stage, as last recorded: the reaper tidies (see `run`).
    pub(super) fn stages_hold_cancels(&self, due: &Due) -> bool {
        due.stages.iter().any(|stage| stage.has_cancels())
    }
}
