//! The wheel's machinery without its storage: the levels of buckets, the heap of due
//! buckets and the current tick, over entries that live wherever their owner keeps them.
//!
//! An entry is named by a `u32` index and reached through [`Links`]: its deadline (in
//! ticks) and its two list links. [`Wheel`](super::Wheel) keeps its entries in its own
//! slab; the engine's reaper keeps them in the shard's shared slots, so that a timer is
//! one record whoever looks at it (the producer writing it, a canceller, the reaper filing
//! it). Every operation here is the wheel's algorithm as its module doc describes it:
//! push on the front of a bucket's list, close the gap an entry leaves, and poll the top
//! bucket of the heap, cascading what is not due yet.

use super::bucket_heap::BucketHeap;
use super::level::{BLOCK, Bucket, EMPTY_LEVEL, Level, Placement, SLOTS, level_of, place};
use crate::slab::NIL;

/// Timers a level-1 bucket moves down to level 0 per tick of the block before its own
/// (see `level`): 64 ticks of it spread a bucket of 64K timers evenly.
const SPREAD_PER_TICK: usize = 1024;

/// Marks a `prev` link as "this entry heads bucket N" rather than "entry N precedes it".
/// Entry indices stay below `1 << 31`, so the bit is free.
pub(crate) const BUCKET_TAG: u32 = 1 << 31;

/// Where the wheel finds an entry's deadline and links. Only the wheel's owner calls
/// these, for entries it has linked (or is linking) into the wheel.
pub(crate) trait Links {
    /// The tick entry `index` is due at.
    fn tick(&self, index: u32) -> u64;
    /// The entry before it in its bucket's list, or `BUCKET_TAG | bucket` for a list head.
    fn prev(&self, index: u32) -> u32;
    /// The entry after it, or `NIL`.
    fn next(&self, index: u32) -> u32;
    fn set_prev(&mut self, index: u32, prev: u32);
    fn set_next(&mut self, index: u32, next: u32);
}

/// The levels, the bucket heap and the clock of a wheel (see the module doc).
#[derive(Debug)]
pub(crate) struct Hierarchy {
    levels: Vec<Level>,
    heap: BucketHeap,
    /// The current tick: every deadline at or before it has been handed out or is in a
    /// bucket due now.
    now: u64,
    /// Entries moved down a level so far.
    cascaded: u64,
}

impl Hierarchy {
    pub(crate) const fn new() -> Self {
        Hierarchy {
            levels: Vec::new(),
            heap: BucketHeap::new(),
            now: 0,
            cascaded: 0,
        }
    }

    /// Files a new entry due at `deadline`: `make` stores it, given the links it starts
    /// with (its `prev` and `next`), and returns its index with whatever else it likes, or
    /// an error, which leaves the wheel as it was.
    #[inline]
    pub(crate) fn insert<L: Links, R, E>(
        &mut self,
        links: &mut L,
        deadline: u64,
        make: impl FnOnce(&mut L, u32, u32) -> Result<(u32, R), E>,
    ) -> Result<(u32, R), E> {
        let placement = place(self.now, deadline);
        let bucket = bucket_for(&mut self.levels, placement);
        let head_link = BUCKET_TAG | placement.bucket as u32;
        let (index, made) = make(links, head_link, bucket.head)?;
        push_front(bucket, links, &mut self.heap, placement, index);
        Ok((index, made))
    }

    /// Pushes entry `index`, in no list, on the front of the bucket of tick `deadline`.
    pub(crate) fn link(&mut self, links: &mut impl Links, index: u32, deadline: u64) {
        let placement = place(self.now, deadline);
        let bucket = bucket_for(&mut self.levels, placement);
        links.set_prev(index, BUCKET_TAG | placement.bucket as u32);
        links.set_next(index, bucket.head);
        push_front(bucket, links, &mut self.heap, placement, index);
    }

    /// Takes entry `index` out of its bucket's list (its own links are left as they were).
    pub(crate) fn unlink(&mut self, links: &mut impl Links, index: u32) {
        let (prev, next) = (links.prev(index), links.next(index));
        self.close_gap(links, prev, next);
    }

    /// Joins the neighbours of an entry leaving its list, given its links.
    #[inline]
    pub(crate) fn close_gap(&mut self, links: &mut impl Links, prev: u32, next: u32) {
        if next != NIL {
            links.set_prev(next, prev);
        }
        if prev & BUCKET_TAG == 0 {
            links.set_next(prev, next);
            return;
        }
        let bucket = (prev & !BUCKET_TAG) as usize;
        self.bucket_mut(bucket).head = next;
        if next == NIL {
            self.settle_heap();
        }
    }

