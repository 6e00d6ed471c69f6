//! A shard: its shared slots, the two inboxes producers feed it through, and its reaper.
//!
//! Producers take a slot, write the payload and deadline, mark it `PENDING` and push it on
//! the inbox; cancellers win the slot's state word and push it on the cancel list. The
//! reaper is the only thread that touches the shard's `Wheel`: each pass it takes the
//! cancel list, then the inbox, links the new timers into the wheel, unlinks and frees the
//! cancelled ones, fires what is due, and parks until the wheel's next deadline.
//!
//! Taking the cancel list *before* the inbox is what lets a pass trust that every cancelled
//! slot it sees has already arrived: a handle only exists once its slot was pushed on the
//! inbox, so that push happens before any cancel of it, and a swap that sees the cancel is
//! followed by a swap that sees the push.
//!
//! The park handshake (no lost wake-up): before parking, the reaper stores the tick it plans
//! to wake at, then looks at both inboxes once more; a producer pushes, then reads the
//! planned tick and unparks the reaper if its deadline is earlier. All four accesses are
//! SeqCst, so at least one side sees the other's store: either the reaper finds the new
//! message and does not park, or the producer finds the plan and unparks (and an unpark
//! before `park` makes `park` return at once). While the reaper works the plan reads
//! `AWAKE`, and producers make no system call at all.

use crate::clock::Clock;
use crate::handle::Key;
use crate::inbox::{Closed, Inbox};
use crate::slab::NIL;
use crate::slots::{self, CANCELLED, FIRING, NO_KEY, PENDING, Slot, Slots};
use crate::wheel::Wheel;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::{self, Thread};

/// `planned_wake` while the reaper is working: no deadline is earlier, so nobody unparks.
const AWAKE: u64 = 0;

/// Why a schedule was refused; the payload is handed back.
pub(crate) enum Refused<T> {
    Full(T),
    Closed(T),
}

pub(crate) struct Shard<T> {
    slots: Slots<T>,
    inbox: Inbox,
    cancels: Inbox,
    /// The tick the reaper sleeps until (`u64::MAX`: until woken), or `AWAKE`.
    planned_wake: AtomicU64,
    reaper: OnceLock<Thread>,
    pending: AtomicUsize,
    max_pending: usize,
    stopping: AtomicBool,
    panicked: AtomicU64,
}

impl<T> Shard<T> {
    pub(crate) fn new(max_pending: usize) -> Self {
        Shard {
            slots: Slots::new(),
            inbox: Inbox::new(),
            cancels: Inbox::new(),
            planned_wake: AtomicU64::new(AWAKE),
            reaper: OnceLock::new(),
            pending: AtomicUsize::new(0),
            max_pending,
            stopping: AtomicBool::new(false),
            panicked: AtomicU64::new(0),
        }
    }

    /// Timers scheduled and neither fired nor cancelled.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Callbacks that panicked.
    pub(crate) fn panicked(&self) -> u64 {
        self.panicked.load(Ordering::Relaxed)
    }

