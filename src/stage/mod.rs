//! A producer thread's stage on one shard: where its new timers wait to be handed to the
//! reaper in a batch, where the slots of the timers it cancelled before they were handed
//! over wait to be taken again, by the same thread, without crossing to the reaper, where
//! its cancels of timers already handed over wait to go to the reaper in a batch too, and
//! where it keeps the batch of free slots it took from the shard (see `slots::free`).
//!
//! Most timers are cancelled soon after they are made (a request answered in time). Handed
//! over one by one, each costs a compare-and-swap on the shard's inbox and another on its
//! free stack, and a trip of its slot's cache line to the reaper's core and back. Staged,
//! a timer cancelled while it still waits here is taken out and its slot reused in place:
//! no shared cache line is written, and the reaper never hears of it. Those that stay are
//! handed over as one batch when the stage fills (`STAGE_LEN`). A cancel of a timer
//! already handed over marks its slot cancelled (the one line it must touch: the cancel
//! decides against the firing there) and keeps the slot's number here, rather than
//! linking the slot onto the shard's list of changes: with a million timers pending, the
//! link was a second word a cancel wrote, beside the state, and a compare-and-swap on a
//! line the reaper takes back each pass. The cancels go over with the timers, or when
//! `STAGE_LEN` of them wait, and the reaper collects a stage that holds some once a tidy
//! interval (if its owner is out then: it does not ask for them, which would make the
//! owner hand over its timers too), and at every pass of a manual timer.
//!
//! Who may touch the stage's contents is settled by two words, each written by one side
//! only: the owner's says whether it is inside (and which of the reaper's requests it has
//! answered), the reaper's whether it holds the stage, whether the stage is closed, and
//! how many times it asked the owner for its timers.
//!
//! ```text
//!   owner enters:  owner = INSIDE; light fence; reaper holds it? -> owner = out, go direct
//!   reaper takes:  reaper = HOLD;  heavy fence; owner inside?    -> reaper = ASK (+1)
//!   owner leaves:  owner = out; light fence; asked? enter again, hand over, answer, leave
//! ```
//!
//! Each pair is Dekker's handshake (each side stores its word, fences, loads the other's),
//! so the owner and the reaper never both find the other out: one of them backs off. The
//! owner's side is on every schedule and cancel and the reaper's a few times a second, so
//! the fences are asymmetric (`barrier`): the owner's costs the compiler's ordering, the
//! reaper's a `membarrier` call; and neither side writes a line with a locked
//! instruction. The reaper that finds the owner inside asks it, by counting one more
//! request, to hand what it staged over as it leaves, and the owner, answering, records
//! the count it answered. Neither side ever waits for the other, except the shutdown's
//! last collection, which waits for the owner to leave.
//!
//! No staged timer is late for being staged: the owner stages a timer only if it is due no
//! earlier than the reaper's planned wake-up, and hands it over at once otherwise; the
//! reaper, each pass, collects the stages holding a timer due before its next wake-up, and
//! before it parks it looks at the stages once more. The two sides close the race as the
//! inbox does (`wakeup`): the owner stages, issues a SeqCst fence and reads the plan; the
//! reaper stores the plan, issues a SeqCst fence and reads the stages' `min`. The owner
//! does so only for a new earliest deadline (`min`): `min` is the earliest staged since the
//! stage was last emptied by a hand-over or a collection, and stays when the owner takes
//! timers back, so every plan the reaper makes after the owner's fence wakes for it, and
//! the collection then takes whatever the stage holds by that time.
//! A thread that exits leaves its stage to the reaper, which collects it and forgets it
//! (`let_go`): the plan already covers its timers, and the tidy interval its cancels.
//!
//! The owner's steps are `#[inline]`, as are the few-instruction helpers they use elsewhere
//! (`barrier::light`, `Wakeup::plans_past`, `Pin::for_slot`): a shard is generic over its
//! payload, so its schedule and cancel are compiled in the user's crate, where a call to a
//! function of this crate not marked so is never inlined (and its call costs more than
//! its body).

use crate::barrier;
use crate::slab::NIL;
use crate::slots::{CHUNKS, RawSlot, chunk_of};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering, UnsafeCell};

mod staged;
pub(crate) use staged::Staged;

/// Timers a stage holds before its owner hands them over (2 under loom, so that a model
/// of a few timers fills it).
pub(crate) const STAGE_LEN: usize = if cfg!(loom) { 2 } else { 4096 };
/// Free slots a stage keeps for its owner to reuse.
pub(crate) const FREE_LEN: usize = STAGE_LEN;

