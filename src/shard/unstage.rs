//! The owner's cancels of its own staged timers: a timer still in the calling thread's
//! stage is taken out of it, its payload handed back to drop (for a sleep letting go, its
//! waker, see `Sleep::let_go`), and its slot kept for the owner's next
//! timer, with no shared line written and the reaper never told. The stage is held for
//! this as for staging (see `stage`); a timer another thread cancelled or reset, or one
//! already handed over, is left to the usual path (see `cancel_from`).

use super::{Cancelled, Shard};
use crate::slots::{self, CANCELLED, PENDING, Pin, QUEUED, RESETTING, STAGED, Slot, Slots};
use crate::stage::{FREE_LEN, Held, Stage};
use crate::sync::Ordering;
use std::mem::ManuallyDrop;

impl<T> Shard<T> {
    /// The owner cancelled the timer of generation `generation` in slot `index` while it
    /// was staged: if it is still in `stage`, takes it out, and its slot for the owner's
    /// next timer; returns the payload to drop.
    #[inline]
    pub(super) fn reclaim(&self, stage: &Stage, index: u32, slot: Slot<'_, T>) -> Option<T> {
        self.holding(stage, |held| self.unstage(held, index, slot))
    }

    /// Runs `work` on the contents of `stage`, the calling thread's own, with the stage
    /// held; `None` (and nothing done) if the reaper holds it or it is closed.
    #[inline]
    fn holding<R>(&self, stage: &Stage, work: impl FnOnce(&mut Held) -> Option<R>) -> Option<R> {
        if !stage.try_own() {
            return None;
        }
        // SAFETY: taken just above.
        let result = unsafe { stage.with(work) };
        self.leave(stage);
        result
    }

    /// The owner's cancel of the timer of generation `generation` in slot `index` if it
    /// still waits in `stage`, the calling thread's own, untouched (no reset, no cancel):
    /// takes it out and returns its payload, unrun and never seen by a reaper. `None`, and
    /// nothing done, otherwise. (A sleep that lets go of its timer so gets its own waker
    /// back, see `Sleep::let_go`.)
    ///
    /// No compare-and-swap, unlike a cancel (`cancel_owned`): the state word is read, and
    /// the slot renewed with a plain store. With the handle the caller's alone, nothing else
    /// writes the word of a slot staged in the stage the caller holds: the reaper only
    /// takes a stage its owner is out of (the handshake of `stage`), and a cancel or reset
    /// from another thread would need the handle.
    ///
    /// # Safety
    ///
    /// No other thread holds the handle (`index`, `generation`): none can cancel or reset
    /// the timer while this runs.
    #[inline]
    pub unsafe fn take_staged(&self, stage: &Stage, index: u32, generation: u32) -> Option<T> {
        self.holding(stage, |held| {
            let slot = self.kept_slot(held, index)?;
            // The word read there decides: it was written by this thread when it staged
            // the timer, or since through the handle, whose holder is the caller (a write
            // made on another thread, by a sleep polled there, happens before the caller
            // has the sleep again); no other thread writes it while it is staged here (the
            // caller's contract). Any other word (another generation, a reset's flags)
            // leaves it to the usual path.
            let place = Self::pending_place(held, index, slot, generation)?;
            self.count_cancelled(Some(stage));
            let payload = self.unstage_cancelled(held, index, slot, place, generation);
            Some(ManuallyDrop::into_inner(payload))
        })
    }

    /// Where slot `index` waits in the stage whose contents are `held`, held by the caller,
    /// if it holds a pending timer of generation `generation` with no other flag; `None`
    /// otherwise. The state word first, which a cancel reads in any case: a timer handed
    /// over (with a million pending, nearly every one a cancel finds) fails here, before
    /// its `link`, which lies in another cache line (the chunk's array of links), is read.
    /// Looked at first, the place cost W1 at a million pending a second cache miss a
    /// cancel: 3.2-3.4x tokio's timers before, 1.8-2.1x after.
    #[inline]
    fn pending_place(held: &Held, index: u32, slot: Slot<'_, T>, generation: u32) -> Option<usize> {
        // Relaxed: what the word tells each caller, and why it may rely on it, is said
        // there (`take_staged`, `take_staged_slot`).
        if slot.state.load(Ordering::Relaxed) != slots::word(generation, PENDING) | STAGED {
            return None;
        }
        Self::staged_place(held, index, slot)
    }

