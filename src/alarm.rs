//! The one allocation a [`Sleep`](crate::Sleep) shares with its timer's callback: the
//! waker of the task that awaits the sleep, and a state byte that says how the wait ended
//! and which of the two ends has let go.
//!
//! Two owners and no reference count: the sleep's end, a [`Listener`], and the timer's, an
//! [`Alarm`] (inside the timer's [`Callback`](crate::Callback)). Each lets go with one
//! read-modify-write of the state, which also tells it whether the other end is gone; the
//! last one frees. The alarm wakes the waker by reference, without a lock: only the sleep
//! ever writes it, once before the timer exists, and again only when a poll brings a waker
//! that would wake another task (rare: a task's waker stays the same from poll to poll).
//! That change takes the one lock bit of the state: an alarm that ends the wait meanwhile
//! wakes nobody, and the poll, unlocking, finds the wait ended and returns ready itself.
//!
//! An alarm that finds the sleep still listening ends the wait in two steps: it marks how
//! (rang, or dropped unrun because the timer shut down), wakes the task by reference, and
//! only then lets go; the sleep frees nothing before that. A sleep that lets go before its
//! timer ended (a timeout whose work finished first, the common case) takes the waker with
//! it, so the task's reference count drops on the task's own core, and the alarm, finding
//! the sleep gone at its first step, frees the memory and touches nothing else. Otherwise
//! the waker stays in the allocation, and whoever frees it drops it. A sleep whose timer
//! still waited in its own thread's stage when it let go gets the alarm back with the
//! timer, never seen by another thread: with both ends in hand it frees everything with
//! no read-modify-write at all (`Listener::reclaim`; W7 `mode=yield1`, whose timeouts all
//! end so, spent about 10 ns less CPU an operation, 6 %).
//!
//! Why not an `Arc` and an `AtomicWaker`: a timeout cancelled before its deadline (the
//! common case) makes two read-modify-writes on this byte, one for each end, where those
//! two would make about ten (the count's increments and decrements, each registration's
//! two, the waker's take).

use crate::error::SleepError;
use crate::sync::{AtomicU8, Ordering, UnsafeCell};
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::task::Waker;

/// `Shared::state`: the alarm rang while the sleep listened.
const RANG: u8 = 1;
/// The alarm was dropped unrun while the sleep listened: the timer shut down.
const GONE: u8 = 2;
/// The alarm has let go.
const ALARM_LEFT: u8 = 4;
/// The sleep has let go.
const SLEEP_LEFT: u8 = 8;
/// The sleep is changing the waker: the alarm must not read it.
const CHANGING: u8 = 16;

struct Shared {
    state: AtomicU8,
    /// The task's waker: written by the sleep (before the alarm exists, or under
    /// `CHANGING`), read by both ends, dropped once: by the sleep if it let go first, by
    /// whoever frees the allocation otherwise.
    waker: UnsafeCell<ManuallyDrop<Waker>>,
}

/// A new shared state for a sleep about to schedule its timer, which wakes `waker`: the
/// sleep's end and the timer's.
pub fn pair(waker: Waker) -> (Listener, Alarm) {
    let shared = Box::new(Shared {
        state: AtomicU8::new(0),
        waker: UnsafeCell::new(ManuallyDrop::new(waker)),
    });
    #[cfg(loom)]
    LIVE.with(|live| live.set(live.get() + 1));
    let shared = NonNull::from(Box::leak(shared));
    (Listener(shared), Alarm(shared))
}

/// Frees the allocation; drops the waker in it too when `with_waker`.
///
/// # Safety
/// The caller is the last end (the other has let go, which this thread has acquired), and
/// `with_waker` is false exactly when the sleep took the waker.
unsafe fn free(shared: NonNull<Shared>, with_waker: bool) {
    // SAFETY: `pair` made `shared` from a `Box`; both ends have let go, so nothing else
    // reaches it, and this is the only free (the one end that saw the other gone).
    let shared = unsafe { Box::from_raw(shared.as_ptr()) };
    // A write, as the free is one (so loom checks it against both ends' reads).
    shared.waker.with_mut(|waker| {
        if with_waker {
            // SAFETY: the waker is still the allocation's (the caller's word), and no
            // other access can come: both ends have let go.
            unsafe { ManuallyDrop::drop(&mut *waker) };
        }
    });
    #[cfg(loom)]
    LIVE.with(|live| live.set(live.get() - 1));
}