/// In the owner's word: the owner is inside. The rest of the word is the count of the
/// reaper's requests it answered, shifted by one.
const INSIDE: u32 = 1;
/// In the reaper's word: the reaper holds the stage.
const HOLD: u32 = 1;
/// In the reaper's word: shut down, nobody stages here again.
const CLOSED: u32 = 2;
/// In the reaper's word: one request for the owner's timers, counted above the two flags.
const ASK: u32 = 4;

/// The count of requests in a word of the reaper's (`ASK`s) or of the owner's (answered).
fn asks(reaper: u32) -> u32 {
    reaper / ASK
}

fn answered(owner: u32) -> u32 {
    owner >> 1
}

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

/// What the owner found as it left its stage (see `Stage::leave`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Leave {
    /// Out.
    Left,
    /// Out, with a request of the reaper's for the timers unanswered: the owner enters
    /// again to hand them over.
    Asked,
}

/// One producer thread's stage on one shard (see the module doc).
#[derive(Debug)]
pub struct Stage {
    /// The owner's word: `INSIDE`, and the requests answered (see the module doc).
    owner: AtomicU32,
    /// The reaper's word: `HOLD`, `CLOSED`, and the requests made.
    reaper: AtomicU32,
    /// The earliest deadline staged since the stage was last emptied by a hand-over or a
    /// collection (nanoseconds since the start; `u64::MAX` if none): a hint, written by
    /// whoever holds the stage, for the reaper's plan and its look before it parks; never
    /// later than any timer staged, and kept when the owner takes its timers back (see
    /// `min`).
    min: AtomicU64,
    /// Cancels wait in the stage: a hint as `min`.
    cancels: AtomicBool,
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
// time under the two words' handshake and their Acquire and Release (see `with`); the rest
// is atomic. The handshake's exclusion rests on its fences pairing as two SeqCst fences:
// with the asymmetric pair, on the kernel's guarantee that `membarrier` fenced every
// running thread before it returned (see `barrier`); where the kernel refuses it, `heavy`
// says so and the reaper takes no stage on the strength of it (`settle`).
unsafe impl Sync for Stage {}

#[derive(Debug)]
pub(crate) struct Held {
    /// The timers staged. While a slot is here its `link` holds its place.
    pub(crate) staged: Vec<Staged>,
    /// Slots of timers handed over that the owner cancelled, for the reaper to free: each
    /// `CANCELLED` and `QUEUED` (its change is on its way).
    pub(crate) cancels: Vec<u32>,
    /// Free slots for the owner to take first, with their addresses.
    pub(crate) free: Vec<(u32, RawSlot)>,
    /// Then a batch of free slots taken from the shard with one CAS (see
    /// `slots::free`): the first of a chain through their `link`, `NIL` if none.
    pub(crate) chain: u32,
    /// How many of the staged and the free slots lie in each chunk of the shard's slots
    /// (the chain's are counted as they are taken from it).
    pub(crate) chunks: Chunks,
}

impl Default for Held {
    fn default() -> Self {
        Held {
            staged: Vec::new(),
            cancels: Vec::new(),
            free: Vec::new(),
            chain: NIL,
            chunks: Chunks::default(),
        }
    }
}

/// How many of a stage's slots (staged and free) lie in each chunk of its shard's slots.
/// The reaper gives a chunk back only once it holds every slot the chunk handed out, so
/// while the stage is held, no chunk it has a slot of goes: its holder may look at any
/// slot there without pinning the epoch (the owner's cancel does, see
/// `Shard::cancel_owned`). Counted by whoever holds the stage as slots come from the shard
/// and leave to it.
#[derive(Debug, Default)]
pub(crate) struct Chunks([u32; CHUNKS]);

impl Chunks {
    /// Slot `index` came to the stage from the shard.
    #[inline]
    pub(crate) fn took(&mut self, index: u32) {
        self.0[chunk_of(index)] += 1;
    }

    /// Slot `index` left the stage.
    pub(crate) fn gave(&mut self, index: u32) {
        let slots = &mut self.0[chunk_of(index)];
        debug_assert_ne!(*slots, 0, "every slot of a stage was counted in");
        // Saturating: a count too low only costs a pin, one too high would be unsound.
        *slots = slots.saturating_sub(1);
    }

