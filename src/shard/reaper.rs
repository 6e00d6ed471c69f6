//! The reaper's side of a shard: each pass takes the changes, then the arrivals (see the
//! shard's module doc for why in that order), links new timers into the wheel, moves reset
//! ones, unlinks and frees cancelled ones (those on the list of changes, then those it
//! collected from the stages, after another look at the inbox: see `staged`), fires what
//! is due (claiming each slot from `PENDING`, so a timer fires once or is cancelled, never
//! both), and the loop parks until the next deadline.

use super::early::EarlyWake;
use super::lead::Lead;
use super::nap::Naps;
use super::{BATCH, IDLE_HORIZON, PREFETCH_AHEAD, SHRINK_INTERVAL, Shard, TIDY_INTERVAL};
use crate::clock::{self, Clock};
use crate::due::{Due, Near};
use crate::slab::NIL;
use crate::slots::{self, CANCELLED, FIRING, Freed, PENDING, QUEUED, RESETTING, STAGED, Slot};
use crate::sync::{self, Ordering};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

/// The two lists of slots a reaper takes whole: timers newly arrived (the inbox, linked
/// by `link`) and cancels and resets (the changes list, linked by `change_link`).
#[derive(Clone, Copy)]
pub(super) enum List {
    Arrivals,
    Changes,
}

impl<T> Shard<T> {
    /// The reaper: runs until `stop`, calling `handler` for every timer that comes due, and
    /// returns the payloads of the timers still pending then. `siblings`, the timer's
    /// shards (this one among them), are those it rescues when their reapers are held up
    /// (see `rescue`).
    pub(crate) fn run(
        &self,
        siblings: &[Shard<T>],
        clock: &Clock,
        handler: &(dyn Fn(T) + Sync),
    ) -> Vec<T>
    where
        T: Send,
    {
        self.register_reaper();
        *self.wheel() = Some(Due::new());
        let mut early = EarlyWake::new(self.wake_early);
        let mut naps = Naps::default();
        let mut lead = Lead::default();
        loop {
            // Its own wheel, held until it parks: a sibling may rescue it only meanwhile.
            let mut held = self.wheel();
            let due = held
                .as_mut()
                .expect("only the wind-up takes the reaper's wheel");
            // Looked at before the pass, so that the last pass starts after the stop and
            // fires what was due by then (a drain counts on it). Relaxed: the flag carries
            // no data; `may_sleep` orders the last look.
            let stopping = self.stopping.load(Ordering::Relaxed);
            let now = clock.now();
            // Read before the pass forgets it (`Wakeup::awake`).
            lead.woke(self.wakeup.woken_for(), clock.elapsed());
            // While cancels keep coming, the reaper wakes every `TIDY_INTERVAL` to free
            // them in batches, and cancellers leave it be; once a pass finds none, it
            // sleeps until its next deadline, and the next cancel wakes it.
            let tidying = self.pass(due, now, &|| clock.elapsed(), handler);
            if stopping {
                break;
            }
            if due.wheel.next_deadline().is_some_and(|tick| tick <= now) {
                continue;
            }
            let rescue_at = self.rescue(siblings, clock, handler);
            let elapsed = clock.elapsed();
            let wake_at = [
                self.wake_target(due),
                self.next_staged(due, elapsed),
                rescue_at,
            ]
            .into_iter()
            .flatten()
            .min();
            if wake_at.is_some_and(|at| at <= elapsed) {
                continue;
            }
            // In a dense stream of deadlines, a nap rather than a sleep until the next
            // (`nap`), and no spin; unless a spin was asked for, which is a choice of
            // CPU for exact deadlines.
            let fired = std::mem::take(&mut due.fired);
            let nap = naps
                .put_off(wake_at, elapsed, fired)
                .filter(|_| self.spin_nanos == 0);
            // The spin asked for, and, soon after a sleep that ended at its early target,
            // the OS's usual lateness (`early`).
            let early_lead = early.spin_lead(elapsed);
            let spin = self.spin_nanos + early_lead;
            if let Some(at) = wake_at.filter(|at| nap.is_none() && at - elapsed <= spin) {
                let stopped = self.spin_until(due, at, clock);
                if early_lead > 0 {
                    early.spent(stopped.saturating_sub(elapsed));
                }
                continue;
            }
            // The reaper wakes for its next work, and at the latest after a while (the
            // tidy interval, or `IDLE_HORIZON`, or less where producers woke it early for
            // timers still far off: `lead`): it plans that, so producers need not wake it
            // for timers due later (they would, for each first timer of an idle one).
            let interval = match (tidying, due.shrinking) {
                (false, _) => IDLE_HORIZON,
                (true, false) => TIDY_INTERVAL,
                (true, true) => SHRINK_INTERVAL,
            };
            let horizon = lead.limit(elapsed.saturating_add(clock::nanos(interval)), elapsed);
            let work = nap.or(wake_at).map_or(horizon, |at| at.min(horizon));
            self.wakeup.plan_work(work);
            // It may wake sooner to watch its siblings (`rescue`): no deadline to be early
            // for, nor work its siblings should watch it for.
            let plan = self
                .watch(siblings, elapsed)
                .map_or(work, |watch| watch.min(work));
            if self.may_sleep(due, plan, tidying) {
                // Asleep, the wheel is its siblings' to rescue.
                drop(held);
                // Before a deadline, wake early by the spin asked for and by the OS's
                // usual lateness, and spin the rest (above); a sleep until the horizon
                // or a nap's end has nothing to be early for.
                let asked_at = clock.elapsed();
                lead.parks(plan);
                if wake_at == Some(plan) {
                    let target = early.target(plan.saturating_sub(self.spin_nanos), asked_at);
                    sync::park_timeout(Duration::from_nanos(target.saturating_sub(asked_at)));
                    early.observe(asked_at, target, clock.elapsed());
                } else {
                    sync::park_timeout(Duration::from_nanos(plan.saturating_sub(asked_at)));
                }
            }
        }
        let mut due = self.wheel().take().expect("the reaper's own wheel");
        self.wind_up_firing(&mut due, clock.now(), &|| clock.elapsed(), handler)
    }

