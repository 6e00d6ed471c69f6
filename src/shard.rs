//! A shard: its shared slots, the two inboxes producers feed it through, and its reaper.
//!
//! Producers take a slot, write the payload and deadline, mark it `PENDING` and push it on
//! the inbox; cancellers and resetters change the slot's state word (see `slots`) and push
//! it on the list of changes. The reaper is the only thread that touches the shard's
//! `Wheel`: each pass it takes the changes, then the inbox, links the new timers into the
//! wheel, moves the reset ones, unlinks and frees the cancelled ones, fires what is due,
//! and parks until the wheel's next deadline.
//!
//! Taking the changes *before* the inbox is what lets a pass trust that every changed slot
//! it sees has already arrived: a handle only exists once its slot was pushed on the inbox,
//! so that push happens before any change of it, and a swap that sees the change is
//! followed by a swap that sees the push.
//!
//! Before parking, the reaper publishes the tick it plans to wake at and looks at both
//! inboxes once more; producers unpark it only for a deadline earlier than that plan
//! (`wakeup` has the handshake and why no wake-up is lost). While the reaper works,
//! producers make no system call at all.

use crate::bound::Bound;
use crate::clock::{self, Clock};
use crate::due::{Due, Near};
use crate::inbox::{Closed, Inbox};
use crate::slab::NIL;
use crate::slots::{
    self, CANCELLED, FIRING, FLAGS, Freed, PENDING, QUEUED, RESETTING, Slot, Slots,
};
use crate::stats::ShardStats;
use crate::sync::{self, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::wakeup::Wakeup;
use crossbeam_utils::CachePadded;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long cancelled timers may wait for the reaper while cancels keep coming (see
/// `run`): their memory comes back within about this long.
const TIDY_INTERVAL: Duration = Duration::from_millis(10);

/// How often the reaper comes back to a shrink under way: a step sorts for 0.1 ms at most
/// (see `slots`), so the shrink takes a tenth of the reaper's time while it lasts.
const SHRINK_INTERVAL: Duration = Duration::from_millis(1);

/// Messages (arrivals, changes) a pass takes in between two looks at what is due.
const BATCH: u64 = 4096;

/// Messages waiting in an inbox at which a producer wakes a sleeping reaper, whatever its
/// plan: the reaper takes a backlog in batches as it builds up instead of in one long
/// pass at its next deadline, late for everything due meanwhile.
const BACKLOG: u32 = 4096;

/// Why a schedule was refused; the payload is handed back.
#[derive(Debug)]
pub enum Refused<T> {
    /// `max_pending` timers are pending.
    Full(T),
    /// The reaper has shut down.
    Closed(T),
}

/// One shard of a timer engine (see the module doc).
///
/// The fields that different threads write are each on their own cache line: the inbox
/// heads (producers push, the reaper swaps), the wake-up plan (the reaper writes it every
/// pass) and the pending count; otherwise every reaper pass would take the producers'
/// lines away from them, and neighbouring shards would share lines.
pub struct Shard<T> {
    slots: Slots<T>,
    inbox: CachePadded<Inbox>,
    changes: CachePadded<Inbox>,
    wakeup: CachePadded<Wakeup>,
    counts: CachePadded<ProducerCounts>,
    /// The bound on pending timers, shared with the timer's other shards; none if unbounded.
    bound: Option<Arc<Bound>>,
    /// The wheel's tick: deadlines are nanoseconds since the start, the wheel counts ticks.
    tick_nanos: u64,
    /// Whether fired timers' lateness goes into the stats.
    record_lateness: bool,
    /// Whether timers fire at their exact deadline (see `due`), or at the start of the
    /// first tick at or after it.
    exact: bool,
    /// How long before a deadline the reaper stops sleeping and spins (0: never).
    spin_nanos: u64,
    stopping: AtomicBool,
    panicked: AtomicU64,
    /// The reaper's counts; see `stats`. (A std lock: it is not part of any protocol the
    /// loom models check, and the reaper never holds it while user code runs.)
    stats: Mutex<ShardStats>,
}

/// What producers count, on one cache line of their own.
struct ProducerCounts {
    /// Timers scheduled and neither fired nor cancelled.
    pending: AtomicUsize,
    /// Successful resets.
    resets: AtomicU64,
}

impl<T> Shard<T> {
    /// A shard holding at most `max_pending` timers, its wheel in ticks of `tick_nanos`
    /// nanoseconds (at least 1), recording lateness if `record_lateness`, firing timers at
    /// their exact deadlines if `exact`.
    pub fn new(max_pending: usize, tick_nanos: u64, record_lateness: bool, exact: bool) -> Self {
        Shard {
            slots: Slots::new(),
            inbox: CachePadded::new(Inbox::new()),
            changes: CachePadded::new(Inbox::new()),
            wakeup: CachePadded::new(Wakeup::new()),
            counts: CachePadded::new(ProducerCounts {
                pending: AtomicUsize::new(0),
                resets: AtomicU64::new(0),
            }),
            stats: Mutex::new(ShardStats::new()),
            bound: Bound::new(max_pending),
            tick_nanos: tick_nanos.max(1),
            record_lateness,
            exact,
            spin_nanos: 0,
            stopping: AtomicBool::new(false),
            panicked: AtomicU64::new(0),
        }
    }

    /// Makes the shard count its pending timers against `bound`, which the timer's other
    /// shards share, in place of its own.
    pub(crate) fn with_bound(mut self, bound: Option<Arc<Bound>>) -> Self {
        self.bound = bound;
        self
    }

    /// Makes the reaper spin, rather than sleep, for the last `spin` before each deadline:
    /// wake-ups on time to the microsecond, for a core kept busy while timers are near.
    pub(crate) fn with_spin(mut self, spin: Duration) -> Self {
        self.spin_nanos = clock::nanos(spin);
        self
    }

    /// Counts a timer out of the pending ones (fired, cancelled, handed back, refused).
    fn count_out(&self) {
        // Relaxed: a count, not a synchronisation.
        self.counts.pending.fetch_sub(1, Ordering::Relaxed);
        if let Some(bound) = &self.bound {
            bound.discharge();
        }
    }

    /// Timers scheduled and neither fired nor cancelled.
    pub fn pending(&self) -> usize {
        self.counts.pending.load(Ordering::Relaxed)
    }

    /// Callbacks that panicked.
    pub(crate) fn panicked(&self) -> u64 {
        self.panicked.load(Ordering::Relaxed)
    }

    /// A copy of the shard's counts and histograms.
    pub(crate) fn stats(&self) -> ShardStats {
        let mut stats = self.reaper_stats().clone();
        stats.reset = self.counts.resets.load(Ordering::Relaxed);
        stats.pending = self.pending();
        stats.panicked = self.panicked();
        stats.slots = u64::from(self.slots.claimed());
        stats
    }

    fn reaper_stats(&self) -> MutexGuard<'_, ShardStats> {
        // A panic while recording leaves counts behind, never a broken invariant.
        self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Schedules `payload`, due at `deadline` (nanoseconds since the start); returns its
    /// slot and generation.
    pub fn schedule(&self, deadline: u64, payload: T) -> Result<(u32, u32), Refused<T>> {
        if self.bound.as_ref().is_some_and(|bound| !bound.admit()) {
            return Err(Refused::Full(payload));
        }
        // Relaxed: a count, not a synchronisation.
        self.counts.pending.fetch_add(1, Ordering::Relaxed);
        let Some((index, slot)) = self.slots.take() else {
            self.count_out();
            return Err(Refused::Full(payload));
        };
        // Relaxed: the slot is ours; `take` synchronised with whoever freed it.
        let (generation, _) = slots::split(slot.state.load(Ordering::Relaxed));
        // SAFETY: the slot was just taken and is not yet published.
        unsafe { slot.write_payload(payload) };
        // Relaxed: both are published by the inbox push, a Release (SeqCst) CAS.
        slot.deadline.store(deadline, Ordering::Relaxed);
        slot.state
            .store(slots::word(generation, PENDING), Ordering::Relaxed);
        let waiting = self.inbox.push(index, &slot.link);
        if let Err(Closed) = waiting {
            // The reaper is gone: the slot was never published, so it is still ours.
            // SAFETY: written above and not published, so initialised and read once here.
            let payload = unsafe { slot.take_payload() };
            let mut freed = Freed::new();
            self.slots.release(index, slot, generation, &mut freed);
            self.slots.recycle(&mut freed);
            self.count_out();
            return Err(Refused::Closed(payload));
        }
        self.wakeup.notify(deadline);
        if waiting == Ok(BACKLOG) {
            self.wakeup.notify_backlog();
        }
        Ok((index, generation))
    }

    /// Cancels the timer in slot `index` of generation `generation`; true if it was pending
    /// (it will never run now), false for a fired, cancelled or unknown one.
    pub fn cancel(&self, index: u32, generation: u32) -> bool {
        // Pinned: a stale handle's slot may be in a chunk the reaper gives back meanwhile.
        let guard = sync::epoch::pin();
        let Some(slot) = self.slots.get(index, &guard) else {
            return false;
        };
        // Relaxed: only a first guess for the CAS, which checks it.
        let mut current = slot.state.load(Ordering::Relaxed);
        loop {
            if current & !FLAGS != slots::word(generation, PENDING) {
                return false;
            }
            // A reset under way pushes the change when it is done; otherwise this does.
            let queue = if current & RESETTING == 0 { QUEUED } else { 0 };
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
        self.count_out();
        if current & (RESETTING | QUEUED) == 0 {
            match self.changes.push(index, &slot.change_link) {
                Ok(0) => self.wakeup.notify_sleeping(),
                Ok(BACKLOG) => self.wakeup.notify_backlog(),
                Ok(_) => {}
                // The reaper is winding up and will never take this change: the payload
                // is the canceller's to drop (a periodic series' payload owns the shards,
                // so left in its slot it would keep them, and itself, alive for ever).
                Err(Closed) => {
                    let payload = self.take_refused(slot, generation);
                    drop(guard);
                    self.contain(|| drop(payload));
                }
            }
        }
        true
    }

    /// The payload of a slot cancelled after the reaper closed its list of changes, taken
    /// by whoever's push of the change was refused. The slot is marked `FIRING` (payload
    /// taken, slot not free) and stays so: the wind-up may still walk it in the inbox
    /// through its `link`, so it must not go back on the free stack, and the slots' drop
    /// must not drop its payload again.
    fn take_refused(&self, slot: &Slot<T>, generation: u32) -> T {
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

    /// Moves the pending timer in slot `index` of generation `generation` to `deadline`
    /// (nanoseconds since the start); true if it was pending, false (and nothing changed)
    /// otherwise.
    pub fn reset(&self, index: u32, generation: u32, deadline: u64) -> bool {
        // Pinned: as in `cancel`.
        let guard = sync::epoch::pin();
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
        if before & QUEUED == 0 && self.changes.push(index, &slot.change_link).is_err() {
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
                self.contain(|| drop(payload));
                return false;
            }
        }
        self.wakeup.notify(deadline);
        // A cancel that came while the reset was under way won: the timer is gone.
        let reset = slots::split(before).1 == PENDING;
        // Relaxed: a count.
        self.counts
            .resets
            .fetch_add(u64::from(reset), Ordering::Relaxed);
        reset
    }

    /// Asks the reaper to stop; `run` then returns the unfired payloads.
    pub(crate) fn stop(&self) {
        // The same handshake as a producer's (see `wakeup`): the store, a SeqCst fence,
        // then the wake, against the reaper's plan, fence, and look at `stopping` in
        // `may_sleep`: either the reaper sees the flag or this sees it registered.
        self.stopping.store(true, Ordering::Relaxed);
        sync::fence(Ordering::SeqCst);
        self.wakeup.wake();
    }

    /// Whether `stop` was called.
    pub(crate) fn is_stopping(&self) -> bool {
        // Relaxed: read by the thread that called `stop` (a manual timer's `advance`).
        self.stopping.load(Ordering::Relaxed)
    }

    /// The reaper: runs until `stop`, calling `handler` for every timer that comes due, and
    /// returns the payloads of the timers still pending then.
    pub(crate) fn run(&self, clock: &Clock, handler: &(dyn Fn(T) + Sync)) -> Vec<T> {
        self.register_reaper();
        let mut due = Due::new();
        loop {
            let now = clock.now();
            // While cancels keep coming, the reaper wakes every `TIDY_INTERVAL` to free
            // them in batches, and cancellers leave it be; once a pass finds none, it
            // sleeps until its next deadline, and the next cancel wakes it.
            let tidying = self.pass(&mut due, now, &|| clock.elapsed(), handler);
            // Relaxed: the flag carries no data; `may_sleep` orders the last look.
            if self.stopping.load(Ordering::Relaxed) {
                break;
            }
            let next = due.wheel.next_deadline();
            if next.is_some_and(|tick| tick <= now) {
                continue;
            }
            // The start of the next due tick, or the earliest exact deadline held.
            let next_tick = next.map(|tick| tick.saturating_mul(self.tick_nanos));
            let wake_at = match (next_tick, due.next_near()) {
                (Some(tick), Some(near)) => Some(tick.min(near)),
                (tick, near) => tick.or(near),
            };
            if wake_at.is_some_and(|at| at <= clock.elapsed()) {
                continue;
            }
            if let Some(at) =
                wake_at.filter(|at| at.saturating_sub(clock.elapsed()) <= self.spin_nanos)
            {
                self.spin_until(at, clock);
                continue;
            }
            if self.may_sleep(wake_at.unwrap_or(u64::MAX), tidying) {
                // With a spin, wake that much early and spin the rest (above).
                let until_next = wake_at.map(|at| {
                    Duration::from_nanos(at.saturating_sub(self.spin_nanos + clock.elapsed()))
                });
                let interval = if due.shrinking {
                    SHRINK_INTERVAL
                } else {
                    TIDY_INTERVAL
                };
                match (until_next, tidying) {
                    (Some(wait), false) => sync::park_timeout(wait),
                    (Some(wait), true) => sync::park_timeout(wait.min(interval)),
                    (None, true) => sync::park_timeout(interval),
                    (None, false) => sync::thread::park(),
                }
            }
        }
        self.wind_up(&mut due)
    }

    /// Spins until `at` (nanoseconds since the start), or until work arrives or the shard
    /// stops.
    fn spin_until(&self, at: u64, clock: &Clock) {
        while clock.elapsed() < at
            && self.inbox.is_empty()
            && self.changes.is_empty()
            // Relaxed: a reason to stop spinning early; `run` looks again properly.
            && !self.stopping.load(Ordering::Relaxed)
        {
            std::hint::spin_loop();
        }
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
        // Changes first, then arrivals: see the module doc.
        let changes = self.changes.take_all();
        let arrivals = self.inbox.take_all();
        let arrived = self.arrive(due, arrivals, &mut freed, &mut catch_up);
        let (changed, cancelled) = self.apply_changes(due, changes, &mut freed, &mut catch_up);
        catch_up(due, &mut freed);
        self.slots.recycle(&mut freed);
        // Both, every pass: `|` rather than `||`.
        due.shrinking = self.slots.shrink(&mut freed, self.pending()) | due.wheel.shrink();
        due.freed = freed;
        let mut stats = self.reaper_stats();
        stats.pass(arrived, changed);
        stats.cancelled += cancelled;
        stats.cascaded = due.wheel.cascaded();
        changes != NIL || due.shrinking
    }

    /// Fires every timer due at tick `now`: with exact deadlines, those whose deadline has
    /// passed by `elapsed()`, holding the others of the tick until theirs (see `due`).
    fn fire_due(
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
        while let Some(expired) = due.wheel.poll_expired(now) {
            let index = expired.value;
            let slot = self.slot(index);
            slot.set_wheel_key(None);
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
                if slot.wheel_key().is_none()
                    && slot.deadline.load(Ordering::Relaxed) == near.deadline
                {
                    self.fire(due, near, now, elapsed, handler, freed);
                }
            }
        }
    }

    /// Fires the timer `near` names, if it still stands as it did (see `claim`).
    fn fire(
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
    /// it may (nothing arrived meanwhile).
    pub fn may_sleep(&self, wake_at: u64, tidying: bool) -> bool {
        self.wakeup.plan_sleep(wake_at, tidying);
        self.inbox.is_empty() && self.changes.is_empty() && !self.stopping.load(Ordering::Relaxed)
    }

    /// Links newly arrived timers into the wheel, except those cancelled on the way, with
    /// `between` after every `BATCH` of them; returns how many arrived.
    fn arrive(
        &self,
        due: &mut Due,
        mut at: u32,
        freed: &mut Freed,
        between: &mut dyn FnMut(&mut Due, &mut Freed),
    ) -> u64 {
        let mut arrived = 0;
        while at != NIL {
            arrived += 1;
            if arrived % BATCH == 0 {
                between(due, freed);
            }
            let slot = self.slot(at);
            let next = slot.link.load(Ordering::Relaxed);
            // Acquire: pairs with the canceller's Release (the inbox swap already made the
            // producer's writes visible).
            let (_, state) = slots::split(slot.state.load(Ordering::Acquire));
            if state == PENDING {
                // A reset under way may be writing the deadline: either value will do, as
                // its change moves the timer once it lands.
                self.place_at_deadline(due, at, slot);
            }
            at = next;
        }
        arrived
    }

    /// Links slot `index` into the wheel at `deadline`, or moves it there if it is in.
    fn place(&self, due: &mut Due, index: u32, slot: &Slot<T>, deadline: u64) {
        let moved = slot
            .wheel_key()
            .is_some_and(|key| due.wheel.reset(key, deadline).is_ok());
        if !moved {
            slot.set_wheel_key(Some(due.wheel.insert(deadline, index)));
        }
    }

    /// Links slot `index` into the wheel, or moves it there, under its deadline's tick.
    fn place_at_deadline(&self, due: &mut Due, index: u32, slot: &Slot<T>) {
        // Relaxed: published by the inbox push or the change that brought the slot here.
        let deadline = slot.deadline.load(Ordering::Relaxed);
        let tick = if self.exact {
            deadline / self.tick_nanos // the tick it falls in; see `due`
        } else {
            clock::tick_of(deadline, self.tick_nanos)
        };
        self.place(due, index, slot, tick);
    }

    /// Applies the cancels and resets on the changes list, with `between` after every
    /// `BATCH` of them; returns how many changes it took, and how many were cancels.
    fn apply_changes(
        &self,
        due: &mut Due,
        mut at: u32,
        freed: &mut Freed,
        between: &mut dyn FnMut(&mut Due, &mut Freed),
    ) -> (u64, u64) {
        let (mut changed, mut cancelled) = (0, 0);
        while at != NIL {
            changed += 1;
            if changed % BATCH == 0 {
                between(due, freed);
            }
            let slot = self.slot(at);
            let next = slot.change_link.load(Ordering::Relaxed);
            // AcqRel: Acquire sees what the canceller or resetter published; Release orders
            // the read of `change_link` above before the next push of this slot, which can
            // start as soon as QUEUED is clear.
            let word = slot.state.fetch_and(!QUEUED, Ordering::AcqRel);
            debug_assert_ne!(word & QUEUED, 0);
            // Under a reset, the resetter pushes the slot again when it is done.
            if word & RESETTING == 0 {
                match slots::split(word) {
                    (generation, CANCELLED) => {
                        self.free_cancelled(due, at, slot, generation, freed);
                        cancelled += 1;
                    }
                    (_, state) => {
                        debug_assert_eq!(state, PENDING, "queued slots do not fire");
                        self.place_at_deadline(due, at, slot);
                    }
                }
            }
            at = next;
        }
        (changed, cancelled)
    }

    /// Unlinks a cancelled timer from the wheel, drops its payload, frees its slot.
    fn free_cancelled(
        &self,
        due: &mut Due,
        index: u32,
        slot: &Slot<T>,
        generation: u32,
        freed: &mut Freed,
    ) {
        if let Some(key) = slot.take_wheel_key() {
            due.wheel.cancel(key);
        }
        // SAFETY: the slot was published and then cancelled, and no reset holds it, so its
        // payload is initialised and only this reaper takes it, once, before freeing it.
        let payload = unsafe { slot.take_payload() };
        // Freed before the payload is dropped: a panicking `Drop` must find the slot
        // already free, never leave a moved-out payload behind to be dropped again.
        self.slots.release(index, slot, generation, freed);
        self.contain(|| drop(payload));
    }

    /// Runs user code (a callback, or a payload's `Drop`) so that a panic in it is counted
    /// and the reaper goes on. The panic's own payload is dropped under the guard too.
    fn contain(&self, user_code: impl FnOnce()) {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(user_code)) {
            self.panicked.fetch_add(1, Ordering::Relaxed);
            let _ = catch_unwind(AssertUnwindSafe(|| drop(panic)));
        }
    }

    /// Wins slot `index` for the reaper if its state word is `expected` (a pending one),
    /// takes its payload and frees it; otherwise returns the word it found.
    fn claim(
        &self,
        index: u32,
        slot: &Slot<T>,
        expected: u64,
        freed: &mut Freed,
    ) -> Result<T, u64> {
        // Acquire on success: the payload the producer published. The race with `cancel`
        // is decided here: exactly one of the two CASes from PENDING succeeds. Acquire on
        // failure too: the caller looks at the state it returns.
        let (generation, _) = slots::split(expected);
        slot.state.compare_exchange(
            expected,
            slots::word(generation, FIRING),
            Ordering::Acquire,
            Ordering::Acquire,
        )?;
        self.count_out();
        // SAFETY: the CAS made this reaper the only owner of a published payload.
        let payload = unsafe { slot.take_payload() };
        // Freed before the callback runs: a slow callback holds no slot.
        self.slots.release(index, slot, generation, freed);
        Ok(payload)
    }

    /// At shutdown, after the last pass: refuses new timers and changes, and hands back
    /// every pending payload.
    pub fn wind_up(&self, due: &mut Due) -> Vec<T> {
        let changes = self.changes.close();
        let arrivals = self.inbox.close();
        let mut freed = std::mem::take(&mut due.freed);
        let arrived = self.arrive(due, arrivals, &mut freed, &mut |_, _| {});
        let (_, cancelled) = self.apply_changes(due, changes, &mut freed, &mut |_, _| {});
        {
            // Counted as a pass would, so that the counts add up after shutdown too.
            let mut stats = self.reaper_stats();
            stats.scheduled += arrived;
            stats.cancelled += cancelled;
        }
        // A held timer names its generation: its slot may have moved on since (cancelled,
        // freed and taken again by a producer that is still to find the inbox closed, so
        // its new timer is not the reaper's to take). A slot in the wheel is current: the
        // reaper unlinks every slot it frees.
        let held: Vec<(u32, Option<u32>)> = due
            .drain_near()
            .map(|near| (near.index, Some(near.generation)))
            .collect();
        let in_wheel = due
            .wheel
            .drain_expired(u64::MAX)
            .map(|expired| (expired.value, None));
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
    fn hand_back(&self, index: u32, generation: Option<u32>, freed: &mut Freed) -> Option<T> {
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

    /// A slot in the inboxes or the wheel, or a held timer's once `fire_due` has found it
    /// still there; the reaper's only.
    fn slot(&self, index: u32) -> &Slot<T> {
        // SAFETY: the reaper may look at any slot (see `Slots::owned`).
        unsafe { self.slots.owned(index) }.expect("the inboxes and the wheel hold live slots")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// A shard with exact deadlines and a tick of 1,000 ns, whose payloads are boxed (so
    /// that one moved out twice is a double free that miri and the allocator see).
    fn exact_shard() -> Shard<Box<u64>> {
        Shard::new(usize::MAX, 1_000, false, true)
    }

    /// Holds a timer due at 1,500 ns: its tick (1) has come at 1,000 ns, its deadline not.
    fn held_timer(shard: &Shard<Box<u64>>, due: &mut Due, payload: u64) -> (u32, u32) {
        let handle = shard.schedule(1_500, Box::new(payload)).unwrap();
        shard.pass(due, 1, &|| 1_000, &|_| panic!("not due"));
        assert_eq!(due.next_near(), Some(1_500), "held until its deadline");
        handle
    }

    // The wind-up used to hand back held timers by slot index alone: a held timer that was
    // cancelled left its index in the heap, its slot was freed and taken again by a
    // producer still to find the inbox closed, and the wind-up took that producer's
    // payload, which the producer then took again (moved out twice, the slot freed twice,
    // `pending` wrapped).
    #[test]
    fn the_wind_up_leaves_a_held_slot_that_moved_on_to_its_new_producer() {
        let shard = exact_shard();
        let mut due = Due::new();
        let (index, generation) = held_timer(&shard, &mut due, 1);
        assert!(shard.cancel(index, generation));
        shard.pass(&mut due, 1, &|| 1_000, &|_| panic!("cancelled"));
        // A producer takes the freed slot and marks it pending: `schedule` up to its push.
        let (taken, slot) = shard.slots.take().unwrap();
        assert_eq!(taken, index, "the freed slot is the first on the stack");
        // SAFETY: just taken, not published.
        unsafe { slot.write_payload(Box::new(2)) };
        slot.state
            .store(slots::word(generation + 1, PENDING), Ordering::Relaxed);
        let unfired = shard.wind_up(&mut due);
        assert!(
            unfired.is_empty(),
            "handed back {unfired:?}, not the reaper's"
        );
        // The producer's push is refused, and the slot is still its own to give back.
        assert_eq!(shard.inbox.push(taken, &slot.link), Err(Closed));
        // SAFETY: written above, never published.
        assert_eq!(*unsafe { slot.take_payload() }, 2);
        let mut freed = Freed::new();
        shard.slots.release(taken, slot, generation + 1, &mut freed);
        shard.slots.recycle(&mut freed);
    }

    /// Producers schedule, reset and cancel boxed payloads while a reaper thread runs
    /// passes, then the reaper winds up: every payload is fired, cancelled or handed back,
    /// once. Small enough for miri, whose race detector and leak check watch the payload
    /// cells, the free stack and the inboxes as they are handed between threads.
    #[test]
    fn payloads_cross_threads_once_each() {
        const PER_PRODUCER: u64 = if cfg!(miri) { 40 } else { 20_000 };
        let shard: Arc<Shard<Box<u64>>> = Arc::new(Shard::new(usize::MAX, 1, true, true));
        let stop = Arc::new(AtomicBool::new(false));
        let fired = Arc::new(AtomicUsize::new(0));
        let reaper = {
            let (shard, stop, fired) = (Arc::clone(&shard), Arc::clone(&stop), Arc::clone(&fired));
            std::thread::spawn(move || {
                let mut due = Due::new();
                let mut now = 0;
                let count = |payload: Box<u64>| {
                    assert!(*payload < 2 * PER_PRODUCER);
                    fired.fetch_add(1, Ordering::Relaxed);
                };
                while !stop.load(Ordering::Acquire) {
                    shard.pass(&mut due, now, &|| now, &count);
                    now += 1;
                }
                shard.pass(&mut due, now, &|| now, &count);
                shard.wind_up(&mut due).len()
            })
        };
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let shard = Arc::clone(&shard);
                std::thread::spawn(move || {
                    let mut cancelled = 0;
                    for i in 0..PER_PRODUCER {
                        let id = p * PER_PRODUCER + i;
                        let (slot, generation) =
                            shard.schedule(id % 50, Box::new(id)).expect("no bound");
                        if i % 3 == 0 {
                            shard.reset(slot, generation, id % 7);
                        }
                        if i % 2 == 0 && shard.cancel(slot, generation) {
                            cancelled += 1;
                        }
                    }
                    cancelled
                })
            })
            .collect();
        let cancelled: usize = producers.into_iter().map(|p| p.join().unwrap()).sum();
        stop.store(true, Ordering::Release);
        let unfired = reaper.join().unwrap();
        assert_eq!(
            fired.load(Ordering::Relaxed) + cancelled + unfired,
            2 * PER_PRODUCER as usize
        );
        assert_eq!(shard.pending(), 0);
    }
}
