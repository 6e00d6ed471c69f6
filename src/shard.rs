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
//! Before parking, the reaper publishes the tick it plans to wake at and looks at both
//! inboxes once more; producers unpark it only for a deadline earlier than that plan
//! (`wakeup` has the handshake and why no wake-up is lost). While the reaper works,
//! producers make no system call at all.

use crate::clock::Clock;
use crate::handle::Key;
use crate::inbox::{Closed, Inbox};
use crate::slab::NIL;
use crate::slots::{self, CANCELLED, FIRING, NO_KEY, PENDING, Slot, Slots};
use crate::sync::{self, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::wakeup::Wakeup;
use crate::wheel::Wheel;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Why a schedule was refused; the payload is handed back.
#[derive(Debug)]
pub enum Refused<T> {
    /// The shard holds `max_pending` timers.
    Full(T),
    /// The reaper has shut down.
    Closed(T),
}

/// One shard of a timer engine (see the module doc).
pub struct Shard<T> {
    slots: Slots<T>,
    inbox: Inbox,
    cancels: Inbox,
    wakeup: Wakeup,
    pending: AtomicUsize,
    max_pending: usize,
    stopping: AtomicBool,
    panicked: AtomicU64,
}

impl<T> Shard<T> {
    /// A shard holding at most `max_pending` timers.
    pub fn new(max_pending: usize) -> Self {
        Shard {
            slots: Slots::new(),
            inbox: Inbox::new(),
            cancels: Inbox::new(),
            wakeup: Wakeup::new(),
            pending: AtomicUsize::new(0),
            max_pending,
            stopping: AtomicBool::new(false),
            panicked: AtomicU64::new(0),
        }
    }

    /// Timers scheduled and neither fired nor cancelled.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Callbacks that panicked.
    pub(crate) fn panicked(&self) -> u64 {
        self.panicked.load(Ordering::Relaxed)
    }

    /// Schedules `payload` at tick `deadline`; returns its slot and generation.
    pub fn schedule(&self, deadline: u64, payload: T) -> Result<(u32, u32), Refused<T>> {
        // Relaxed: a count, not a synchronisation. Incremented only while below the bound,
        // so a refusal always means `max_pending` timers really are pending.
        let below_bound = |n: usize| (n < self.max_pending).then_some(n + 1);
        if self
            .pending
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, below_bound)
            .is_err()
        {
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
        self.wakeup.notify(deadline);
        Ok((index, generation))
    }

    /// Cancels the timer in slot `index` of generation `generation`; true if it was pending
    /// (it will never run now), false for a fired, cancelled or unknown one.
    pub fn cancel(&self, index: u32, generation: u32) -> bool {
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
        if let Ok(true) = self.cancels.push(index, &slot.cancel_link) {
            self.wakeup.notify_sleeping();
        }
        true
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

    /// The reaper: runs until `stop`, calling `handler` for every timer that comes due, and
    /// returns the payloads of the timers still pending then.
    pub(crate) fn run(&self, clock: &Clock, handler: &(dyn Fn(T) + Sync)) -> Vec<T> {
        self.register_reaper();
        let mut wheel = Wheel::new();
        loop {
            self.pass(&mut wheel, clock.now(), handler);
            // Relaxed: the flag carries no data; `may_sleep` orders the last look.
            if self.stopping.load(Ordering::Relaxed) {
                break;
            }
            let next = wheel.next_deadline();
            if next.is_some_and(|tick| tick <= clock.now()) {
                continue;
            }
            if self.may_sleep(next.unwrap_or(u64::MAX)) {
                match next {
                    Some(tick) => sync::park_timeout(clock.until(tick)),
                    None => sync::thread::park(),
                }
            }
        }
        self.wind_up(&mut wheel)
    }

    /// Makes the calling thread the one producers unpark. The reaper calls it once, first.
    pub fn register_reaper(&self) {
        self.wakeup.register_reaper();
    }

    /// One pass of the reaper: takes what the inboxes hold, links and unlinks it, and fires
    /// every timer due at tick `now`.
    pub fn pass(&self, wheel: &mut Wheel<u32>, now: u64, handler: &(dyn Fn(T) + Sync)) {
        self.wakeup.awake();
        // Cancels first, then arrivals: see the module doc.
        let cancels = self.cancels.take_all();
        let arrivals = self.inbox.take_all();
        self.arrive(wheel, arrivals);
        self.free_cancelled(wheel, cancels);
        while let Some(expired) = wheel.poll_expired(now) {
            self.fire(expired.value, handler);
        }
    }

    /// The reaper's side of the park handshake: plans to sleep until `tick`, and says
    /// whether it may (nothing arrived meanwhile).
    pub fn may_sleep(&self, tick: u64) -> bool {
        self.wakeup.plan_sleep(tick);
        self.inbox.is_empty() && self.cancels.is_empty() && !self.stopping.load(Ordering::Relaxed)
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
            let payload = unsafe { slot.take_payload() };
            // Freed before the payload is dropped: a panicking `Drop` must find the slot
            // already free, never leave a moved-out payload behind to be dropped again.
            self.slots.release(at, slot, generation);
            self.contain(|| drop(payload));
            at = next;
        }
    }

    /// Runs the timer in slot `index` unless it was cancelled (its cancel message frees it).
    fn fire(&self, index: u32, handler: &(dyn Fn(T) + Sync)) {
        if let Some(payload) = self.claim(index) {
            self.contain(|| handler(payload));
        }
    }

    /// Runs user code (a callback, or a payload's `Drop`) so that a panic in it is counted
    /// and the reaper goes on. The panic's own payload is dropped under the guard too.
    fn contain(&self, user_code: impl FnOnce()) {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(user_code)) {
            self.panicked.fetch_add(1, Ordering::Relaxed);
            let _ = catch_unwind(AssertUnwindSafe(|| drop(panic)));
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