    /// When the reaper next has work in its wheel: the start of the next due tick, or the
    /// earliest exact deadline held (nanoseconds since the start).
    pub(super) fn wake_target(&self, due: &Due) -> Option<u64> {
        let next_tick = due
            .wheel
            .next_deadline()
            .map(|tick| tick.saturating_mul(self.tick_nanos));
        match (next_tick, due.next_near()) {
            (Some(tick), Some(near)) => Some(tick.min(near)),
            (tick, near) => tick.or(near),
        }
    }

    /// Spins until `at` (nanoseconds since the start), or until work arrives or the shard
    /// stops; returns when it stopped.
    pub(super) fn spin_until(&self, due: &Due, at: u64, clock: &Clock) -> u64 {
        let mut now = clock.elapsed();
        while now < at
            && self.inbox.is_empty()
            && self.changes.is_empty()
            && !self.stages_due_before(due, at)
            // Relaxed: a reason to stop spinning early; `run` looks again properly.
            && !self.stopping.load(Ordering::Relaxed)
        {
            std::hint::spin_loop();
            now = clock.elapsed();
        }
        now
    }

    /// Makes the calling thread the one producers unpark. The reaper calls it once, first.
    pub fn register_reaper(&self) {
        self.wakeup.register_reaper();
    }

    /// One pass of the reaper: takes what the inboxes hold, links and unlinks it, and fires
    /// every timer due at tick `now`; `elapsed` reads the time (nanoseconds since the
    /// start) for the lateness of each. Returns whether there were changes (cancels,
    /// resets).
    pub fn pass(
        &self,
        due: &mut Due,
        now: u64,
        elapsed: &dyn Fn() -> u64,
        handler: &(dyn Fn(T) + Sync),
    ) -> bool {
        self.wakeup.awake();
        self.take_in_and_fire(due, now, elapsed, handler)
    }

