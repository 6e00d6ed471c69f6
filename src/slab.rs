//! The slab: where a wheel's entries live, named by `u32` index and generation.
//!
//! Entries sit in chunks that never move once allocated: chunk `c` holds `32 << c` entries,
//! so a small wheel costs a few hundred bytes and a wheel of ten million timers needs 19
//! chunks, whose table stays in L1. An index maps to its chunk with one `leading_zeros`.
//! Stable addresses are what the engine's other threads will rely on to reach an entry.
//!
//! Freed slots form a LIFO free list threaded through `next`, so the slot a `cancel` frees
//! is the one the next `insert` takes, while its cache line is still warm. Every slot
//! carries a generation: odd while it holds a value, even while it is free. A key names a
//! slot *and* the generation it was issued at, so a key whose entry fired, was cancelled or
//! whose slot was reused no longer matches and touches nothing. A slot whose generation
//! would wrap around is retired instead of reused, so no key can ever match a later
//! occupant: the ABA problem is closed at the cost of one entry per 2^31 reuses of a slot.

use std::mem::MaybeUninit;

/// "No entry": the end of a bucket list or of the free list.
pub(crate) const NIL: u32 = u32::MAX;

/// Largest number of slots a slab can hold. Index bit 31 is left free so that the wheel can
/// tag a bucket number in a `prev` link (see `wheel::bucket_link`).
pub(crate) const MAX_SLOTS: u32 = 1 << 31;

/// log2 of the first chunk's length.
const FIRST_CHUNK_BITS: u32 = 5;

/// One timer. 28 bytes plus the value, aligned to 4 unless the value needs more: the
/// deadline is kept as two `u32` halves so that a 16-byte payload makes a 36-byte entry,
/// not a 40-byte one (W4 counts every byte of ten million of them).
pub(crate) struct Entry<T> {
    value: MaybeUninit<T>,
    deadline: [u32; 2],
    /// Previous entry in the bucket list, or the bucket's tag when this entry is the head.
    pub(crate) prev: u32,
    /// Next entry in the bucket list (or in the free list when the slot is free), or `NIL`.
    pub(crate) next: u32,
    generation: u32,
}

impl<T> Entry<T> {
    pub(crate) fn deadline(&self) -> u64 {
        u64::from(self.deadline[0]) | (u64::from(self.deadline[1]) << 32)
    }

    pub(crate) fn set_deadline(&mut self, deadline: u64) {
        self.deadline = [deadline as u32, (deadline >> 32) as u32];
    }

    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    fn is_occupied(&self) -> bool {
        self.generation & 1 == 1
    }
}

/// Where a slot lives: (chunk, offset in chunk).
fn locate(index: u32) -> (usize, usize) {
    let shifted = u64::from(index) + (1 << FIRST_CHUNK_BITS);
    let chunk = 63 - shifted.leading_zeros() - FIRST_CHUNK_BITS;
    let offset = shifted - (1 << (chunk + FIRST_CHUNK_BITS));
    (chunk as usize, offset as usize)
}

/// Entries in never-moving chunks, with a free list and per-slot generations.
pub(crate) struct Slab<T> {
    /// Invariant: every slot with index `< initialized` is an initialised `Entry`, whose
    /// `value` is initialised exactly when its generation is odd.
    chunks: Vec<Box<[MaybeUninit<Entry<T>>]>>,
    /// Slots ever handed out; slots at and above this index are raw memory.
    initialized: u32,
    /// Head of the free list (`NIL` when empty).
    free_head: u32,
    /// Slots holding a value.
    occupied: u32,
}

