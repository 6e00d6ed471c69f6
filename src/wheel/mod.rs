//! The single-threaded hierarchical timing wheel.
//!
//! Varghese and Lauck's hierarchical wheel, as Kafka's `TimingWheel` builds it: levels of 64
//! slots (`level`; level 0 has 128, for the current block of 64 ticks and the next), each
//! slot a bucket holding an intrusive doubly linked list of entries
//! through the slab (`u32` links, so an entry costs 12 bytes of bookkeeping, not 24), and a
//! min-heap of the non-empty buckets (`bucket_heap`) that says which bucket is due next.
//!
//! - `insert` takes a slab slot and pushes it on the front of its bucket: O(1).
//! - `cancel` checks the key's generation, unlinks the entry (its `prev` link is either the
//!   previous entry or, for a list head, the bucket's own number) and frees the slot: O(1),
//!   and the memory is reusable at once rather than at the bucket's deadline.
//! - `poll_expired` takes the top bucket of the heap, moves the wheel's tick to when it is
//!   due, and takes its entries one by one: those whose deadline has come are handed out,
//!   the others (only in buckets above level 0) are re-inserted relative to the new tick,
//!   which puts them in a finer level: Kafka's cascade, done one entry at a time so that a
//!   caller can stop after any expiry. A level-1 bucket falls due a block before its timers
//!   and is moved down a share per tick over that block, so that a bucket of tens of
//!   thousands of timers does not stall the ticks around its own for milliseconds.
//!
//! Levels are made on demand: a wheel that only ever sees short timeouts has two.

mod bucket_heap;
pub(crate) mod hierarchy;
mod level;

use crate::error::{Full, StaleKey};
use crate::handle::Key;
use crate::slab::Slab;
pub(crate) use hierarchy::Hierarchy;
use hierarchy::Links;

/// A hierarchical timing wheel of timers carrying values of type `T`, driven by the caller.
///
/// Time is counted in ticks, a `u64` that starts at 0 and that the caller advances by
/// passing `now` to [`poll_expired`](Self::poll_expired). What a tick means (a millisecond,
/// ten microseconds) is the caller's choice; the wheel reads no clock and starts no
/// thread. Every `u64` is a valid deadline: none is rejected, none fires early.
///
/// # Usage
///
/// [`insert`](Self::insert) a value with its deadline and keep the [`Key`] if you may
/// [`cancel`](Self::cancel) or [`reset`](Self::reset) it. Call
/// [`poll_expired`](Self::poll_expired) (or iterate [`drain_expired`](Self::drain_expired))
/// with the current tick to take every timer whose deadline has come, each exactly once.
/// [`next_deadline`](Self::next_deadline) says when to poll next.
///
/// ```
/// use shardwheel::Wheel;
///
/// let mut wheel = Wheel::new();
/// let idle = wheel.insert(30_000, "close idle connection");
/// wheel.insert(250, "request timed out");
/// wheel.reset(idle, 60_000).unwrap(); // the connection saw traffic
///
/// let fired: Vec<_> = wheel.drain_expired(1_000).map(|e| e.value).collect();
/// assert_eq!(fired, ["request timed out"]);
/// assert_eq!(wheel.cancel(idle), Some("close idle connection"));
/// assert!(wheel.is_empty());
/// ```
///
/// # Implementation
///
/// Levels of 64 slots, slot = 6 bits of the deadline, up to 11 levels for the whole `u64`
/// range, made on demand (level 0 has two rows: the current block of 64 ticks and the
/// next); entries in a slab of chunks that never move, linked into their
/// bucket by `u32` indices; a key is (slot, generation), so stale keys are rejected; a
/// min-heap of the non-empty buckets gives the next due bucket without walking slots.
/// Insert, cancel and reset are O(1); each expiry costs O(1) plus one re-insertion per
/// level the entry cascades through (at most 10, and only for timers beyond the next block
/// of 64 ticks). An entry costs `28 + size_of::<T>()` bytes, rounded up to `T`'s alignment
/// (36 bytes with a 16-byte payload); the buckets and the heap are a few kilobytes in all.
pub struct Wheel<T> {
    slab: Slab<T>,
    /// The levels, the bucket heap and the current tick, over the slab's entries.
    hierarchy: Hierarchy,
}