    /// Schedules `payload` at tick `deadline`; returns its slot and generation.
    pub(crate) fn schedule(&self, deadline: u64, payload: T) -> Result<(u32, u32), Refused<T>> {
        // Relaxed: a count, not a synchronisation; the bound is exact because every
        // increment that overshoots is undone before anything else happens.
        if self.pending.fetch_add(1, Ordering::Relaxed) >= self.max_pending {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            return Err(Refused::Full(payload));
        }
        let Some((index, slot)) = self.slots.take() else {
            self.pending.fetch_sub(1, Ordering::Relaxed);
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
        if let Err(Closed) = self.inbox.push(index, &slot.link) {
            // The reaper is gone: the slot was never published, so it is still ours.
            // SAFETY: written above and not published, so initialised and read once here.
            let payload = unsafe { slot.take_payload() };
            self.slots.release(index, slot, generation);
            self.pending.fetch_sub(1, Ordering::Relaxed);
            return Err(Refused::Closed(payload));
        }
        // SeqCst: the producer's half of the park handshake (module doc).
        if deadline < self.planned_wake.load(Ordering::SeqCst) {
            self.wake();
        }
        Ok((index, generation))
    }

    /// Cancels the timer in slot `index` of generation `generation`; true if it was pending
    /// (it will never run now), false for a fired, cancelled or unknown one.
    pub(crate) fn cancel(&self, index: u32, generation: u32) -> bool {
        let Some(slot) = self.slots.get(index) else {
            return false;
        };
        // AcqRel on success: Acquire sees the payload the producer published (the reaper
        // drops it later on our behalf); Release hands the CANCELLED state to the reaper.
        // Relaxed on failure: nothing was changed, nothing is read.
        let won = slot.state.compare_exchange(
            slots::word(generation, PENDING),
            slots::word(generation, CANCELLED),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        if won.is_err() {
            return false;
        }
        self.pending.fetch_sub(1, Ordering::Relaxed);
        // A closed list means the reaper is gone; the slots' drop frees the payload.
        if let Ok(was_empty) = self.cancels.push(index, &slot.cancel_link) {
            // Wake a sleeping reaper once per batch, so that memory comes back promptly
            // even when the next deadline is hours away. SeqCst: the park handshake.
            if was_empty && self.planned_wake.load(Ordering::SeqCst) != AWAKE {
                self.wake();
            }
        }
        true
    }

    fn wake(&self) {
        if let Some(reaper) = self.reaper.get() {
            reaper.unpark();
        }
    }

    /// Asks the reaper to stop; `run` then returns the unfired payloads.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// The reaper: runs until `stop`, calling `handler` for every timer that comes due, and
    /// returns the payloads of the timers still pending then.
    pub(crate) fn run(&self, clock: &Clock, handler: &(dyn Fn(T) + Sync)) -> Vec<T> {
        // A second `run` would be a second consumer; the engine starts exactly one.
        let _ = self.reaper.set(thread::current());
        let mut wheel = Wheel::new();
        loop {
            self.planned_wake.store(AWAKE, Ordering::SeqCst);
            let cancels = self.cancels.take_all();
            let arrivals = self.inbox.take_all();
            self.arrive(&mut wheel, arrivals);
            self.free_cancelled(&mut wheel, cancels);
            let now = clock.now();
            while let Some(expired) = wheel.poll_expired(now) {
                self.fire(expired.value, handler);
            }
            if self.stopping.load(Ordering::SeqCst) {
                break;
            }
            let next = wheel.next_deadline();
            if next.is_some_and(|tick| tick <= clock.now()) {
                continue;
            }
            self.planned_wake
                .store(next.unwrap_or(u64::MAX), Ordering::SeqCst);
            if !self.inbox.is_empty() || !self.cancels.is_empty() {
                continue;
            }
            match next {
                Some(tick) => thread::park_timeout(clock.until(tick)),
                None => thread::park(),
            }
        }
        self.wind_up(&mut wheel)
    }

    /// Links newly arrived timers into the wheel, except those cancelled on the way.
    fn arrive(&self, wheel: &mut Wheel<u32>, mut at: u32) {
        while at != NIL {
            let slot = self.slot(at);
            let next = slot.link.load(Ordering::Relaxed);
            // Acquire: pairs with the canceller's Release (the inbox swap already made the
            // producer's writes visible).
            let (_, state) = slots::split(slot.state.load(Ordering::Acquire));
            let key = if state == CANCELLED {
                NO_KEY
            } else {
                let deadline = slot.deadline.load(Ordering::Relaxed);
                wheel.insert(deadline, at).to_bits()
            };
            // Relaxed: the key is the reaper's own bookkeeping.
            slot.wheel_key.store(key, Ordering::Relaxed);
            at = next;
        }
    }

    /// Unlinks cancelled timers from the wheel, drops their payloads, frees their slots.
    fn free_cancelled(&self, wheel: &mut Wheel<u32>, mut at: u32) {
        while at != NIL {
            let slot = self.slot(at);
            let next = slot.cancel_link.load(Ordering::Relaxed);
            let key = slot.wheel_key.swap(NO_KEY, Ordering::Relaxed);
            if key != NO_KEY {
                wheel.cancel(Key::from_bits(key));
            }
            // Acquire: pairs with the canceller's Release (see `cancel`).
            let (generation, state) = slots::split(slot.state.load(Ordering::Acquire));
            debug_assert_eq!(state, CANCELLED);
            // SAFETY: the slot was published and then cancelled, so its payload is
            // initialised, and only this reaper takes it, once, before freeing the slot.
            drop(unsafe { slot.take_payload() });
            self.slots.release(at, slot, generation);
            at = next;
        }
    }

    /// Runs the timer in slot `index` unless it was cancelled (its cancel message frees it).
    fn fire(&self, index: u32, handler: &(dyn Fn(T) + Sync)) {
        let Some(payload) = self.claim(index) else {
            return;
        };
        if catch_unwind(AssertUnwindSafe(|| handler(payload))).is_err() {
            self.panicked.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Wins slot `index` from `PENDING` for the reaper, takes its payload and frees it.
    /// `None` if a cancel won first.
    fn claim(&self, index: u32) -> Option<T> {
        let slot = self.slot(index);
        slot.wheel_key.store(NO_KEY, Ordering::Relaxed);
        // Relaxed: only the reaper changes the generation, so this read is its own.
        let (generation, _) = slots::split(slot.state.load(Ordering::Relaxed));
        // Acquire on success: the payload the producer published. The race with `cancel`
        // is decided here: exactly one of the two CASes from PENDING succeeds.
        slot.state
            .compare_exchange(
                slots::word(generation, PENDING),
                slots::word(generation, FIRING),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .ok()?;
        self.pending.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the CAS made this reaper the only owner of a published payload.
        let payload = unsafe { slot.take_payload() };
        // Freed before the callback runs: a slow callback holds no slot.
        self.slots.release(index, slot, generation);
        Some(payload)
    }

    /// At shutdown: refuses new timers and hands back every pending payload.
    fn wind_up(&self, wheel: &mut Wheel<u32>) -> Vec<T> {
        let cancels = self.cancels.close();
        let arrivals = self.inbox.close();
        self.arrive(wheel, arrivals);
        self.free_cancelled(wheel, cancels);
        wheel
            .drain_expired(u64::MAX)
            .filter_map(|expired| self.claim(expired.value))
            .collect()
    }

    fn slot(&self, index: u32) -> &Slot<T> {
        self.slots
            .get(index)
            .expect("the inboxes and the wheel hold installed slots")
    }
}
