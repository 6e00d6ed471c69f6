//! The free stacks: free slots kept in batches, each taken or pushed with one CAS.
//!
//! A batch is a chain of free slots through their `link`, ending in `NIL`. A stack (the
//! free stack, or the spare stack of a shrink) is a Treiber stack of batches: its head
//! names the first slot of the top batch, and the first slot of each batch keeps the first
//! slot of the batch below it in its `deadline` field (a free slot has no deadline). The
//! head carries a tag that changes on every take and push, so a thread whose take raced
//! with another take and a push of the same slot fails its CAS instead of corrupting the
//! stack (the ABA problem).
//!
//! Why batches: the reaper frees slots by the thousand a pass and pushes them as one batch;
//! a producer with a stage (see `stage`) takes a whole batch into it with one CAS and pops
//! it there with plain loads. A stack of single slots made every schedule a CAS on the
//! head, and the load of the popped slot's `link` sat between that CAS and the one before
//! it, so the slot's cache line (written by the reaper, on its core) was fetched on the
//! schedule's critical path; in its stage the producer knows its next slot a whole
//! schedule ahead, and prefetches it (`Slots::prefetch`). A producer without its stage
//! takes a batch, keeps its first slot and pushes the rest back: two CASes, on a rare path.
//! A stage's batch goes back whole, with one CAS, when its holder gives its free slots
//! back (its thread exited, or a shrink wants them). A batch the reaper frees holds
//! `BATCH_LEN` slots at most, so that one thread does not take a whole pass's worth while
//! the others claim new slots. The rest of a batch taken off the spare stack goes back
//! there; if the shrink ended meanwhile, the next one takes it in (`begin_shrink`).

use super::{Freed, Pin, Slot, Slots};
use crate::slab::NIL;
use crate::sync::{AtomicU64, Ordering};

/// A stack's head: a tag in the high half, a slot index (or `NIL`) in the low half.
pub(super) fn head(tag: u32, index: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(index)
}

impl<T> Slots<T> {
    /// Takes a free slot for a producer, which then owns it until it publishes it. Returns
    /// its index and the slot, or `None` when all the slots its limit allows are in use
    /// (`MAX_SLOTS`, or fewer: `with_limit`). A slot of the free stack, or else of the
    /// spare stack (a shrink under way), or else a new one.
    pub(crate) fn take(&self) -> Option<(u32, Slot<'_, T>)> {
        for stack in [&self.free, &self.spare] {
            if let Some(index) = self.take_batch(stack) {
                // SAFETY: the batch was taken, so its slots are the caller's, which keeps
                // their chunk (see `owned`).
                let slot = unsafe { self.owned(index) }.expect("free slots are installed");
                // Relaxed: the caller's slot; its link was published with the batch.
                let rest = slot.link.load(Ordering::Relaxed);
                self.push_batch(stack, rest);
                return Some((index, slot));
            }
        }
        self.claim()
    }

    /// Takes a batch of free slots for a producer's stage: the first slot of a chain
    /// through their `link`, ending in `NIL`, all of them the caller's from here on; `None`
    /// if the free and spare stacks are empty.
    pub(crate) fn take_chain(&self) -> Option<u32> {
        self.take_batch(&self.free)
            .or_else(|| self.take_batch(&self.spare))
    }

    /// Gives back the chain of free slots from `first` that a stage kept (see
    /// `take_chain`): onto the spare stack while a shrink is under way, for it to sort, or
    /// else onto the free stack. The reaper only.
    pub(crate) fn give_chain(&self, first: u32, freed: &Freed) {
        let stack = if freed.is_shrinking() {
            &self.spare
        } else {
            &self.free
        };
        self.push_batch(stack, first);
    }