    /// A pass's work (see `pass`), without telling producers the reaper is awake: a rescue
    /// (see `rescue`) runs it for a reaper that is not.
    pub(super) fn take_in_and_fire(
        &self,
        due: &mut Due,
        now: u64,
        elapsed: &dyn Fn() -> u64,
        handler: &(dyn Fn(T) + Sync),
    ) -> bool {
        let mut freed = std::mem::take(&mut due.freed);
        // What is due already fires first, and again after every batch of messages: a
        // long backlog (the reaper fell behind) must not hold up timers already in the
        // wheel, and the time moves on meanwhile.
        self.fire_due(due, now, elapsed, handler, &mut freed);
        let mut now = now;
        let mut catch_up = |due: &mut Due, freed: &mut Freed| {
            now = now.max(clock::tick_at(elapsed(), self.tick_nanos));
            self.fire_due(due, now, elapsed, handler, freed);
        };
        // Changes first, then arrivals: see the module doc. A reset's flag comes down
        // before its change is taken (see `wakeup`).
        self.wakeup.take_urgent();
        let changes = self.changes.take_all();
        let arrivals = self.inbox.take_all();
        let arrived = self.walk(List::Arrivals, due, arrivals, &mut freed, &mut catch_up);
        let mut changed = self.walk(List::Changes, due, changes, &mut freed, &mut catch_up);
        // The stages last: a change may have asked for them all. Those holding a timer
        // already due come in now; the reaper wakes for the others (see `stage`).
        let mut arrived = arrived + self.collect_stages(due, &mut freed, elapsed(), &mut catch_up);
        let staged_cancels = !due.cancels.is_empty();
        if staged_cancels {
            // A cancel taken from a stage may be of a timer pushed on the inbox since the
            // look above (see `staged`): another look first.
            let arrivals = self.inbox.take_all();
            arrived += self.walk(List::Arrivals, due, arrivals, &mut freed, &mut catch_up);
            changed += self.apply_cancels(due, &mut freed, &mut catch_up);
        }
        catch_up(due, &mut freed);
        self.slots.recycle(&mut freed);
        due.shrinking = self.shrink(&mut freed);
        due.freed = freed;
        let mut stats = self.reaper_stats();
        stats.pass(arrived, changed);
        stats.cascaded = due.wheel.cascaded();
        changes != NIL || staged_cancels || due.shrinking || self.stages_hold_cancels(due)
    }

    /// Fires every timer due at tick `now`: with exact deadlines, those whose deadline has
    /// passed by `elapsed()`, holding the others of the tick until theirs (see `due`).
    pub(super) fn fire_due(
        &self,
        due: &mut Due,
        now: u64,
        elapsed: &dyn Fn() -> u64,
        handler: &(dyn Fn(T) + Sync),
        freed: &mut Freed,
    ) {
        // With exact deadlines, the time is read once something comes due, not per call:
        // passes that find nothing due read no clock.
        let mut time = None;
        while let Some(index) = self.poll_wheel(due, now) {
            let slot = self.slot(index);
            // Relaxed: only the reaper changes the generation, so this read is its own;
            // the deadline is that of the last arrival or change the reaper took in, and
            // it is current if the claim succeeds (a reset in between makes it fail).
            let (generation, _) = slots::split(slot.state.load(Ordering::Relaxed));
            let deadline = slot.deadline.load(Ordering::Relaxed);
            let near = Near {
                deadline,
                index,
                generation,
            };
            if self.exact && deadline > *time.get_or_insert_with(elapsed) {
                due.hold(near);
            } else {
                self.fire(due, near, now, elapsed, handler, freed);
            }
        }
        if due.next_near().is_some() {
            let time = elapsed();
            while let Some(near) = due.pop_near(time) {
                // SAFETY: the reaper may look at any slot (see `Slots::owned`).
                let Some(slot) = (unsafe { self.slots.owned(near.index) }) else {
                    continue; // freed, and its chunk given back since
                };
                // Moved on since it was held: fired or cancelled (the claim below fails),
                // or reset (back in the wheel, or held again under its new deadline).
                // Relaxed: the reaper's own bookkeeping, or a deadline a reset is writing,
                // which the claim then refuses.
                if slot.wheel_prev() == NIL
                    && slot.deadline.load(Ordering::Relaxed) == near.deadline
                {
                    self.fire(due, near, now, elapsed, handler, freed);
                }
            }
        }
    }

    /// Fires the timer `near` names, if it still stands as it did (see `claim`).
    pub(super) fn fire(
        &self,
        due: &mut Due,
        near: Near,
        now: u64,
        elapsed: &dyn Fn() -> u64,
        handler: &(dyn Fn(T) + Sync),
        freed: &mut Freed,
    ) {
        let slot = self.slot(near.index);
        let expected = slots::word(near.generation, PENDING);
        match self.claim(near.index, slot, expected, freed) {
            Ok(payload) => {
                let late = self
                    .record_lateness
                    .then(|| elapsed().saturating_sub(near.deadline));
                self.reaper_stats().fired(late);
                due.fired += 1;
                self.contain(|| handler(payload));
            }
            // A reset is on its way: keep the timer in the wheel until it lands, so that
            // a pending timer is always in the wheel or held (shutdown finds it there).
            Err(seen) if slots::split(seen) == (near.generation, PENDING) => {
                self.place(due, near.index, slot, now.saturating_add(1));
            }
            // Cancelled: its change frees it. Or a slot that has moved on.
            Err(_) => {}
        }
    }