/// A timer taken out of the wheel by [`Wheel::poll_expired`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired<T> {
    /// The key the timer had; it is stale from now on.
    pub key: Key,
    /// The deadline it was inserted (or last reset) with; at or before the `now` that
    /// expired it.
    pub deadline: u64,
    /// Its value.
    pub value: T,
}

impl<T> Wheel<T> {
    /// An empty wheel at tick 0. Allocates nothing until the first insert.
    pub const fn new() -> Self {
        Wheel {
            slab: Slab::new(),
            hierarchy: Hierarchy::new(),
        }
    }

    /// Inserts `value` to expire at tick `deadline`, and returns its key.
    ///
    /// A deadline at or before [`now`](Self::now) expires at the next poll. Any `u64` is
    /// accepted, `u64::MAX` included.
    ///
    /// # Panics
    ///
    /// If the wheel already holds 2^31 timers (as `Vec::push` panics when its length would
    /// overflow). Use [`try_insert`](Self::try_insert) to get the value back instead.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = shardwheel::Wheel::new();
    /// let key = wheel.insert(5, 'x');
    /// assert_eq!(wheel.get(key), Some(&'x'));
    /// assert_eq!(wheel.deadline(key), Some(5));
    /// ```
    #[inline]
    pub fn insert(&mut self, deadline: u64, value: T) -> Key {
        match self.try_insert(deadline, value) {
            Ok(key) => key,
            Err(_) => panic!("shardwheel: a Wheel holds at most 2^31 timers"),
        }
    }

    /// Like [`insert`](Self::insert), but hands the value back when the wheel is full.
    ///
    /// # Errors
    ///
    /// [`Full`] with the value, if the wheel already holds 2^31 timers.
    #[inline]
    pub fn try_insert(&mut self, deadline: u64, value: T) -> Result<Key, Full<T>> {
        let (index, generation) =
            self.hierarchy
                .insert(&mut self.slab, deadline, |slab, prev, next| {
                    slab.alloc(deadline, value, prev, next).map_err(Full)
                })?;
        Ok(Key::new(index, generation))
    }

    /// Cancels the timer `key` names and returns its value, or `None` if the key is stale
    /// (its timer expired or was cancelled) or was never issued by this wheel. O(1); the
    /// slot is free for reuse at once.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = shardwheel::Wheel::new();
    /// let key = wheel.insert(100, "retry");
    /// assert_eq!(wheel.cancel(key), Some("retry"));
    /// assert_eq!(wheel.cancel(key), None);
    /// assert_eq!(wheel.poll_expired(1_000), None);
    /// ```
    #[inline]
    pub fn cancel(&mut self, key: Key) -> Option<T> {
        let (value, prev, next) = self.slab.take(key.index(), key.generation())?;
        self.hierarchy.close_gap(&mut self.slab, prev, next);
        Some(value)
    }

    /// Moves the timer `key` names to a new deadline, keeping its key and value. O(1).
    /// A deadline at or before [`now`](Self::now) expires at the next poll.
    ///
    /// # Errors
    ///
    /// [`StaleKey`] if the key's timer expired or was cancelled, or the key was never issued
    /// by this wheel; nothing is changed then.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = shardwheel::Wheel::new();
    /// let idle = wheel.insert(10, "idle");
    /// wheel.reset(idle, 50).unwrap();
    /// assert_eq!(wheel.poll_expired(49), None);
    /// assert_eq!(wheel.poll_expired(50).map(|e| e.value), Some("idle"));
    /// assert!(wheel.reset(idle, 60).is_err());
    /// ```
    pub fn reset(&mut self, key: Key, deadline: u64) -> Result<(), StaleKey> {
        self.slab
            .lookup(key.index(), key.generation())
            .ok_or(StaleKey)?;
        self.hierarchy.unlink(&mut self.slab, key.index());
        self.slab.entry_mut(key.index()).set_deadline(deadline);
        self.hierarchy.link(&mut self.slab, key.index(), deadline);
        Ok(())
    }