    /// Takes the top batch off `stack`, if it holds one: returns its first slot.
    ///
    /// The head's `deadline` (the batch below) is read before the CAS that decides whether
    /// the batch was still there, and by then another thread may have taken it and the
    /// reaper given its chunk back: a pin keeps that memory alive (and the CAS fails). It
    /// pins only for a slot of a chunk that may be given back.
    pub(super) fn take_batch(&self, stack: &AtomicU64) -> Option<u32> {
        let mut pin = Pin::NONE;
        // Acquire: pairs with the Release of the push (or of the reaper's move to the
        // spare stack), so the batch's links and the states it was freed with are visible.
        let mut current = stack.load(Ordering::Acquire);
        loop {
            let (tag, index) = ((current >> 32) as u32, current as u32);
            if index == NIL {
                return None;
            }
            pin.cover(index);
            let Some(slot) = self.get(index, &pin) else {
                // The batch was taken and its chunk given back since the head was read, so
                // the head has moved on (the cleared pointer was published after the slot
                // left the stack): read it with an RMW, which sees the latest value (a load
                // might see this one again).
                current = match stack.compare_exchange(
                    current,
                    current,
                    Ordering::Acquire,
                    Ordering::Acquire,
                ) {
                    Ok(seen) | Err(seen) => seen,
                };
                continue;
            };
            // Relaxed: if the batch was taken and the slot pushed again meanwhile, the tag
            // differs and the CAS below fails, whatever this read returned (a deadline of a
            // timer in the slot, say).
            let below = slot.deadline.load(Ordering::Relaxed) as u32;
            // Relaxed on success: the head it replaces was read with Acquire (each read of
            // `current` is), and every write of a head is a read-modify-write, so that read
            // synchronised with every push before it (their release sequences run through
            // the takes between); the tag makes the value unique, so the CAS that finds it
            // changes nothing that read did not see. Acquire on failure: the new head is
            // read as the first one was.
            match stack.compare_exchange_weak(
                current,
                head(tag.wrapping_add(1), below),
                Ordering::Relaxed,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(index),
                Err(seen) => current = seen,
            }
        }
    }

    /// Pushes the batch of free slots from `first` (chained through `link`, ending in
    /// `NIL`, all of them the caller's) on `stack` with one CAS; nothing if `first` is
    /// `NIL`.
    pub(super) fn push_batch(&self, stack: &AtomicU64, first: u32) {
        if first == NIL {
            return;
        }
        // SAFETY: the batch's slots are free and the caller's, which keeps their chunk.
        let slot = unsafe { self.owned(first) }.expect("free slots are installed");
        let mut current = stack.load(Ordering::Relaxed);
        loop {
            let (tag, top) = ((current >> 32) as u32, current as u32);
            // Relaxed: published by the CAS below.
            slot.deadline.store(u64::from(top), Ordering::Relaxed);
            // Release: publishes the batch's links and FREE states, and what the pusher
            // did with the payloads, to the threads that take it.
            match stack.compare_exchange_weak(
                current,
                head(tag.wrapping_add(1), first),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// Pushes the slots chained on `freed` on the free stack as one batch: the reaper
    /// frees many slots a pass.
    pub(crate) fn recycle(&self, freed: &mut Freed) {
        self.push_batch(&self.free, std::mem::take(&mut freed.chain).first);
    }

    /// Chains free slot `index` on `chain`, pushing the chain on the free stack once it
    /// holds `BATCH_LEN` slots: a stage takes a whole batch, so a pass that frees a
    /// hundred thousand slots must not make one, or one thread would take them all while
    /// the others claim new slots.
    pub(super) fn chain(&self, chain: &mut Chain, index: u32, slot: Slot<'_, T>) {
        chain.push(index, slot);
        if chain.len == BATCH_LEN {
            self.push_batch(&self.free, std::mem::take(chain).first);
        }
    }
}

/// The most slots a batch the reaper frees holds (2 under loom, so that a model of a few
/// slots makes more than one).
const BATCH_LEN: u32 = if cfg!(loom) { 2 } else { 1024 };

/// A chain of free slots through their `link`, ending in `NIL`: a batch in the making.
#[derive(Debug, Clone, Copy)]
pub(super) struct Chain {
    pub(super) first: u32,
    len: u32,
}

impl Chain {
    pub(super) const EMPTY: Chain = Chain { first: NIL, len: 0 };

    pub(super) fn push<T>(&mut self, index: u32, slot: Slot<'_, T>) {
        // Relaxed: published by the push on a stack, a Release CAS.
        slot.link.store(self.first, Ordering::Relaxed);
        self.first = index;
        self.len += 1;
    }
}

impl Default for Chain {
    fn default() -> Self {
        Chain::EMPTY
    }
}