    /// The reaper's side of the park handshake: plans to sleep until `wake_at` (nanoseconds
    /// since the start; or, if `tidying`, no longer than `TIDY_INTERVAL`), and says whether
    /// it may: nothing arrived meanwhile, and no change waits (on the list, or cancels in a
    /// stage), unless it is tidying and none of those waiting is a reset's (cancels wait
    /// for the tidy interval or a backlog).
    pub fn may_sleep(&self, due: &Due, wake_at: u64, tidying: bool) -> bool {
        self.wakeup.plan_sleep(wake_at, tidying);
        self.inbox.is_empty()
            && ((self.changes.is_empty() && !self.stages_hold_cancels(due))
                || self.wakeup.may_leave_changes(tidying))
            && !self.stages_due_before(due, wake_at)
            && !self.stopping.load(Ordering::Relaxed)
    }

    /// Walks `list` from its first slot `at`: links each newly arrived timer into the wheel
    /// (except those cancelled on the way, see `arrive_slot`), or applies each cancel and
    /// reset (`apply_change`), with `between` after every `BATCH` of them; returns how many
    /// it took.
    pub(super) fn walk(
        &self,
        list: List,
        due: &mut Due,
        mut at: u32,
        freed: &mut Freed,
        between: &mut dyn FnMut(&mut Due, &mut Freed),
    ) -> u64 {
        let mut taken = 0;
        while at != NIL {
            taken += 1;
            if taken % BATCH == 0 {
                between(due, freed);
            }
            let slot = self.slot(at);
            // Relaxed: a link was written before its slot's push, which `take_all`'s
            // Acquire made visible.
            match list {
                List::Arrivals => {
                    let next = slot.link.load(Ordering::Relaxed);
                    self.arrive_slot(due, at, slot, freed);
                    at = next;
                }
                List::Changes => {
                    let next = slot.change_link.load(Ordering::Relaxed);
                    self.apply_change(due, at, slot, freed);
                    at = next;
                }
            }
        }
        taken
    }

    /// Takes in a timer that arrived, from the inbox or a stage: links it into the wheel,
    /// unless it was cancelled on the way; a staged one, the reaper unstages, and frees if
    /// it was cancelled (no change will come for it).
    pub(super) fn arrive_slot(
        &self,
        due: &mut Due,
        index: u32,
        slot: Slot<'_, T>,
        freed: &mut Freed,
    ) {
        // Acquire: pairs with the canceller's Release (the inbox swap, or the stage's
        // Acquire, already made the producer's writes visible).
        let mut word = slot.state.load(Ordering::Acquire);
        if word & STAGED != 0 {
            // Only the stage's holder clears the flag, so it is still set. AcqRel: Acquire
            // as above, and a resetter's deadline; Release orders the stager's writes of
            // the slot's links before those of a canceller or resetter that now sees the
            // flag clear and pushes a change.
            word = slot.state.fetch_and(!STAGED, Ordering::AcqRel);
            if let (generation, CANCELLED) = slots::split(word)
                && word & (QUEUED | RESETTING) == 0
            {
                self.free_cancelled(due, index, slot, generation, freed);
                return;
            }
        }
        if slots::split(word).1 == PENDING {
            // A reset under way may be writing the deadline: either value will do, as
            // its change moves the timer once it lands.
            self.place_at_deadline(due, index, slot);
        }
    }

    /// Applies the cancels taken from the stages (`due.cancels`), with `between` after
    /// every `BATCH` of them; returns how many. The caller has looked at the inbox since
    /// it took them (see `staged`).
    pub(super) fn apply_cancels(
        &self,
        due: &mut Due,
        freed: &mut Freed,
        between: &mut dyn FnMut(&mut Due, &mut Freed),
    ) -> u64 {
        let cancels = std::mem::take(&mut due.cancels);
        for (at, &index) in cancels.iter().enumerate() {
            if at > 0 && (at as u64).is_multiple_of(BATCH) {
                between(due, freed);
            }
            self.prefetch_ahead(&cancels, at);
            self.apply_change(due, index, self.slot(index), freed);
        }
        cancels.len() as u64
    }

    /// Brings the slots a walk over `indices` reaches soon into the cache, while it is at
    /// `at`: the slot `PREFETCH_AHEAD` on, and the wheel neighbours of the one half as far
    /// on (its own line came in by then), which its unlink writes. With a million timers
    /// pending those lines are out of the cache, and the misses of a batch's slots then
    /// overlap rather than come one after another.
    fn prefetch_ahead(&self, indices: &[u32], at: usize) {
        if let Some(&far) = indices.get(at + PREFETCH_AHEAD) {
            self.slots.prefetch(far);
        }
        if let Some(&near) = indices.get(at + PREFETCH_AHEAD / 2) {
            let slot = self.slot(near);
            // Relaxed: the reaper's own links (a hint: any index prefetches harmlessly).
            self.slots.prefetch(slot.link.load(Ordering::Relaxed));
            self.slots.prefetch(slot.wheel_prev());
        }
    }