#[cfg(loom)]
thread_local! {
    /// How many allocations are live, for the loom models (loom runs a model's threads on
    /// the test's own thread).
    static LIVE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many shared states this thread's loom models have not freed.
#[cfg(loom)]
pub fn live() -> usize {
    LIVE.with(std::cell::Cell::get)
}

/// The timer's end: rung by the callback; dropped unrun (the timer shut down and its
/// callbacks were dropped), it ends the sleep with [`SleepError::Shutdown`].
pub struct Alarm(NonNull<Shared>);

// SAFETY: an alarm is the timer's end of a `Shared` made for two threads: its accesses are
// the state's atomics and reads of a `Waker`, which is `Send + Sync`, ordered against the
// sleep's by the protocol in `end`. Nothing in it belongs to the thread that made it.
unsafe impl Send for Alarm {}
// SAFETY: no method takes `&self`: a shared reference to an alarm reaches nothing.
unsafe impl Sync for Alarm {}

impl Alarm {
    /// The timer fired: the sleep is over; wakes its task if it still listens.
    pub fn ring(self) {
        let alarm = ManuallyDrop::new(self);
        alarm.end(RANG);
    }

    /// Ends the wait as `how`, if the sleep still listens, and lets go.
    fn end(&self, how: u8) {
        // SAFETY: this end has not let go (`ring` takes it, `Drop` ends it once), so the
        // allocation lives.
        let shared = unsafe { self.0.as_ref() };
        // Acquire: if the sleep has let go, its last read of the waker happens before the
        // free below. Nothing else is published by this store: the woken task learns how
        // the wait ended from this byte alone, ordered by the waker's own synchronisation
        // (set, then wake; the task's poll, then read).
        let before = shared.state.fetch_or(how, Ordering::Acquire);
        if before & SLEEP_LEFT != 0 {
            // SAFETY: the sleep let go before the wait ended, taking the waker; this end
            // is the last.
            unsafe { free(self.0, false) };
            return;
        }
        if before & CHANGING == 0 {
            // SAFETY: the sleep still holds its end, so it frees nothing and drops no waker
            // before this end lets go below; it is not changing the waker, and will not
            // (its lock finds the wait ended); this Acquire saw its last change's Release.
            shared.waker.with(|waker| unsafe { (*waker).wake_by_ref() });
        }
        // Otherwise the poll that is changing the waker finds the wait ended as it unlocks,
        // and returns ready: no wake-up needed.
        // Release: the wake's read of the waker happens before the sleep's free; Acquire:
        // if the sleep let go meanwhile, its accesses happen before this free.
        let before = shared.state.fetch_or(ALARM_LEFT, Ordering::AcqRel);
        if before & SLEEP_LEFT != 0 {
            // SAFETY: the sleep let go after the wait ended, so it left the waker here
            // (see `Listener::drop`); this end is the last.
            unsafe { free(self.0, true) };
        }
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        self.end(GONE);
    }
}

/// The sleep's end: how the wait ended, if it has, and whose waker it wakes. Dropping it
/// lets go: the alarm then wakes nobody.
pub struct Listener(NonNull<Shared>);

// SAFETY: as for `Alarm`: the sleep's end of a two-thread protocol, whose accesses are the
// state's atomics and reads of a `Send + Sync` waker, ordered in `Listener::drop`.
unsafe impl Send for Listener {}
// SAFETY: its `&self` methods only load the state and read the waker, which nobody writes
// while the listener lives (the waker is dropped only after the sleep let go).
unsafe impl Sync for Listener {}

impl Listener {
    fn shared(&self) -> &Shared {
        // SAFETY: the allocation lives while this end does: the alarm never frees it
        // before the sleep let go, which is this end's drop.
        unsafe { self.0.as_ref() }
    }

    /// How the wait ended, if it has: `Ok` if the alarm rang, an error if it was dropped
    /// unrun (the timer shut down).
    pub fn ended(&self) -> Option<Result<(), SleepError>> {
        // Relaxed: the byte carries no data, only which way the wait ended; a task woken
        // by the alarm polls after the wake, which orders the alarm's store before this
        // load (the `AtomicWaker` pattern).
        ending(self.shared().state.load(Ordering::Relaxed))
    }

    /// Takes back this sleep's own alarm, which never left the calling thread (its timer
    /// was taken out of the thread's stage unrun, see `Scheduler::take_staged`): with both
    /// ends here, the allocation and its waker are freed without a word to the other end.
    pub fn reclaim(self, alarm: Alarm) {
        assert_eq!(self.0, alarm.0, "a listener reclaims its own alarm");
        let listener = ManuallyDrop::new(self);
        let _alarm = ManuallyDrop::new(alarm);
        // SAFETY: both ends are here and neither has let go (the alarm, never run nor
        // dropped, never reached another thread: its timer stayed in this thread's stage
        // until taken back), so no other reference to the allocation exists and none can
        // come; the sleep still listens, so the waker is in it. Neither end is used again.
        unsafe { free(listener.0, true) };
    }

    /// Lets go, as a drop does, and tells how the wait had ended when it did: `None` if
    /// it had not, and then nobody will be woken.
    pub fn leave(self) -> Option<Result<(), SleepError>> {
        ending(ManuallyDrop::new(self).let_go())
    }

    /// A poll: how the wait ended, if it has; otherwise makes sure the alarm wakes the
    /// task of `waker` (the waker is changed only if it would wake another task).
    pub fn listen(&mut self, waker: &Waker) -> Option<Result<(), SleepError>> {
        let shared = self.shared();
        if let Some(ended) = self.ended() {
            return Some(ended);
        }
        // SAFETY: only this end writes the waker, and it holds `&mut self`; the alarm only
        // reads it.
        if shared.waker.with(|ours| unsafe { (*ours).will_wake(waker) }) {
            return None;
        }
        // Cloned first: a clone that panics leaves the lock untaken.
        let new = waker.clone();
        // Relaxed, both: the alarm reads the waker only if its first step comes before
        // this lock in the state's order (then the lock fails and nothing is written) or
        // after the unlock below (whose Release orders the write first).
        if let Err(state) =
            shared
                .state
                .compare_exchange(0, CHANGING, Ordering::Relaxed, Ordering::Relaxed)
        {
            // The wait ended (only the alarm sets a bit while this end is here).
            return ending(state);
        }
        // SAFETY: under `CHANGING` the alarm does not read the waker; nobody else writes
        // it.
        let old = shared
            .waker
            .with_mut(|ours| unsafe { std::mem::replace(&mut *ours, ManuallyDrop::new(new)) });
        // Release: the new waker is written before the alarm's read (its first step is
        // Acquire).
        let before = shared.state.fetch_and(!CHANGING, Ordering::Release);
        drop(ManuallyDrop::into_inner(old));
        ending(before)
    }
}

impl Listener {
    /// Lets go; returns the state as it was just before.
    fn let_go(&mut self) -> u8 {
        let shared = self.shared();
        // A bitwise copy of the waker, owned only if the wait has not ended (below). Read
        // before letting go: once this end has, the alarm may free the allocation.
        // SAFETY: a read, racing only with the alarm's reads (the waker is dropped only
        // after this end let go).
        let waker = shared
            .waker
            .with(|waker| unsafe { std::ptr::read(waker) });
        // Release: the read above happens before the alarm's free; Acquire: if the alarm
        // has let go, its accesses happen before this free.
        let before = shared.state.fetch_or(SLEEP_LEFT, Ordering::AcqRel);
        if before & (RANG | GONE) == 0 {
            // The wait had not ended: the alarm will find this end gone at its first step
            // and free the allocation without the waker, which is this copy's now.
            drop(ManuallyDrop::into_inner(waker));
        } else if before & ALARM_LEFT != 0 {
            // SAFETY: the alarm ended the wait and let go: this end is the last, and the
            // waker is freed as this copy, once.
            unsafe { free(self.0, false) };
            drop(ManuallyDrop::into_inner(waker));
        }
        // Otherwise the alarm is waking the task: it frees the allocation and drops the
        // waker there; this copy is forgotten.
        before
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.let_go();
    }
}

/// How a wait whose state is `state` ended, if it has.
fn ending(state: u8) -> Option<Result<(), SleepError>> {
    if state & RANG != 0 {
        Some(Ok(()))
    } else if state & GONE != 0 {
        Some(Err(SleepError::Shutdown))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    /// A waker that counts its wake-ups; its `Arc`'s count tells how many copies live.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (Arc::clone(&count), Waker::from(count))
    }

    fn woken(count: &Count) -> usize {
        count.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn a_ring_wakes_the_listening_sleep_once_and_tells_it_ok() {
        let (count, waker) = counting();
        let (listener, alarm) = pair(waker);
        assert_eq!(listener.ended(), None);
        alarm.ring();
        assert_eq!(woken(&count), 1);
        assert_eq!(listener.ended(), Some(Ok(())));
        assert_eq!(listener.leave(), Some(Ok(())));
        assert_eq!(Arc::strong_count(&count), 1, "the waker is dropped once");
    }

    #[test]
    fn an_alarm_dropped_unrun_wakes_the_sleep_with_shutdown() {
        let (count, waker) = counting();
        let (listener, alarm) = pair(waker);
        drop(alarm);
        assert_eq!(woken(&count), 1);
        assert_eq!(listener.ended(), Some(Err(SleepError::Shutdown)));
        drop(listener);
        assert_eq!(Arc::strong_count(&count), 1);
    }

    #[test]
    fn a_sleep_that_let_go_first_is_woken_by_nobody_and_takes_its_waker() {
        for ring in [true, false] {
            let (count, waker) = counting();
            let (listener, alarm) = pair(waker);
            assert_eq!(listener.leave(), None);
            assert_eq!(Arc::strong_count(&count), 1, "the sleep dropped the waker");
            if ring {
                alarm.ring();
            } else {
                drop(alarm);
            }
            assert_eq!(woken(&count), 0);
            assert_eq!(Arc::strong_count(&count), 1);
        }
    }

    #[test]
    fn a_sleep_that_reclaims_its_own_alarm_frees_both_ends_and_the_waker_once() {
        let (count, waker) = counting();
        let (listener, alarm) = pair(waker);
        listener.reclaim(alarm);
        assert_eq!(woken(&count), 0, "nobody is woken");
        assert_eq!(Arc::strong_count(&count), 1, "the waker is dropped once");
    }

    #[test]
    fn the_two_ends_let_go_on_two_threads_and_the_last_frees() {
        // Miri checks each run for a leak, a double free or a read of freed memory.
        for round in 0..20 {
            let (count, waker) = counting();
            let (listener, alarm) = pair(waker);
            let reaper = std::thread::spawn(move || {
                if round % 2 == 0 {
                    alarm.ring();
                } else {
                    drop(alarm);
                }
            });
            let ended = listener.leave();
            reaper.join().unwrap();
            assert_eq!(woken(&count), usize::from(ended.is_some()));
            assert_eq!(Arc::strong_count(&count), 1);
        }
    }

    #[test]
    fn a_poll_with_another_tasks_waker_moves_the_wake_up_to_it() {
        let (first_count, first) = counting();
        let (second_count, second) = counting();
        let (mut listener, alarm) = pair(first.clone());
        assert_eq!(listener.listen(&first), None);
        assert_eq!(listener.listen(&second), None);
        assert_eq!(Arc::strong_count(&first_count), 2, "the old waker was dropped");
        alarm.ring();
        assert_eq!((woken(&first_count), woken(&second_count)), (0, 1));
        assert_eq!(listener.listen(&second), Some(Ok(())));
        drop(listener);
        assert_eq!(Arc::strong_count(&second_count), 2, "the new waker was dropped");
    }
}