impl<T> Slab<T> {
    pub(crate) const fn new() -> Self {
        Slab {
            chunks: Vec::new(),
            initialized: 0,
            free_head: NIL,
            occupied: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.occupied as usize
    }

    /// Slots ever initialised: the slab's high-water mark.
    #[cfg(test)]
    pub(crate) fn initialized(&self) -> u32 {
        self.initialized
    }

    /// Stores `value` and returns its slot and generation, or hands `value` back when all
    /// `MAX_SLOTS` slots are taken.
    pub(crate) fn alloc(&mut self, deadline: u64, value: T) -> Result<(u32, u32), T> {
        let index = if self.free_head != NIL {
            let index = self.free_head;
            let entry = self.entry_mut(index);
            debug_assert!(!entry.is_occupied());
            entry.value.write(value);
            entry.generation = entry.generation.wrapping_add(1);
            self.free_head = entry.next;
            index
        } else {
            if self.initialized == MAX_SLOTS {
                return Err(value);
            }
            let index = self.initialized;
            let (chunk, offset) = locate(index);
            if chunk == self.chunks.len() {
                self.chunks.push(Box::new_uninit_slice(
                    1 << (chunk as u32 + FIRST_CHUNK_BITS),
                ));
            }
            self.chunks[chunk][offset].write(Entry {
                value: MaybeUninit::new(value),
                deadline: [0; 2],
                prev: NIL,
                next: NIL,
                generation: 1,
            });
            self.initialized += 1;
            index
        };
        self.occupied += 1;
        let entry = self.entry_mut(index);
        entry.set_deadline(deadline);
        Ok((index, entry.generation))
    }

    /// The entry a key names, if the key is still current.
    pub(crate) fn lookup(&self, index: u32, generation: u32) -> Option<&Entry<T>> {
        if index >= self.initialized {
            return None;
        }
        let entry = self.entry(index);
        (entry.generation == generation && entry.is_occupied()).then_some(entry)
    }

    pub(crate) fn value(&self, index: u32) -> &T {
        let entry = self.entry(index);
        assert!(entry.is_occupied(), "slab: value of a free slot");
        // SAFETY: the slot is occupied (checked above), and by the `chunks` invariant an
        // occupied entry's value is initialised.
        unsafe { entry.value.assume_init_ref() }
    }

    pub(crate) fn value_mut(&mut self, index: u32) -> &mut T {
        let entry = self.entry_mut(index);
        assert!(entry.is_occupied(), "slab: value of a free slot");
        // SAFETY: as in `value`; `&mut self` makes the borrow unique.
        unsafe { entry.value.assume_init_mut() }
    }

    /// Takes the value out of an occupied slot and puts the slot on the free list, or
    /// retires it when its generation would wrap.
    pub(crate) fn free(&mut self, index: u32) -> T {
        let free_head = self.free_head;
        let entry = self.entry_mut(index);
        assert!(entry.is_occupied(), "slab: double free of slot {index}");
        // SAFETY: the slot is occupied, so its value is initialised; bumping the generation
        // to an even number below marks it uninitialised, so it is read out exactly once.
        let value = unsafe { entry.value.assume_init_read() };
        entry.generation = entry.generation.wrapping_add(1);
        let retired = entry.generation == 0;
        if !retired {
            entry.next = free_head;
            self.free_head = index;
        }
        self.occupied -= 1;
        value
    }

    /// An initialised entry. Panics on an index that was never handed out: callers pass
    /// indices taken from links or from keys already checked by `lookup`.
    pub(crate) fn entry(&self, index: u32) -> &Entry<T> {
        assert!(index < self.initialized, "slab: slot {index} out of range");
        let (chunk, offset) = locate(index);
        // SAFETY: `index < initialized`, so by the `chunks` invariant the slot is an
        // initialised `Entry`.
        unsafe { self.chunks[chunk][offset].assume_init_ref() }
    }

    pub(crate) fn entry_mut(&mut self, index: u32) -> &mut Entry<T> {
        assert!(index < self.initialized, "slab: slot {index} out of range");
        let (chunk, offset) = locate(index);
        // SAFETY: as in `entry`; `&mut self` makes the borrow unique.
        unsafe { self.chunks[chunk][offset].assume_init_mut() }
    }
}

impl<T> Drop for Slab<T> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<T>() {
            return;
        }
        for index in 0..self.initialized {
            let entry = self.entry_mut(index);
            if entry.is_occupied() {
                // SAFETY: occupied, so the value is initialised; the slab is going away and
                // nothing reads this value again.
                unsafe { entry.value.assume_init_drop() };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn locate_maps_indices_to_consecutive_chunk_slots() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(31), (0, 31));
        assert_eq!(locate(32), (1, 0));
        assert_eq!(locate(95), (1, 63));
        assert_eq!(locate(96), (2, 0));
        // Chunk 26 starts at index 2^31 - 32; the cap leaves only its first 32 slots in use.
        assert_eq!(locate(MAX_SLOTS - 1), (26, 31));
        // Every index lands inside its chunk, and chunk boundaries are contiguous.
        let mut expected = (0usize, 0usize);
        for index in 0..100_000u32 {
            assert_eq!(locate(index), expected, "index {index}");
            expected.1 += 1;
            if expected.1 == 1 << (expected.0 as u32 + FIRST_CHUNK_BITS) {
                expected = (expected.0 + 1, 0);
            }
        }
    }