    /// Where slot `index` waits in the stage whose contents are `held`, held by the caller;
    /// `None` if it is not staged there. Its `link` holds its place, written by this
    /// thread when it staged it; for a slot not staged here, whatever the link holds fails
    /// the check: a slot is in one stage at most, only the owner puts it there, and it is
    /// not staging now.
    #[inline]
    fn staged_place(held: &Held, index: u32, slot: Slot<'_, T>) -> Option<usize> {
        // Relaxed: as said.
        let place = slot.link.load(Ordering::Relaxed) as usize;
        (held.staged.get(place).map(|staged| staged.index) == Some(index)).then_some(place)
    }

    /// The owner's cancel (`cancel_owned`) of the timer of generation `generation` in slot
    /// `index`, looked up, if it waits in `stage`, the calling thread's own, untouched by
    /// any other thread; the payload as `unstage_cancelled` hands it.
    #[inline]
    fn take_staged_slot(
        &self,
        stage: &Stage,
        held: &mut Held,
        index: u32,
        slot: Slot<'_, T>,
        generation: u32,
    ) -> Option<ManuallyDrop<T>> {
        // The word read there is a look: the CAS below decides.
        let place = Self::pending_place(held, index, slot, generation)?;
        // AcqRel on success, Relaxed on failure: as `cancel_pending`'s CAS, from the one
        // word of a pending staged timer of this generation with no other flag.
        slot.state
            .compare_exchange(
                slots::word(generation, PENDING) | STAGED,
                slots::word(generation, CANCELLED) | STAGED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .ok()?;
        self.count_cancelled(Some(stage));
        // The CAS checked what `unstage` would: its place above, and the word it left,
        // `CANCELLED` and `STAGED` with no change or reset, which no other thread changes
        // now (a cancel or reset acts on a pending timer only).
        Some(self.unstage_cancelled(held, index, slot, place, generation))
    }

    /// The owner's cancel of the timer of generation `generation` in slot `index`, with its
    /// stage held, if the stage has a slot in the same chunk: that chunk is not given back
    /// meanwhile (see `Chunks`), so the slot is looked at without a pin, and a timer still
    /// staged is taken out of the stage in the same go. `None` (and nothing done)
    /// otherwise: `cancel_from` goes the pinned way.
    #[inline]
    pub(super) fn cancel_owned(&self, stage: &Stage, index: u32, generation: u32) -> Option<bool> {
        if !stage.try_own() {
            return None;
        }
        // SAFETY: taken just above.
        let Some(slot) = (unsafe { stage.with(|held| self.kept_slot(held, index)) }) else {
            self.leave(stage);
            return None;
        };
        // The common case first: a timer still staged here, untouched by any other thread,
        // is taken out with one CAS, its checks made once (see `take_staged`).
        // SAFETY: taken above.
        let taken = unsafe {
            stage.with(|held| self.take_staged_slot(stage, held, index, slot, generation))
        };
        if let Some(payload) = taken {
            self.leave(stage);
            self.discard(ManuallyDrop::into_inner(payload));
            return Some(true);
        }
        let payload = match self.cancel_pending(slot, index, generation, Some(stage), true) {
            Cancelled::Not => {
                self.leave(stage);
                return Some(false);
            }
            Cancelled::Done(payload) => payload,
            // SAFETY: taken above. `None` if the timer is staged in another thread's stage,
            // whose holder frees it.
            Cancelled::Staged => unsafe { stage.with(|held| self.unstage(held, index, slot)) },
        };
        self.leave(stage);
        if let Some(payload) = payload {
            self.discard(payload);
        }
        Some(true)
    }

    /// Slot `index`, looked at without a pin, if it lies in a chunk the shard never gives
    /// back, or the stage whose contents are `held` (held by the caller) has a slot in its
    /// chunk: no chunk the stage has a slot of is given back while the stage is held (see
    /// `Chunks`).
    #[inline]
    fn kept_slot(&self, held: &Held, index: u32) -> Option<Slot<'_, T>> {
        // SAFETY: a chunk the shard never gives back lives as long as the shard; and the
        // stage, held, keeps a chunk it has a slot in.
        (Pin::NONE.covers(index) || held.chunks.has(index))
            .then(|| unsafe { self.slots.owned(index) })
            .flatten()
    }