    /// Advances to tick `now` and takes out one entry due at or before it: its index and
    /// tick, the entry out of its list. `None` when there is none left. See
    /// [`Wheel::poll_expired`](super::Wheel::poll_expired).
    pub(crate) fn poll(&mut self, links: &mut impl Links, now: u64) -> Option<(u32, u64)> {
        let now = now.max(self.now);
        // Entries moved down from the bucket in hand, which may be spread (below).
        let (mut in_hand, mut moved) = (usize::MAX, 0);
        loop {
            let Some((due, bucket)) = self.heap.peek().filter(|&(due, _)| due <= now) else {
                self.now = now;
                return None;
            };
            // Buckets are due after the tick they were filled at, and are taken in order.
            debug_assert!(due >= self.now);
            self.now = due;
            if bucket != in_hand {
                (in_hand, moved) = (bucket, 0);
            }
            let index = self.bucket(bucket).head;
            let deadline = links.tick(index);
            if deadline <= now {
                self.unlink(links, index);
                return Some((index, deadline));
            }
            // A level-1 bucket is due a block before its timers: until the tick before its
            // first, it moves down `SPREAD_PER_TICK` timers per tick that has passed since
            // it was due, and waits for the next tick with the rest.
            let first = deadline & !(BLOCK - 1);
            if level_of(bucket) == 1
                && now + 1 < first
                && moved >= SPREAD_PER_TICK.saturating_mul((now - due + 1) as usize)
            {
                self.requeue(bucket, now + 1);
                continue;
            }
            // Not yet due: cascade. Placed relative to `due`, it lands in a finer level in a
            // bucket due after `due`, so this bucket stays the heap's top until emptied.
            self.unlink(links, index);
            self.link(links, index, deadline);
            self.cascaded += 1;
            moved += 1;
        }
    }

    /// When the earliest non-empty bucket is due (see
    /// [`Wheel::next_deadline`](super::Wheel::next_deadline)).
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|(due, _)| due)
    }

    /// The entry due first, the first in its bucket's list among equals (the one `poll`
    /// takes first). Only buckets due no later than the best deadline found so far can hold
    /// an earlier one: every entry of a bucket is due at or after the bucket.
    pub(crate) fn earliest(&self, links: &impl Links) -> Option<u32> {
        let mut best: Option<(u64, u64, u32)> = None; // (deadline, bucket due, index)
        for bucket in self.levels.iter().flatten() {
            if bucket.head == NIL || best.is_some_and(|(deadline, ..)| bucket.due > deadline) {
                continue;
            }
            let mut index = bucket.head;
            while index != NIL {
                let candidate = (links.tick(index), bucket.due, index);
                if best
                    .is_none_or(|(deadline, due, _)| (candidate.0, candidate.1) < (deadline, due))
                {
                    best = Some(candidate);
                }
                index = links.next(index);
            }
        }
        best.map(|(.., index)| index)
    }

    /// Empties every bucket, handing each entry to `free` (after its `next` link was read),
    /// and empties the heap; the current tick stays.
    pub(crate) fn clear<L: Links>(&mut self, links: &mut L, mut free: impl FnMut(&mut L, u32)) {
        for bucket in self.levels.iter_mut().flatten() {
            let mut index = std::mem::replace(&mut bucket.head, NIL);
            bucket.queued = false;
            while index != NIL {
                let next = links.next(index);
                free(links, index);
                index = next;
            }
        }
        while self.heap.len() > 0 {
            self.heap.pop();
        }
    }

    /// Entries moved down a level so far.
    pub(crate) fn cascaded(&self) -> u64 {
        self.cascaded
    }

    /// The current tick.
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// Rows of buckets made so far.
    pub(crate) fn rows(&self) -> usize {
        self.levels.len()
    }

    /// Buckets on the heap (some may be empty, below its top).
    pub(crate) fn queued(&self) -> usize {
        self.heap.len()
    }

    fn bucket(&self, bucket: usize) -> &Bucket {
        &self.levels[bucket / SLOTS][bucket % SLOTS]
    }

    fn bucket_mut(&mut self, bucket: usize) -> &mut Bucket {
        &mut self.levels[bucket / SLOTS][bucket % SLOTS]
    }

    /// Makes `bucket`, the heap's top, due at tick `at` instead.
    fn requeue(&mut self, bucket: usize, at: u64) {
        self.heap.pop();
        self.heap.push(at, bucket);
        self.bucket_mut(bucket).due = at;
    }

    /// Restores "the heap's top is a non-empty bucket" after a bucket emptied.
    #[inline(never)]
    fn settle_heap(&mut self) {
        while let Some((_, bucket)) = self.heap.peek() {
            let bucket = self.bucket_mut(bucket);
            if bucket.head != NIL {
                return;
            }
            bucket.queued = false;
            self.heap.pop();
        }
    }
}

impl Default for Hierarchy {
    fn default() -> Self {
        Hierarchy::new()
    }
}

/// The bucket `placement` names, adding levels up to its level if they are missing.
#[inline]
fn bucket_for(levels: &mut Vec<Level>, placement: Placement) -> &mut Bucket {
    let row = placement.row();
    debug_assert!(row < super::level::MAX_ROWS);
    if row >= levels.len() {
        add_rows(levels, row);
    }
    &mut levels[row][placement.bucket % SLOTS]
}

#[cold]
fn add_rows(levels: &mut Vec<Level>, row: usize) {
    levels.resize(row + 1, EMPTY_LEVEL);
}

/// Makes entry `index`, already linked in front of the bucket's current head, the new
/// head, and queues the bucket on the heap if it was empty and unqueued. (A free function
/// over the wheel's parts, so that the caller's borrow of `bucket` can stay live.)
#[inline]
fn push_front(
    bucket: &mut Bucket,
    links: &mut impl Links,
    heap: &mut BucketHeap,
    placement: Placement,
    index: u32,
) {
    let old_head = std::mem::replace(&mut bucket.head, index);
    if old_head == NIL && !bucket.queued {
        bucket.queued = true;
        bucket.due = placement.due;
        heap.push(placement.due, placement.bucket);
        return;
    }
    // A bucket's range, hence its due tick, is fixed from when it is filled until the
    // wheel reaches it (see `level`).
    debug_assert_eq!(bucket.due, placement.due);
    if old_head != NIL {
        links.set_prev(old_head, index);
    }
}