    /// Whether the stage has a slot in the chunk of slot `index` (any index).
    #[inline]
    pub(crate) fn has(&self, index: u32) -> bool {
        self.0.get(chunk_of(index)).is_some_and(|&slots| slots > 0)
    }
}

impl Default for Stage {
    fn default() -> Self {
        Stage::new()
    }
}

impl Stage {
    pub(crate) fn new() -> Self {
        Stage {
            owner: AtomicU32::new(0),
            reaper: AtomicU32::new(0),
            min: AtomicU64::new(u64::MAX),
            cancels: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            scheduled: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            // Empty until used: a thread that schedules a few timers keeps a few bytes.
            held: UnsafeCell::new(Held::default()),
        }
    }

    /// The owner takes the stage; false if the reaper holds it or it is closed (the owner
    /// then hands its timer over directly).
    #[inline]
    pub(crate) fn try_own(&self) -> bool {
        // Relaxed: the owner's own word.
        let out = self.owner.load(Ordering::Relaxed);
        debug_assert_eq!(out & INSIDE, 0, "the owner is not inside twice");
        self.owner.store(out | INSIDE, Ordering::Relaxed);
        // Dekker's handshake with `try_take` (see the module doc).
        barrier::light();
        // Acquire: sees what the reaper did with the contents before it let go (its
        // Release in `release`).
        if self.reaper.load(Ordering::Acquire) & (HOLD | CLOSED) != 0 {
            // Relaxed: the owner touched nothing.
            self.owner.store(out, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The owner, inside, answered the reaper's requests so far (it handed its timers over).
    pub(crate) fn answer(&self) {
        // Relaxed: as in `is_asked`.
        let asked = asks(self.reaper.load(Ordering::Relaxed));
        let inside = self.owner.load(Ordering::Relaxed) & INSIDE;
        self.owner.store(asked << 1 | inside, Ordering::Relaxed);
    }

    /// The owner gives the stage back; `Asked` if a request of the reaper's is unanswered
    /// (made while the owner was inside, or as it left): the owner then enters again to
    /// hand its timers over and `answer`, unless the reaper took the stage meanwhile.
    /// One look at the requests, after the fence: a request made before the owner left is
    /// seen there as well as one made as it left, and both are rare, so the owner's
    /// common leave saves a load and a compare that would find nothing.
    #[inline]
    pub(crate) fn leave(&self) -> Leave {
        // Relaxed: the owner's own word.
        let inside = self.owner.load(Ordering::Relaxed);
        // Release: publishes the contents to the reaper's Acquire in `settle`.
        self.owner.store(inside & !INSIDE, Ordering::Release);
        // Dekker's handshake with a request (see the module doc).
        barrier::light();
        // Relaxed: as in `is_asked`.
        if asks(self.reaper.load(Ordering::Relaxed)) != answered(inside) {
            Leave::Asked
        } else {
            Leave::Left
        }
    }

    /// The reaper gives the stage back.
    pub(crate) fn release(&self) {
        // Relaxed: the reaper's own word. Release: publishes the contents to the owner's
        // Acquire in `try_own`.
        let held = self.reaper.load(Ordering::Relaxed);
        debug_assert_ne!(held & HOLD, 0);
        self.reaper.store(held & !HOLD, Ordering::Release);
    }

    /// The reaper comes to collect: takes the stage, or asks its owner, inside, to hand it
    /// over. Two `membarrier` calls at most, three when the owner leaves meanwhile. (A
    /// reaper collecting many stages takes the steps below for them all at once, with one
    /// `membarrier` per step.)
    pub(crate) fn try_take(&self) -> Take {
        loop {
            if !self.mark_held() {
                return Take::Closed;
            }
            let fenced = barrier::heavy();
            if self.settle(true, fenced) == Take::Taken {
                return Take::Taken;
            }
            // Unfenced, the owner's word proves nothing either way: it hands over if it
            // is inside, and the reaper comes back (the fences are whole again soon).
            if !barrier::heavy() || !self.left_unasked() {
                return Take::Asked;
            }
        }
    }

    /// The reaper's first step to take the stage: marks it held (the owner's next
    /// `try_own` backs off). False if it is closed. A `barrier::heavy` and `settle` follow.
    pub(crate) fn mark_held(&self) -> bool {
        // Relaxed: the reaper's own word, published by the heavy fence that follows.
        let word = self.reaper.load(Ordering::Relaxed);
        if word & CLOSED != 0 {
            return false;
        }
        self.reaper.store(word | HOLD, Ordering::Relaxed);
        true
    }

    /// The reaper's second step, after `mark_held` and a `barrier::heavy` (Dekker's
    /// handshake with `try_own`), which says whether it `fenced` the owner: `Taken` if the
    /// owner is out; otherwise the reaper lets go of the mark and, if `ask`, asks the owner
    /// for its timers, unless a request is unanswered, and `Asked` says to follow with a
    /// `barrier::heavy` and `left_unasked`. Unfenced, an owner that looks out may be inside
    /// with its word still in its store buffer: the reaper does not take the stage, and
    /// asks as if the owner were inside (see `barrier`).
    /// (Without `ask`, `Asked` only says the reaper let go: it wanted the stage's cancels,
    /// which can wait for the next tidy interval rather than make the owner hand its
    /// timers over, see `Shard::collect_stages`.)
    pub(crate) fn settle(&self, ask: bool, fenced: bool) -> Take {
        // Acquire: sees what the owner did inside before it left (its Release in `leave`).
        let owner = self.owner.load(Ordering::Acquire);
        // A gone owner is out for good, and its last accesses come before `let_go`
        // (Release), which `is_gone` (Acquire) sees: no fence needed.
        if owner & INSIDE == 0 && (fenced || self.is_gone()) {
            return Take::Taken;
        }
        // Relaxed: the reaper's own word.
        let mut word = self.reaper.load(Ordering::Relaxed) & !HOLD;
        if ask && asks(word) == answered(owner) {
            word = word.wrapping_add(ASK);
        }
        self.reaper.store(word, Ordering::Relaxed);
        Take::Asked
    }

    /// The reaper's last step, after an `Asked` from `settle` and a `barrier::heavy`
    /// (Dekker's handshake with `leave`): whether the owner left meanwhile without seeing
    /// the request, so that the reaper must take the stage after all (`try_take`).
    pub(crate) fn left_unasked(&self) -> bool {
        // Relaxed: a look; taking the stage goes through `settle`'s Acquire.
        self.owner.load(Ordering::Relaxed) & INSIDE == 0
    }

    /// Whether the reaper asked the owner, inside, to hand its timers over, and it has not
    /// answered yet: the owner then hands them over (and wakes the reaper as a push does)
    /// and calls `answer`.
    pub(crate) fn is_asked(&self) -> bool {
        // Relaxed: the count carries no data (the hand-over is ordered by the registry);
        // the reaper reads it in its last look, which the park handshake's fence orders.
        asks(self.reaper.load(Ordering::Relaxed)) != answered(self.owner.load(Ordering::Relaxed))
    }

    /// The reaper, holding the stage, closes it for good: no owner takes it again.
    pub(crate) fn close(&self) {
        // Relaxed: the reaper's own word. Release: as in `release`.
        let held = self.reaper.load(Ordering::Relaxed);
        self.reaper.store(held & !HOLD | CLOSED, Ordering::Release);
    }

    /// Whether the stage was closed (its shard shut down).
    pub(crate) fn is_closed(&self) -> bool {
        // Relaxed: only for forgetting stages of timers that are gone.
        self.reaper.load(Ordering::Relaxed) & CLOSED != 0
    }

    /// Runs `f` on the contents.
    ///
    /// # Safety
    ///
    /// The caller holds the stage: `try_own` or `try_take` gave it to it, and it has not
    /// left, released or closed it since.
    pub(crate) unsafe fn with<R>(&self, f: impl FnOnce(&mut Held) -> R) -> R {
        // SAFETY: whoever holds the stage is the only one that touches its contents (the
        // handshake of the module doc: Dekker's, whose `light` and `heavy` fences order as
        // two SeqCst fences by the kernel's `membarrier` guarantee, or are SeqCst fences,
        // and a `heavy` that could not fence is never taken as one, see `barrier`), and the
        // words' Acquire and Release order one holder's accesses after the last one's.
        self.held.with_mut(|held| f(unsafe { &mut *held }))
    }

    /// The holder records a new earliest deadline staged. A timer due at `u64::MAX` (the
    /// end of time) is recorded one nanosecond early, as `u64::MAX` says "none".
    #[inline]
    pub(crate) fn set_min(&self, min: u64) {
        // Relaxed: a hint for the reaper's look, which the SeqCst fences of the park
        // handshake order (see the module doc).
        self.min.store(min.min(u64::MAX - 1), Ordering::Relaxed);
    }

    /// The holder emptied the stage by a hand-over or a collection: no earliest.
    pub(crate) fn clear_min(&self) {
        // Relaxed: as in `set_min`.
        self.min.store(u64::MAX, Ordering::Relaxed);
    }

    /// The earliest deadline staged since the stage was last handed over or collected, as
    /// last recorded; `None` if none was. Early at worst: it stays when the owner takes
    /// timers back, even the last one, so that the handshake its owner made for it (see
    /// the module doc) covers every later timer due no earlier, and the reaper, which
    /// plans to wake for it, collects the stage then (and so clears it).
    #[inline]
    pub(crate) fn min(&self) -> Option<u64> {
        // Relaxed: as in `set_min`.
        let min = self.min.load(Ordering::Relaxed);
        (min != u64::MAX).then_some(min)
    }

    /// The holder records whether cancels wait in the stage.
    pub(crate) fn set_cancels(&self, waiting: bool) {
        // Relaxed: as in `set_min`.
        self.cancels.store(waiting, Ordering::Relaxed);
    }

    /// Whether cancels wait in the stage, as last recorded.
    pub(crate) fn has_cancels(&self) -> bool {
        // Relaxed: as in `set_min`.
        self.cancels.load(Ordering::Relaxed)
    }

    /// The owner counts a timer it scheduled on the stage's shard. Owner only.
    #[inline]
    pub(crate) fn count_scheduled(&self) {
        bump(&self.scheduled);
    }

    /// The owner counts a timer it cancelled on the stage's shard. Owner only.
    #[inline]
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
#[inline]
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
        assert_eq!(stage.try_take(), Take::Asked, "the reaper asks");
        assert!(stage.is_asked());
        assert_eq!(stage.try_take(), Take::Asked, "and asks once");
        assert_eq!(asks(stage.reaper.load(Ordering::Relaxed)), 1);
        stage.answer();
        assert!(!stage.is_asked(), "the owner handed over");
        assert_eq!(stage.leave(), Leave::Left, "no request since");
        assert_eq!(stage.try_take(), Take::Taken);
        assert!(!stage.try_own(), "the reaper holds it");
        stage.release();
        assert!(stage.try_own());
        assert_eq!(stage.leave(), Leave::Left);
        assert_eq!(stage.try_take(), Take::Taken);
        stage.close();
        assert!(stage.is_closed());
        assert!(!stage.try_own(), "closed for good");
        assert_eq!(stage.try_take(), Take::Closed);
    }

    #[test]
    fn an_owner_asked_while_inside_sees_the_request_as_it_leaves_and_answers_inside() {
        let stage = Stage::new();
        assert!(stage.try_own());
        assert_eq!(stage.try_take(), Take::Asked);
        assert_eq!(stage.leave(), Leave::Asked, "out, the request unanswered");
        assert!(stage.try_own(), "enters again to hand over");
        assert_eq!(stage.try_take(), Take::Asked, "the owner is inside");
        stage.answer();
        assert_eq!(stage.leave(), Leave::Left);
        assert!(!stage.is_asked());
        assert_eq!(stage.try_take(), Take::Taken);
    }

    /// A reaper whose heavy fence fenced nobody (the kernel refused it) cannot tell an
    /// owner that is out from one whose entry still sits in its store buffer: it takes the
    /// stage only once its owner let go, and asks it otherwise.
    #[test]
    fn an_unfenced_reaper_takes_only_a_stage_whose_owner_let_go() {
        let stage = Stage::new();
        assert!(stage.mark_held());
        assert_eq!(
            stage.settle(true, false),
            Take::Asked,
            "looks out, proves nothing"
        );
        assert!(stage.is_asked(), "asked as if inside");
        assert!(
            stage.try_own(),
            "not held: the owner may come in, and answers"
        );
        stage.answer();
        assert_eq!(stage.leave(), Leave::Left);
        stage.let_go();
        assert!(stage.mark_held());
        assert_eq!(stage.settle(true, false), Take::Taken, "gone: out for good");
        stage.release();
        assert!(stage.mark_held());
        assert_eq!(stage.settle(true, true), Take::Taken);
    }

    #[test]
    fn the_earliest_deadline_is_recorded_until_cleared_and_the_end_of_time_a_hair_early() {
        let stage = Stage::new();
        assert_eq!(stage.min(), None);
        stage.set_min(70);
        assert_eq!(stage.min(), Some(70));
        stage.clear_min();
        assert_eq!(stage.min(), None, "handed over or collected");
        stage.set_min(u64::MAX);
        assert_eq!(
            stage.min(),
            Some(u64::MAX - 1),
            "the end of time, a hair early"
        );
    }

    #[test]
    fn a_stage_counts_its_slots_per_chunk() {
        let mut chunks = Chunks::default();
        // Slots 0 and 63 lie in the first chunk, 64 in the second, outside loom.
        chunks.took(0);
        chunks.took(64);
        assert!(chunks.has(63) && chunks.has(64) && chunks.has(191));
        assert!(!chunks.has(192), "the third chunk");
        chunks.gave(0);
        assert!(!chunks.has(63), "none left there");
        assert!(!chunks.has(u32::MAX), "past the last chunk");
    }
}
