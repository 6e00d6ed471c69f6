//! Giving memory back after a spike.
//!
//! When the timers pending drop below an eighth of the slots ever handed
//! out (`SHRINK_BELOW`), the reaper gives the top chunks back until what is left holds
//! four times the pending timers (`ROOM`, and at least `KEEP_CHUNKS` chunks). It moves
//! the whole free stack to a second one, the spare stack, and sorts that, at most
//! `SORT_BUDGET` slots or `SORT_TIME` a pass (and comes back every millisecond
//! meanwhile), so that no pass stalls the timers due: slots below the limit go back on the
//! free stack, the others it holds, and so it does with every slot it frees above the
//! limit from then on. Producers that find the free stack empty take from the spare one before
//! they claim a new slot, so a shrink never starves them into growing the slab (when the
//! reaper kept the unsorted slots to itself, churn faster than its sorting claimed new
//! slots, and memory grew while it was being given back). Once it holds every slot the top
//! chunk handed out, no thread can be using one (none is pending, none is on the stack),
//! so:
//! - it closes claims (`CLOSED`: a claim that came first moved the frontier and fails
//!   the CAS; later ones wait for the next two stores), clears the chunk's pointer and
//!   lowers the frontier to the chunk's start, so that claims install a fresh chunk;
//! - a fresh chunk's slots start at `floor`, a generation above any that a handle names
//!   in the chunk given back, so a stale handle never matches a new timer;
//! - the memory is freed through crossbeam-epoch: threads that look a slot up by index
//!   (`cancel` and `reset` with any handle, and taking a batch off a free stack) are pinned
//!   meanwhile, and the free waits until every thread pinned before the pointer was
//!   cleared has unpinned. Afterwards a stale handle finds no chunk, or a fresh one.
//!
//! If timers come back before the shrink is done (to more than half the room), the held
//! slots go back on the stack. Only the top chunk can go, so a timer that lives long in
//! a high chunk holds the chunks below it too until it fires or is cancelled.

use super::chunk::{CHUNKS, ChunkPtr, FIRST_CHUNK_BITS, first_index, free_chunk, locate};
use super::free::{self, Chain};
use super::{CLOSED, Freed, Slot, Slots, split};
use crate::slab::{self, NIL};
use crate::sync::Ordering;
use crate::sync::epoch;
use std::ptr;
use std::sync::Arc;

/// Chunks a shard keeps however few timers are pending (4,032 slots, 200 KB or so; one
/// chunk under loom, miri and the fuzzer, so that a model, test or fuzz case of a few
/// slots gets to shrink).
pub(super) const KEEP_CHUNKS: usize = if cfg!(any(loom, miri, fuzzing)) { 1 } else { 6 };
/// A shrink begins once the timers pending times this are fewer than the slots handed
/// out (1 under loom, as below, so that a model of a few slots gets there).
const SHRINK_BELOW: u32 = if cfg!(loom) { 1 } else { 8 };
/// A shrink keeps room for this many times the timers pending, and is given up if they
/// come back to more than half of that.
const ROOM: u32 = if cfg!(loom) { 1 } else { 4 };
/// Passes after a give-back in which the reaper moves the epoch on (and comes back 1 ms
/// later) until the chunks' memory is freed: a second at most.
const FLUSHES: u32 = 1_000;
/// Free slots the reaper sorts per pass while it gives memory back (fewer under miri, so
/// that its tests need few slots to take more than one pass)...
pub(super) const SORT_BUDGET: u32 = if cfg!(miri) { 64 } else { 16_384 };
/// ...and how long it may spend on them. A free stack left by a million fired timers is in
/// no order: each slot is a cache and TLB miss, some 200 ns, and 16,384 of them took 3 ms
/// a pass, every timer due then that much late (W2's p99 doubled). One left by a spike
/// cancelled in order is 20 times as fast.
#[cfg(not(loom))]
const SORT_TIME: std::time::Duration = std::time::Duration::from_micros(100);
impl<T> Slots<T> {
    /// Takes the whole free stack, for the reaper to sort; returns its first slot.
    fn take_free_stack(&self) -> u32 {
        let mut head = self.free.load(Ordering::Relaxed);
        loop {
            let tag = (head >> 32) as u32;
            // Acquire: pairs with the pushes' Release, so the links are visible.
            match self.free.compare_exchange_weak(
                head,
                free::head(tag.wrapping_add(1), NIL),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return head as u32,
                Err(current) => head = current,
            }
        }
    }