    /// Applies the change of slot `index` (`QUEUED`): frees it if it was cancelled, moves
    /// it if it was reset.
    fn apply_change(&self, due: &mut Due, index: u32, slot: Slot<'_, T>, freed: &mut Freed) {
        // AcqRel: Acquire sees what the canceller or resetter published; Release orders
        // the caller's read of `change_link` before the next push of this slot, which can
        // start as soon as QUEUED is clear.
        let word = slot.state.fetch_and(!QUEUED, Ordering::AcqRel);
        debug_assert_ne!(word & QUEUED, 0);
        // Under a reset, the resetter pushes the slot again when it is done. A staged
        // timer has not arrived: it comes with its stage, which a reset needs now (a
        // cancelled one, the stage's holder frees).
        if word & STAGED != 0 {
            due.collect_all |= word & RESETTING == 0 && slots::split(word).1 == PENDING;
        } else if word & RESETTING == 0 {
            match slots::split(word) {
                (generation, CANCELLED) => {
                    self.free_cancelled(due, index, slot, generation, freed);
                }
                (_, state) => {
                    debug_assert_eq!(state, PENDING, "queued slots do not fire");
                    self.place_at_deadline(due, index, slot);
                }
            }
        }
    }

    /// Unlinks a cancelled timer from the wheel, drops its payload, frees its slot.
    pub(super) fn free_cancelled(
        &self,
        due: &mut Due,
        index: u32,
        slot: Slot<'_, T>,
        generation: u32,
        freed: &mut Freed,
    ) {
        self.unfile(due, index, slot);
        // SAFETY: the slot was published and then cancelled, and no reset holds it, so its
        // payload is initialised and only this reaper takes it, once, before freeing it.
        let payload = unsafe { slot.take_payload() };
        // Freed before the payload is dropped: a panicking `Drop` must find the slot
        // already free, never leave a moved-out payload behind to be dropped again.
        self.slots.release(index, slot, generation, freed);
        self.dispose(payload);
    }

    /// Runs user code (a callback, or a payload's `Drop`) so that a panic in it is counted
    /// and the reaper goes on. The panic's own payload is dropped under the guard too.
    /// Inlined, as `discard` is (the panic's handling stays out of line).
    #[inline(always)]
    pub(super) fn contain(&self, user_code: impl FnOnce()) {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(user_code)) {
            self.panicked.fetch_add(1, Ordering::Relaxed);
            crate::observe::callback_panicked(&*panic);
            let _ = catch_unwind(AssertUnwindSafe(|| drop(panic)));
        }
    }

    /// Wins slot `index` for the reaper if its state word is `expected` (a pending one),
    /// takes its payload and frees it; otherwise returns the word it found.
    pub(super) fn claim(
        &self,
        index: u32,
        slot: Slot<'_, T>,
        expected: u32,
        freed: &mut Freed,
    ) -> Result<T, u32> {
        // Acquire on success: the payload the producer published; Release: a sleep that
        // finds its timer taken (`is_pending`) sees what the reaper did before, the time of
        // a manual timer's `advance` among it. The race with `cancel` is decided here:
        // exactly one of the two CASes from PENDING succeeds. Acquire on failure too: the
        // caller looks at the state it returns.
        let (generation, _) = slots::split(expected);
        slot.state.compare_exchange(
            expected,
            slots::word(generation, FIRING),
            Ordering::AcqRel,
            Ordering::Acquire,
        )?;
        self.count_out();
        // SAFETY: the CAS made this reaper the only owner of a published payload.
        let payload = unsafe { slot.take_payload() };
        // Freed before the callback runs: a slow callback holds no slot.
        self.slots.release(index, slot, generation, freed);
        Ok(payload)
    }

    /// A slot in the inboxes or the wheel, or a held timer's once `fire_due` has found it
    /// still there; the reaper's only.
    pub(super) fn slot(&self, index: u32) -> Slot<'_, T> {
        // SAFETY: the reaper may look at any slot (see `Slots::owned`).
        unsafe { self.slots.owned(index) }.expect("the inboxes and the wheel hold live slots")
    }
}
