//! The min-heap of non-empty buckets, ordered by when each is due.
//!
//! This is Kafka's `DelayQueue<TimerTaskList>`: the wheel never walks empty slots, and the
//! reaper learns how long it may sleep from the heap's top alone. At most one heap entry
//! exists per bucket (the bucket's `queued` flag says whether it has one), so the heap
//! never holds more than `11 * 64` entries, and a bucket that empties and refills within
//! one rotation, as cancel-heavy churn makes them do, costs no heap operation at all.
//!
//! Entries go stale lazily: a bucket emptied by `cancel` keeps its entry. The wheel keeps
//! one invariant instead, that *the top is never stale*, by settling the top whenever a
//! bucket empties; so `peek` is exact and O(1), and stale entries further down are dropped
//! only when they surface. A refilled bucket revives its own entry, since a bucket's due
//! time cannot change while it is queued: it changes only when the wheel moves past it,
//! and by then the heap has popped it.
//!
//! What the heap answers is when the earliest non-empty *bucket* is due, which for a
//! bucket above level 0 is its first tick, not its earliest deadline: a reaper that sleeps
//! on it may wake early to cascade, but never late. Exact deadlines would need a per-bucket
//! minimum that an O(1) cancel cannot maintain.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug)]
pub(super) struct BucketHeap {
    heap: BinaryHeap<Reverse<(u64, u16)>>,
}

impl BucketHeap {
    pub(super) const fn new() -> Self {
        BucketHeap {
            heap: BinaryHeap::new(),
        }
    }

    pub(super) fn push(&mut self, due: u64, bucket: usize) {
        self.heap.push(Reverse((due, bucket as u16)));
    }

    /// The earliest (due, bucket), which may be stale unless the caller settled the heap.
    pub(super) fn peek(&self) -> Option<(u64, usize)> {
        self.heap
            .peek()
            .map(|&Reverse((due, bucket))| (due, usize::from(bucket)))
    }

    pub(super) fn pop(&mut self) {
        self.heap.pop();
    }

    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }
}