    /// The reaper's step at the end of each pass: gives memory back once `pending` drops
    /// far below the slots handed out (see "Giving memory back"). Returns whether there is
    /// more to do soon (free slots still to sort, or chunks whose memory is not yet freed).
    pub(crate) fn shrink(&self, freed: &mut Freed, pending: usize) -> bool {
        let pending = u32::try_from(pending).unwrap_or(u32::MAX);
        if freed.shrink.is_none() {
            self.begin_shrink(freed, pending);
        }
        if let Some(shrink) = &mut freed.shrink {
            if shrink.limit != u32::MAX && pending.saturating_mul(ROOM) / 2 > shrink.limit {
                // Timers came back: so do the slots held back.
                shrink.limit = u32::MAX;
                for held in &mut shrink.held {
                    self.push_batch(&self.free, std::mem::replace(held, Held::EMPTY).chain.first);
                }
            }
            self.sort(shrink, &mut freed.chain);
            self.push_batch(&self.free, std::mem::take(&mut freed.chain).first);
            while self.give_back_top(shrink) {
                freed.flushes = FLUSHES;
            }
            // Relaxed: as in `begin_shrink`.
            let frontier = self.claimed.load(Ordering::Relaxed) as u32;
            if self.spare_is_empty() && frontier <= shrink.limit {
                // Done; and if the timers pending fell further meanwhile (the shrink began
                // while cancels were still coming), the next one begins at once, or no
                // pass might come to begin it.
                freed.shrink = None;
                self.begin_shrink(freed, pending);
            }
        }
        // Relaxed: a count; the frees themselves are ordered by the epoch.
        let unfreed = self.unfreed.load(Ordering::Relaxed) > 0 && freed.flushes > 0;
        if unfreed {
            // Moves the epoch on, so that the frees deferred run as soon as no thread is
            // pinned from before them; otherwise they would wait for other threads' pins.
            // For `FLUSHES` passes at most: a thread of the application that stays pinned
            // (crossbeam's collector is the process's) must not keep the reaper waking;
            // the frees then run at some later pin of any thread.
            epoch::pin().flush();
            freed.flushes -= 1;
        }
        unfreed || (freed.shrink.is_some() && !self.spare_is_empty())
    }

    /// Whether the spare stack is empty (no shrink under way has slots left to sort).
    fn spare_is_empty(&self) -> bool {
        // Relaxed: a look. A producer's `take` may still push back the rest of a batch it
        // took from the stack (see `free`); those slots wait there for the next shrink,
        // which takes them in (`begin_shrink`), and producers take from the stack too.
        self.spare.load(Ordering::Relaxed) as u32 == NIL
    }

    /// Begins a shrink if `pending` timers are far fewer than the slots handed out: takes
    /// the free stack, to sort.
    fn begin_shrink(&self, freed: &mut Freed, pending: u32) {
        // Relaxed: only the reaper closes or lowers the frontier; a claim that moves it
        // on meanwhile only makes this snapshot conservative.
        let frontier = self.claimed.load(Ordering::Relaxed) as u32;
        let limit = slab::keep_limit::<FIRST_CHUNK_BITS>(pending, ROOM, KEEP_CHUNKS);
        if frontier > limit && pending.saturating_mul(SHRINK_BELOW) < frontier {
            let mut first = self.take_free_stack();
            // The spare stack may hold batches a producer's `take` pushed back after the
            // last shrink ended (see `free`): they go on top of the free stack's, and a
            // CAS, not a store, installs the lot, so a push-back racing this is not lost.
            let mut current = self.spare.load(Ordering::Relaxed);
            loop {
                if current as u32 != NIL {
                    if let Some(batch) = self.take_batch(&self.spare) {
                        // SAFETY: a batch taken, so the reaper's, which keeps its chunk.
                        let slot = unsafe { self.owned(batch) }.expect("free slots are installed");
                        // Relaxed: published by the CAS below.
                        slot.deadline.store(u64::from(first), Ordering::Relaxed);
                        first = batch;
                    }
                    current = self.spare.load(Ordering::Relaxed);
                    continue;
                }
                let tag = (current >> 32) as u32;
                // Release: the links, which the stacks' Acquire takes made visible to the
                // reaper, to the producers that take from the spare stack.
                match self.spare.compare_exchange(
                    current,
                    free::head(tag.wrapping_add(1), first),
                    Ordering::Release,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(seen) => current = seen,
                }
            }
            freed.shrink = Some(Box::new(Shrink {
                limit,
                held: [Held::EMPTY; CHUNKS],
            }));
        }
    }