    #[test]
    fn freed_slot_is_reused_with_a_new_generation() {
        let mut slab = Slab::new();
        let (a, gen_a) = slab.alloc(5, "a").unwrap();
        assert_eq!(slab.free(a), "a");
        assert!(
            slab.lookup(a, gen_a).is_none(),
            "stale generation must not match"
        );
        let (b, gen_b) = slab.alloc(6, "b").unwrap();
        assert_eq!(b, a, "LIFO free list reuses the warm slot");
        assert_ne!(gen_b, gen_a);
        assert_eq!(slab.lookup(b, gen_b).map(Entry::deadline), Some(6));
        assert!(slab.lookup(b, gen_a).is_none());
        assert_eq!(slab.len(), 1);
    }

    #[test]
    fn free_slot_generation_never_matches() {
        let mut slab = Slab::new();
        let (a, generation) = slab.alloc(0, ()).unwrap();
        slab.free(a);
        // The free slot's own (even) generation is not a valid key either.
        assert!(slab.lookup(a, generation + 1).is_none());
        assert!(slab.lookup(a + 1, 1).is_none(), "never-initialised slot");
        assert!(slab.lookup(u32::MAX, 1).is_none());
    }

    #[test]
    fn slot_is_retired_when_its_generation_would_wrap() {
        let mut slab = Slab::new();
        let (a, _) = slab.alloc(0, 1u8).unwrap();
        slab.entry_mut(a).generation = u32::MAX;
        slab.free(a);
        let (b, generation) = slab.alloc(0, 2u8).unwrap();
        assert_ne!(b, a, "a slot at the last generation is never reused");
        assert_eq!(generation, 1);
        assert!(slab.lookup(a, 0).is_none() && slab.lookup(a, u32::MAX).is_none());
    }

    #[test]
    fn deadline_round_trips_through_halves() {
        let mut slab = Slab::new();
        for deadline in [0, 1, u64::from(u32::MAX), 1 << 32, u64::MAX - 1, u64::MAX] {
            let (index, _) = slab.alloc(deadline, ()).unwrap();
            assert_eq!(slab.entry(index).deadline(), deadline);
        }
    }

    #[test]
    fn values_still_held_are_dropped_with_the_slab() {
        let tracker = Rc::new(());
        let mut slab = Slab::new();
        let mut kept = Vec::new();
        for i in 0..100u64 {
            let (index, _) = slab.alloc(i, Rc::clone(&tracker)).unwrap();
            if i % 3 == 0 {
                drop(slab.free(index));
            } else {
                kept.push(index);
            }
        }
        assert_eq!(Rc::strong_count(&tracker), 1 + kept.len());
        drop(slab);
        assert_eq!(Rc::strong_count(&tracker), 1);
    }

    #[test]
    fn entry_for_a_sixteen_byte_payload_takes_36_bytes() {
        assert_eq!(std::mem::size_of::<Entry<[u8; 16]>>(), 36);
        assert_eq!(std::mem::size_of::<Entry<u64>>(), 32);
    }
}