    /// `reclaim`'s work on the contents `held` of `stage`, held by its owner: takes the
    /// payload of staged slot `index` if it was cancelled, and frees the slot into the
    /// stage's free slots (or the shard's, if those are full), if no change and no reset
    /// holds it; `None` (and nothing done) otherwise. (A staged timer cancelled by another
    /// thread the reaper frees when it takes it in.)
    #[inline]
    fn unstage(&self, held: &mut Held, index: u32, slot: Slot<'_, T>) -> Option<T> {
        let place = Self::staged_place(held, index, slot)?;
        // Acquire: pairs with the reaper's Release as it clears `QUEUED`, after its last
        // read of the slot's `change_link`, which a later timer in the slot may write.
        let word = slot.state.load(Ordering::Acquire);
        let (generation, state) = slots::split(word);
        if state != CANCELLED || word & (QUEUED | RESETTING) != 0 {
            return None;
        }
        debug_assert_ne!(word & STAGED, 0, "only the stage's holder unstages");
        let payload = self.unstage_cancelled(held, index, slot, place, generation);
        Some(ManuallyDrop::into_inner(payload))
    }

    /// `unstage`'s work once checked: slot `index` of generation `generation` is at
    /// `place` in the stage whose contents are `held`, cancelled, with no change or reset
    /// on it. Takes its payload and frees the slot as `unstage` says.
    ///
    /// The payload comes back in a `ManuallyDrop`, which the owner's cancel keeps until it
    /// has left the stage: a payload to be dropped, were leaving to unwind, was copied to
    /// the stack and back on every cancel (leaving allocates only to hand a full stage
    /// over; a payload would be leaked, not dropped twice, were that to fail).
    #[inline(always)]
    fn unstage_cancelled(
        &self,
        held: &mut Held,
        index: u32,
        slot: Slot<'_, T>,
        place: usize,
        generation: u32,
    ) -> ManuallyDrop<T> {
        // Out of the stage first: where nothing comes between (a sleep's `take_staged`),
        // the length `staged_place` checked `place` against is the one the removal
        // checks, and the check folds (after the pushes below it was loaded and compared
        // again); the payload is taken after it, so that it is not held across it.
        held.staged.swap_remove(place);
        if let Some(moved) = held.staged.get(place) {
            // SAFETY: the moved timer is staged in the stage the caller holds.
            unsafe { moved.set_place(place) };
        }
        // SAFETY: the slot was staged here, so no reaper has seen it, and it is cancelled
        // with no change or reset on it (the caller checked): nobody else takes its
        // payload or touches it.
        let payload = ManuallyDrop::new(unsafe { slot.take_payload() });
        let kept = if held.free.len() < FREE_LEN {
            // False if retired: its generation would wrap.
            Slots::renew(slot, generation)
        } else {
            self.release_now(index, slot, generation);
            false
        };
        if kept {
            held.free.push((index, slot.raw()));
        } else {
            held.chunks.gave(index);
        }
        // The stage's earliest deadline stays, even if the stage is now empty (see
        // `Stage::min`).
        payload
    }
}
