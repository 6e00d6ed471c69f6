//! A producer thread's stage on one shard: where its new timers wait to be handed to the
//! reaper in a batch, and where the slots of the timers it cancelled before they were
//! handed over wait to be taken again, by the same thread, without crossing to the reaper.
//!
//! Most timers are cancelled soon after they are made (a request answered in time). Handed
//! over one by one, each costs a compare-and-swap on the shard's inbox and another on its
//! free stack, and a trip of its slot's cache line to the reaper's core and back. Staged,
//! a timer cancelled while it still waits here is taken out and its slot reused in place:
//! no shared cache line is written, and the reaper never hears of it. Those that stay are
//! handed over as one batch when the stage fills (`STAGE_LEN`).
//!
//! Who may touch the stage's contents is settled by one state word:
//!
//! ```text
//!   IDLE --owner--> OWNER --owner--> IDLE
//!                     \--reaper--> OWNER|COLLECT --owner: hands the stage over--> IDLE
//!   IDLE --reaper--> REAPER --reaper--> IDLE, or CLOSED for good (shutdown)
//! ```
//!
//! The owner (the one thread that stages here) takes the stage from `IDLE` and gives it
//! back; the reaper takes it from `IDLE` too, and finding the owner inside asks it, with
//! `COLLECT`, to hand what it staged over on its way out. Neither ever waits for
//! the other, except the shutdown's last collection, which waits for the owner to leave.
//!
//! No staged timer is late for being staged: the owner stages a timer only if it is due no
//! earlier than the reaper's planned wake-up, and hands it over at once otherwise; the
//! reaper, each pass, collects the stages holding a timer due before its next wake-up, and
//! before it parks it looks at the stages once more. The two sides close the race as the
//! inbox does (`wakeup`): the owner stages, issues a SeqCst fence and reads the plan; the
//! reaper stores the plan, issues a SeqCst fence and reads the stages' `len` and `min`.
//! A thread that exits leaves its stage to the reaper, which collects it and forgets it
//! (`let_go`): the plan already covers its timers.

use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering, UnsafeCell};

/// Timers a stage holds before its owner hands them over (2 under loom, so that a model
/// of a few timers fills it).
pub(crate) const STAGE_LEN: usize = if cfg!(loom) { 2 } else { 4096 };
/// Free slots a stage keeps for its owner to reuse.
pub(crate) const FREE_LEN: usize = STAGE_LEN;

const IDLE: u32 = 0;
const OWNER: u32 = 1;
/// With `OWNER`: the reaper asks the owner to hand its timers over as it leaves.
const COLLECT: u32 = 2;
const REAPER: u32 = 4;
/// Shut down: nobody stages here again.
const CLOSED: u32 = 8;

/// What the reaper found when it came to collect a stage.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Take {
    /// The stage is the reaper's until `release` (or `close`).
    Taken,
    /// The owner is inside: it hands its timers over as it leaves.
    Asked,
    /// Shut down.
    Closed,
}

/// One producer thread's stage on one shard (see the module doc).
#[derive(Debug)]
pub struct Stage {
    state: AtomicU32,
    /// Timers staged: a hint, written by whoever holds the stage, for the reaper's look
    /// before it parks.
    len: AtomicU32,
    /// The earliest deadline staged (nanoseconds since the start; `u64::MAX` if none): a
    /// hint as `len`, never later than any timer staged.
    min: AtomicU64,
    /// The owner let go (its thread exited): the reaper collects the stage and forgets it.
    gone: AtomicBool,
    /// The owner's timers scheduled and cancelled on the stage's shard, counted by the
    /// owner alone, with a load and a store: no read-modify-write on a shared line.
    scheduled: AtomicU64,
    cancelled: AtomicU64,
    held: UnsafeCell<Held>,
}

/// A stage's contents, touched only by whoever holds the stage.
// SAFETY: the contents in the cell are touched only by the stage's holder, one thread at a
// time under the state word's Acquire and Release (see `with`); the rest is atomic.
unsafe impl Sync for Stage {}

#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Slots of the timers staged. While a slot is here its `link` holds its place.
    pub(crate) staged: Vec<u32>,
    /// Free slots for the owner to take first.
    pub(crate) free: Vec<u32>,
}

impl Default for Stage {
    fn default() -> Self {
        Stage::new()
    }
}

impl Stage {
    pub(crate) fn new() -> Self {
        Stage {
            state: AtomicU32::new(IDLE),
            len: AtomicU32::new(0),
            min: AtomicU64::new(u64::MAX),
            gone: AtomicBool::new(false),
            scheduled: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            // Empty until used: a thread that schedules a few timers keeps a few bytes.
            held: UnsafeCell::new(Held::default()),
        }
    }