    /// Sorts up to `SORT_BUDGET` slots of the spare stack, for at most `SORT_TIME`: those
    /// below the limit go back on `hot` (for the free stack), the others are held. It
    /// takes the stack's batches whole and pushes back what it did not get to.
    fn sort(&self, shrink: &mut Shrink, hot: &mut Chain) {
        // Loom runs every path again the same way: no clock there.
        #[cfg(not(loom))]
        let start = std::time::Instant::now();
        // The rest of the batch being sorted.
        let mut batch = NIL;
        #[cfg_attr(loom, allow(unused_variables))]
        for sorted in 0..SORT_BUDGET {
            #[cfg(not(loom))]
            if sorted % 256 == 255 && start.elapsed() >= SORT_TIME {
                break;
            }
            if batch == NIL {
                match self.take_batch(&self.spare) {
                    Some(first) => batch = first,
                    None => break,
                }
            }
            let index = batch;
            // SAFETY: in a batch the reaper took, so its own.
            let slot = unsafe { self.owned(index) }.expect("free slots are installed");
            // Relaxed: published with the batch (the take's Acquire). Read before the
            // slot is chained anew below.
            batch = slot.link.load(Ordering::Relaxed);
            if index >= shrink.limit {
                shrink.hold(index, slot);
            } else {
                self.chain(hot, index, slot);
            }
        }
        self.push_batch(&self.spare, batch);
    }

    /// Gives the top chunk back if every slot it handed out is held: returns whether it
    /// did.
    fn give_back_top(&self, shrink: &mut Shrink) -> bool {
        // Relaxed: as in `shrink`; the CAS below checks it.
        let frontier = self.claimed.load(Ordering::Relaxed);
        let top = frontier as u32;
        if top <= shrink.limit {
            return false;
        }
        let chunk = locate(top - 1).0;
        let held = shrink.held[chunk];
        if held.count != top - first_index(chunk) {
            return false;
        }
        // Claims wait from here (one that came first moved the frontier: its slot is not
        // held, and the CAS fails). Relaxed: the frontier is the only data at stake.
        if self
            .claimed
            .compare_exchange(
                frontier,
                frontier | CLOSED,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return false;
        }
        // Release: a thread that sees the pointer cleared (Acquire, in `address`) sees the
        // free stack taken too, so `take_batch` retrying reads a head that has moved on. A
        // thread that read the old pointer is pinned, and the epoch's SeqCst fences (its
        // pin's, and sealing the deferred free) keep the memory until it unpins; the next
        // claimer learns of the swap through the Release store of the frontier below.
        let base = self.chunks[chunk].swap(ptr::null_mut(), Ordering::Release);
        // Relaxed: published with the frontier below. Only the reaper writes it.
        let floor = self.floor.load(Ordering::Relaxed);
        self.floor
            .store(floor.max(held.next_generation), Ordering::Relaxed);
        // Release: the cleared pointer and the floor, to the claims that follow.
        self.claimed
            .store(u64::from(first_index(chunk)), Ordering::Release);
        shrink.held[chunk] = Held::EMPTY;
        // Relaxed: a count (see `shrink`).
        self.unfreed.fetch_add(1, Ordering::Relaxed);
        let unfreed = Arc::clone(&self.unfreed);
        let base = ChunkPtr(base);
        let guard = epoch::pin();
        // SAFETY: no thread can reach the chunk anew: its pointer is cleared, its slots are
        // on no list (all held here, then forgotten), and claims go to a fresh chunk. The
        // epoch runs the free only after every thread pinned before now has unpinned, so
        // no reference from `get` or `take_batch` outlives it; the reaper keeps none. The closure
        // touches no `T` (all slots are free) and the memory it frees is its own.
        unsafe {
            guard.defer_unchecked(move || {
                let ChunkPtr(base) = base;
                free_chunk::<T>(base, chunk);
                unfreed.fetch_sub(1, Ordering::Relaxed);
            });
        }
        guard.flush();
        true
    }

    /// Chunks given back whose memory the epoch has not freed yet.
    #[cfg(test)]
    pub(super) fn unfreed(&self) -> usize {
        self.unfreed.load(Ordering::Relaxed)
    }
}

/// What the reaper holds of one chunk while it gives memory back.
#[derive(Debug, Clone, Copy)]
struct Held {
    chain: Chain,
    count: u32,
    /// The highest generation a held slot would be reused at.
    next_generation: u32,
}

impl Held {
    const EMPTY: Held = Held {
        chain: Chain::EMPTY,
        count: 0,
        next_generation: 0,
    };
}

/// A shrink under way: the reaper holds back every free slot at or above `limit`, chunk
/// by chunk, and gives the top chunk back once all its slots are held.
#[derive(Debug)]
pub(super) struct Shrink {
    /// A chunk boundary (`u32::MAX` once given up: everything goes back on the stack).
    pub(super) limit: u32,
    held: [Held; CHUNKS],
}

impl Shrink {
    pub(super) fn hold<T>(&mut self, index: u32, slot: Slot<'_, T>) {
        // Relaxed: a FREE word the reaper wrote, or read through the stack's Acquire.
        let (generation, _) = split(slot.state.load(Ordering::Relaxed));
        let held = &mut self.held[locate(index).0];
        held.chain.push(index, slot);
        held.count += 1;
        held.next_generation = held.next_generation.max(generation);
    }
}