    /// Advances the wheel to tick `now` and takes out one timer whose deadline is at or
    /// before `now`, or returns `None` when there is none left.
    ///
    /// Call it until it returns `None` to expire everything due; stop earlier to bound the
    /// work of one pass (the rest stays due). Timers come out in the order their buckets
    /// fall due, which is deadline order across buckets and at level 0, but not within a
    /// bucket of a higher level. A `now` before [`now`](Self::now) is taken as `now()`: the
    /// wheel never goes back.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = shardwheel::Wheel::new();
    /// wheel.insert(70, "b");
    /// wheel.insert(3, "a");
    /// assert_eq!(wheel.poll_expired(2), None);
    /// let first = wheel.poll_expired(100).unwrap();
    /// assert_eq!((first.deadline, first.value), (3, "a"));
    /// assert_eq!(wheel.poll_expired(100).map(|e| e.value), Some("b"));
    /// assert_eq!(wheel.poll_expired(100), None);
    /// ```
    pub fn poll_expired(&mut self, now: u64) -> Option<Expired<T>> {
        let (index, deadline) = self.hierarchy.poll(&mut self.slab, now)?;
        let key = Key::new(index, self.slab.entry(index).generation());
        let (value, _, _) = self.slab.free(index);
        Some(Expired {
            key,
            deadline,
            value,
        })
    }

    /// An iterator that expires timers up to tick `now`: it calls
    /// [`poll_expired`](Self::poll_expired) until that returns `None`. Dropping it early
    /// leaves the remaining timers due.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = shardwheel::Wheel::new();
    /// for i in 0..10u64 {
    ///     wheel.insert(i, i);
    /// }
    /// // At most 4 expiries in this pass; the rest stay due.
    /// assert_eq!(wheel.drain_expired(100).take(4).count(), 4);
    /// assert_eq!(wheel.drain_expired(100).count(), 6);
    /// ```
    pub fn drain_expired(&mut self, now: u64) -> DrainExpired<'_, T> {
        DrainExpired { wheel: self, now }
    }

    /// The earliest tick at which a timer can be due, or `None` if the wheel is empty.
    ///
    /// This is when the earliest non-empty bucket is due: exact for deadlines in the
    /// current or the next block of 64 ticks (level 0), otherwise a block of 64 ticks
    /// before the first tick of the deadline's bucket, when the bucket starts moving its
    /// timers down (a share per tick for a busy level-1 bucket: then it is the next tick).
    /// It is never later than the earliest deadline and never earlier than `now()`.
    /// Polling at it may expire nothing (the bucket only cascades into finer ones); ask
    /// again afterwards. O(1).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = shardwheel::Wheel::new();
    /// assert_eq!(wheel.next_deadline(), None);
    /// wheel.insert(40, ());
    /// assert_eq!(wheel.next_deadline(), Some(40));
    /// wheel.insert(5_000, ());
    /// wheel.insert(6_000, ());
    /// assert_eq!(wheel.poll_expired(40).map(|e| e.deadline), Some(40));
    /// // 5_000 lies in the level-2 bucket starting at 4_096, due a block earlier.
    /// assert_eq!(wheel.next_deadline(), Some(4_032));
    /// assert_eq!(wheel.poll_expired(4_032), None);
    /// assert_eq!(wheel.next_deadline(), Some(4_928)); // a level-1 bucket from 4_992 now
    /// ```
    pub fn next_deadline(&self) -> Option<u64> {
        self.hierarchy.next_deadline()
    }

    /// The key of the timer due first (among timers due at the same tick, the one
    /// [`poll_expired`](Self::poll_expired) takes first), or `None` if the wheel is empty.
    /// It looks at the buckets due no later than that timer, so its cost is that of walking
    /// a few buckets, not of every timer.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = shardwheel::Wheel::new();
    /// assert_eq!(wheel.peek(), None);
    /// let early = wheel.insert(1_000, "early");
    /// wheel.insert(1_010, "late"); // the same bucket of 64 ticks, at the front of its list
    /// assert_eq!(wheel.peek(), Some(early));
    /// ```
    pub fn peek(&self) -> Option<Key> {
        let index = self.hierarchy.earliest(&self.slab)?;
        Some(Key::new(index, self.slab.entry(index).generation()))
    }

    /// Cancels every timer, dropping their values, in O(timers + buckets); the wheel keeps
    /// its tick and its memory, and every key it issued is stale from now on.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut wheel = shardwheel::Wheel::new();
    /// let key = wheel.insert(10, "a");
    /// wheel.insert(5_000, "b");
    /// wheel.clear();
    /// assert!(wheel.is_empty() && wheel.next_deadline().is_none());
    /// assert_eq!(wheel.cancel(key), None);
    /// ```
    pub fn clear(&mut self) {
        self.hierarchy.clear(&mut self.slab, |slab, index| {
            drop(slab.free(index));
        });
    }

    /// How many times a timer has moved down a level so far, on its way to expire: the
    /// cost a hierarchical wheel pays for long timers (at most one move per level per
    /// timer, and none for timers that are cancelled first or due within the current or the
    /// next block of 64 ticks).
    pub fn cascaded(&self) -> u64 {
        self.hierarchy.cascaded()
    }

    /// The current tick: the latest `now` the wheel was polled with.
    pub fn now(&self) -> u64 {
        self.hierarchy.now()
    }

    /// The number of pending timers.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One step of giving memory back after a spike: call it now and then (after a burst
    /// of cancels, say, or whenever the wheel is polled). Once the timers pending drop below
    /// an eighth of the most the wheel ever held, each step rebuilds part of the free list
    /// from the entries the wheel keeps (room for four times the timers pending), and the
    /// memory above is freed once no timer there is pending. A step costs at most a few
    /// tens of microseconds. Returns whether there is more to do at the next step.
    ///
    /// Keys of timers that are gone stay harmless: an entry made again in memory given
    /// back starts at a generation no old key names.
    ///
    /// ```
    /// use shardwheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// let keys: Vec<_> = (0..100_000).map(|i| wheel.insert(1_000 + i, i)).collect();
    /// for key in keys {
    ///     wheel.cancel(key);
    /// }
    /// while wheel.shrink() {}
    /// assert!(wheel.is_empty());
    /// ```
    pub fn shrink(&mut self) -> bool {
        self.slab.shrink()
    }

    /// Whether `key` names a pending timer.
    pub fn contains(&self, key: Key) -> bool {
        self.slab.lookup(key.index(), key.generation()).is_some()
    }

    /// The value of the pending timer `key` names, if the key is current.
    pub fn get(&self, key: Key) -> Option<&T> {
        self.slab.lookup(key.index(), key.generation())?;
        Some(self.slab.value(key.index()))
    }

    /// The value of the pending timer `key` names, mutably, if the key is current.
    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        self.slab.lookup(key.index(), key.generation())?;
        Some(self.slab.value_mut(key.index()))
    }

    /// The deadline of the pending timer `key` names, if the key is current.
    pub fn deadline(&self, key: Key) -> Option<u64> {
        self.slab
            .lookup(key.index(), key.generation())
            .map(|entry| entry.deadline())
    }
}