    /// The owner takes the stage; false if the reaper holds it or it is closed (the owner
    /// then hands its timer over directly).
    pub(crate) fn try_own(&self) -> bool {
        // Acquire: sees what the last holder did with the contents (its Release below).
        self.state
            .compare_exchange(IDLE, OWNER, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The owner gives the stage back; false if the reaper asked for its timers meanwhile:
    /// the owner then hands them over and calls `release`.
    pub(crate) fn leave(&self) -> bool {
        // Release: publishes the contents to the next holder's Acquire.
        self.state
            .compare_exchange(OWNER, IDLE, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// The holder (an owner asked to collect, or the reaper) gives the stage back.
    pub(crate) fn release(&self) {
        // Release: as in `leave`.
        self.state.store(IDLE, Ordering::Release);
    }

    /// The reaper comes to collect: takes the stage, or asks its owner to hand it over.
    pub(crate) fn try_take(&self) -> Take {
        // Relaxed: a first guess, which the CASes check.
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            let (from, to, outcome) = match state {
                IDLE => (IDLE, REAPER, Take::Taken),
                OWNER => (OWNER, OWNER | COLLECT, Take::Asked),
                CLOSED => return Take::Closed,
                _ => return Take::Asked, // already asked
            };
            // Acquire (to take it): sees what the owner did inside, as in `try_own`. The
            // request needs no ordering: the owner's hand-over is ordered by the registry.
            match self
                .state
                .compare_exchange(from, to, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return outcome,
                Err(seen) => state = seen,
            }
        }
    }

    /// Whether the reaper asked the owner, inside, to hand its timers over: the owner then
    /// hands them over and wakes the reaper as a push does.
    pub(crate) fn is_asked(&self) -> bool {
        // Relaxed: read in the reaper's last look, which the park handshake's fence orders.
        self.state.load(Ordering::Relaxed) & COLLECT != 0
    }

    /// The reaper, holding the stage, closes it for good: no owner takes it again.
    pub(crate) fn close(&self) {
        // Release: an owner that fails to take it goes straight to the inbox, which is
        // itself about to close; nothing else to publish, but it costs nothing here.
        self.state.store(CLOSED, Ordering::Release);
    }

    /// Whether the stage was closed (its shard shut down).
    pub(crate) fn is_closed(&self) -> bool {
        // Relaxed: only for forgetting stages of timers that are gone.
        self.state.load(Ordering::Relaxed) == CLOSED
    }

    /// Runs `f` on the contents.
    ///
    /// # Safety
    ///
    /// The caller holds the stage: `try_own` or `try_take` gave it to it, and it has not
    /// left, released or closed it since.
    pub(crate) unsafe fn with<R>(&self, f: impl FnOnce(&mut Held) -> R) -> R {
        // SAFETY: whoever holds the stage is the only one that touches its contents, and
        // the state word's Acquire and Release order one holder's accesses after the last
        // one's (see the module doc).
        self.held.with_mut(|held| f(unsafe { &mut *held }))
    }

    /// The holder records how many timers are staged and the earliest deadline among
    /// them (or, with `len` 0, none).
    pub(crate) fn set_hints(&self, len: usize, min: u64) {
        // Relaxed: hints for the reaper's look, which the SeqCst fences of the park
        // handshake order (see the module doc).
        self.len.store(len as u32, Ordering::Relaxed);
        self.min
            .store(if len == 0 { u64::MAX } else { min }, Ordering::Relaxed);
    }

    /// The earliest deadline staged, as last recorded; `None` if nothing is staged.
    pub(crate) fn min(&self) -> Option<u64> {
        // Relaxed: as in `set_hints`.
        (self.len.load(Ordering::Relaxed) != 0).then(|| self.min.load(Ordering::Relaxed))
    }

    /// The owner counts a timer it scheduled on the stage's shard. Owner only.
    pub(crate) fn count_scheduled(&self) {
        bump(&self.scheduled);
    }

    /// The owner counts a timer it cancelled on the stage's shard. Owner only.
    pub(crate) fn count_cancelled(&self) {
        bump(&self.cancelled);
    }

    /// The owner's timers scheduled and cancelled so far (final once it let go).
    pub(crate) fn counts(&self) -> (u64, u64) {
        // Relaxed: counts; `is_gone`'s Acquire makes a gone owner's final.
        (
            self.scheduled.load(Ordering::Relaxed),
            self.cancelled.load(Ordering::Relaxed),
        )
    }

    /// The owner lets go of the stage for good (its thread exits).
    pub fn let_go(&self) {
        // Release: the owner's last stores to the hints come before the reaper's look.
        self.gone.store(true, Ordering::Release);
    }

    /// Whether the owner let go.
    pub(crate) fn is_gone(&self) -> bool {
        // Acquire: pairs with `let_go`.
        self.gone.load(Ordering::Acquire)
    }
}

/// Adds one to a count only one thread writes: a load and a store, which cost a fraction
/// of a read-modify-write.
fn bump(count: &AtomicU64) {
    // Relaxed: a count; its one writer reads its own last store.
    count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_owner_and_the_reaper_never_hold_a_stage_together() {
        let stage = Stage::new();
        assert!(stage.try_own());
        assert!(!stage.try_own(), "one owner at a time");
        assert_eq!(stage.try_take(), Take::Asked, "the reaper asks");
        assert_eq!(stage.try_take(), Take::Asked, "and asks once");
        assert!(!stage.leave(), "the owner hands over on its way out");
        stage.release();
        assert_eq!(stage.try_take(), Take::Taken);
        assert!(!stage.try_own(), "the reaper holds it");
        stage.release();
        assert!(stage.try_own());
        assert!(stage.leave());
        assert_eq!(stage.try_take(), Take::Taken);
        stage.close();
        assert!(stage.is_closed());
        assert!(!stage.try_own(), "closed for good");
        assert_eq!(stage.try_take(), Take::Closed);
    }

    #[test]
    fn the_hints_say_nothing_is_staged_once_it_is_empty() {
        let stage = Stage::new();
        assert_eq!(stage.min(), None);
        stage.set_hints(2, 70);
        assert_eq!(stage.min(), Some(70));
        stage.set_hints(0, 70);
        assert_eq!(stage.min(), None);
    }
}