/// The slab's entries, as the wheel's machinery reaches them.
impl<T> Links for Slab<T> {
    #[inline]
    fn tick(&self, index: u32) -> u64 {
        self.entry(index).deadline()
    }

    #[inline]
    fn prev(&self, index: u32) -> u32 {
        self.entry(index).prev
    }

    #[inline]
    fn next(&self, index: u32) -> u32 {
        self.entry(index).next
    }

    #[inline]
    fn set_prev(&mut self, index: u32, prev: u32) {
        self.entry_mut(index).prev = prev;
    }

    #[inline]
    fn set_next(&mut self, index: u32, next: u32) {
        self.entry_mut(index).next = next;
    }
}

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for Wheel<T> {
    /// A summary: counts and ticks, never the entries themselves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wheel")
            .field("len", &self.len())
            .field("now", &self.now())
            .field("next_deadline", &self.next_deadline())
            .field("levels", &self.hierarchy.rows())
            .field("queued_buckets", &self.hierarchy.queued())
            .finish()
    }
}

/// Iterator returned by [`Wheel::drain_expired`].
#[derive(Debug)]
pub struct DrainExpired<'a, T> {
    wheel: &'a mut Wheel<T>,
    now: u64,
}

impl<T> Iterator for DrainExpired<'_, T> {
    type Item = Expired<T>;

    fn next(&mut self) -> Option<Expired<T>> {
        self.wheel.poll_expired(self.now)
    }
}

#[cfg(test)]
mod tests;
