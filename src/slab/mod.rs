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

#[cfg(test)]
mod tests;

use crate::pages;
use std::alloc::Layout;
use std::mem::MaybeUninit;

/// "No entry": the end of a bucket list or of the free list.
pub(crate) const NIL: u32 = u32::MAX;

/// The `next` of a retired entry, so that a shrink's look never lists it.
const RETIRED: u32 = u32::MAX - 1;

/// Largest number of slots a slab can hold. Index bit 31 is left free so that the wheel can
/// tag a bucket number in a `prev` link (see `wheel::hierarchy::BUCKET_TAG`).
pub(crate) const MAX_SLOTS: u32 = 1 << 31;

/// log2 of the first chunk's length.
const FIRST_CHUNK_BITS: u32 = 5;

/// Chunks a slab keeps however few entries it holds (2,016 entries; 32 under miri and the
/// fuzzer, so that a test or fuzz case needs few entries to shrink).
const KEEP_CHUNKS: usize = if cfg!(any(miri, fuzzing)) { 1 } else { 6 };
/// Entries a shrink step looks at.
const SCAN_BUDGET: u32 = if cfg!(miri) { 64 } else { 16_384 };

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

/// The chunk slot `index` lives in, when chunk `c` holds `1 << (FIRST + c)` slots (the
/// geometric layout this slab and the engine's shared slots both use).
#[inline]
pub(crate) fn chunk_of<const FIRST: u32>(index: u32) -> usize {
    let shifted = u64::from(index) + (1 << FIRST);
    (63 - shifted.leading_zeros() - FIRST) as usize
}

/// The index of chunk `chunk`'s first slot, in the layout of `chunk_of`.
pub(crate) fn first_index<const FIRST: u32>(chunk: usize) -> usize {
    (1 << (chunk + FIRST as usize)) - (1 << FIRST)
}

/// The number of slots of chunk `chunk`, in the layout of `chunk_of`.
pub(crate) fn chunk_len<const FIRST: u32>(chunk: usize) -> usize {
    1 << (chunk + FIRST as usize)
}

/// The first index of the layout of `chunk_of` that a slab shrinking after a spike keeps
/// (it gives the chunks from there up back): a chunk boundary with room for `room` times
/// the `held` entries, and at least `keep_chunks` chunks.
pub(crate) fn keep_limit<const FIRST: u32>(held: u32, room: u32, keep_chunks: usize) -> u32 {
    let wanted = held.saturating_mul(room).min(MAX_SLOTS - 1);
    let chunk = chunk_of::<FIRST>(wanted);
    let boundary = if first_index::<FIRST>(chunk) == wanted as usize {
        wanted as usize
    } else {
        first_index::<FIRST>(chunk + 1)
    };
    boundary.max(first_index::<FIRST>(keep_chunks)) as u32
}

/// The layout of chunk `chunk`, the same each time it is asked for (`Drop` relies on it);
/// a big one is aligned for huge pages (see `pages`).
fn chunk_layout<T>(chunk: usize) -> Option<Layout> {
    let layout = Layout::array::<Entry<T>>(chunk_len::<FIRST_CHUNK_BITS>(chunk)).ok()?;
    Some(pages::huge_aligned(layout))
}

/// Frees chunk `chunk` of a slab, given its offset base (see `Slab::bases`).
///
/// # Safety
///
/// `base` is the slab's base for chunk `chunk`, which is freed once, and no entry in it is
/// used again or holds a value that needs dropping.
unsafe fn dealloc_chunk<T>(base: *mut Entry<T>, chunk: usize) {
    let layout = chunk_layout::<T>(chunk).expect("layout was valid when allocated");
    // SAFETY: `base + first_index(chunk)` is the pointer `pages::allocate_zeroed` returned for
    // this chunk with this very layout (see `Slab::bases`), and the caller frees it once.
    unsafe {
        pages::free(
            base.wrapping_add(first_index::<FIRST_CHUNK_BITS>(chunk))
                .cast(),
            layout,
        )
    };
}

/// Entries in never-moving chunks, with a free list and per-slot generations.
pub(crate) struct Slab<T> {
    /// Chunk `c`'s allocation, offset back by `first_index(c)` entries, so that slot `i` of
    /// chunk `c` is at `bases[c].wrapping_add(i)`: one load and one add from index to
    /// address, with no per-chunk offset to subtract.
    ///
    /// Invariant: every slot with index `< initialized` is an initialised `Entry`, whose
    /// `value` is initialised exactly when its generation is odd.
    bases: Vec<*mut Entry<T>>,
    /// Slots ever handed out; slots at and above this index are raw memory.
    initialized: u32,
    /// Head of the free list (`NIL` when empty).
    free_head: u32,
    /// Slots holding a value.
    occupied: u32,
    /// The highest generation ever handed out.
    top_generation: u32,
    /// The generation new entries start at: 0, then after a shrink above `top_generation`,
    /// so that no key into a chunk given back matches an entry of the chunk made again.
    floor: u32,
    /// A shrink under way, if `shrink.cursor != u32::MAX` (see `shrink`).
    shrink: Shrink,
}

/// A shrink of the slab (see `Slab::shrink`). While one is under way, the free list holds
/// exactly the free entries below `cursor`; those at or above it are left off.
#[derive(Debug)]
struct Shrink {
    /// Entries below it have been looked at since the shrink began (`u32::MAX`: no shrink,
    /// the free list holds every free entry).
    cursor: u32,
    /// Where the look goes up to: the limit, or every initialised entry once the shrink is
    /// given up (entries came back).
    end: u32,
    /// The chunk boundary the slab shrinks to (`u32::MAX` once given up).
    limit: u32,
    /// Occupied entries below `cursor`.
    below: u32,
}

impl Shrink {
    const NONE: Shrink = Shrink {
        cursor: u32::MAX,
        end: u32::MAX,
        limit: u32::MAX,
        below: 0,
    };

    /// Whether free entry `index` belongs on the free list: looked at already, or made
    /// after a shrink given up began its last look.
    fn lists(&self, index: u32) -> bool {
        index < self.cursor || (self.limit == u32::MAX && index >= self.end)
    }
}

// SAFETY: the slab owns its entries and the chunks they live in exclusively, as a
// `Vec<T>` does; the raw pointers are never shared outside it. Sending it sends the `T`s,
// and sharing it only hands out `&T`.
unsafe impl<T: Send> Send for Slab<T> {}
// SAFETY: as above: `&Slab<T>` gives access to nothing but `&T` and plain data.
unsafe impl<T: Sync> Sync for Slab<T> {}

impl<T> Slab<T> {
    pub(crate) const fn new() -> Self {
        Slab {
            bases: Vec::new(),
            initialized: 0,
            free_head: NIL,
            occupied: 0,
            top_generation: 0,
            floor: 0,
            shrink: Shrink::NONE,
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

    /// Stores a new entry with its deadline, value and links, and returns its slot and
    /// generation; or hands `value` back when all `MAX_SLOTS` slots are taken.
    #[inline]
    pub(crate) fn alloc(
        &mut self,
        deadline: u64,
        value: T,
        prev: u32,
        next: u32,
    ) -> Result<(u32, u32), T> {
        if self.free_head == NIL && !self.scan_for_free() && !self.grow() {
            return Err(value);
        }
        let index = self.free_head;
        let entry = self.entry_mut(index);
        debug_assert!(!entry.is_occupied());
        let free_next = entry.next;
        entry.value.write(value);
        entry.generation = entry.generation.wrapping_add(1);
        entry.set_deadline(deadline);
        entry.prev = prev;
        entry.next = next;
        let generation = entry.generation;
        self.free_head = free_next;
        self.occupied += 1;
        self.top_generation = self.top_generation.max(generation);
        if index < self.shrink.cursor {
            // Wrapping: counted with no shrink under way too, where it means nothing (a
            // shrink starts it at 0).
            self.shrink.below = self.shrink.below.wrapping_add(1);
        }
        Ok((index, generation))
    }

    /// Puts the next never-used slot, in a new chunk if the last one is full, on the (empty)
    /// free list. Returns false when all `MAX_SLOTS` slots are in use.
    #[inline(never)]
    fn grow(&mut self) -> bool {
        if self.initialized == MAX_SLOTS {
            return false;
        }
        let index = self.initialized;
        let chunk = chunk_of::<FIRST_CHUNK_BITS>(index);
        if chunk == self.bases.len() {
            let Some(layout) = chunk_layout::<T>(chunk) else {
                return false;
            };
            // An `Entry` is at least 20 bytes, so the layout is not zero-sized; its pages
            // are committed only as entries are used.
            let memory = pages::allocate_zeroed(layout, true).cast::<Entry<T>>();
            self.bases
                .push(memory.wrapping_sub(first_index::<FIRST_CHUNK_BITS>(chunk)));
        }
        let free = Entry {
            value: MaybeUninit::uninit(),
            deadline: [0; 2],
            prev: NIL,
            next: self.free_head,
            generation: self.floor,
        };
        // SAFETY: `index` lies in chunk `chunk`, which is allocated (just above, or earlier
        // since chunks are made in order), so the pointer is in bounds of that allocation
        // and suitably aligned; the slot is uninitialised, so nothing is overwritten
        // without being dropped. The entry is free (even generation, value uninitialised),
        // so `index < initialized` keeps the invariant.
        unsafe { self.bases[chunk].wrapping_add(index as usize).write(free) };
        self.initialized += 1;
        self.free_head = index;
        true
    }

    /// The entry a key names, if the key is still current.
    #[inline]
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
        // SAFETY: the slot is occupied (checked above), and by the `bases` invariant an
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
    /// retires it when its generation would wrap. Returns the value and the entry's links
    /// as they were, so that the caller can close the gap in its list without reading the
    /// entry again.
    #[inline]
    pub(crate) fn free(&mut self, index: u32) -> (T, u32, u32) {
        let free_head = self.free_head;
        let listed = self.shrink.lists(index);
        let entry = self.entry_mut(index);
        assert!(entry.is_occupied(), "slab: double free of slot {index}");
        // SAFETY: the slot is occupied, so its value is initialised; bumping the generation
        // to an even number below marks it uninitialised, so it is read out exactly once.
        let value = unsafe { entry.value.assume_init_read() };
        let links = (entry.prev, entry.next);
        entry.generation = entry.generation.wrapping_add(1);
        let retired = entry.generation == 0;
        if retired {
            entry.next = RETIRED;
        } else if listed {
            entry.next = free_head;
            self.free_head = index;
        }
        self.occupied -= 1;
        if index < self.shrink.cursor {
            self.shrink.below = self.shrink.below.wrapping_sub(1);
        }
        (value, links.0, links.1)
    }

    /// One step of giving memory back, for the slab's owner to call now and then (the
    /// engine's reaper does every pass). Once the entries held drop below an eighth of
    /// those ever initialised, the free list is rebuilt from the free entries below a
    /// limit (see `keep_limit`), `SCAN_BUDGET` entries a step, and the chunks above the
    /// limit are freed as soon as none of their entries holds a value. If entries come
    /// back meanwhile (more than half the limit), the shrink is given up and every free
    /// entry listed again. Returns whether there is more to do at the next step.
    pub(crate) fn shrink(&mut self) -> bool {
        if self.shrink.cursor == u32::MAX {
            let limit = keep_limit::<FIRST_CHUNK_BITS>(self.occupied, 4, KEEP_CHUNKS);
            if self.initialized <= limit
                || self.occupied.saturating_mul(8) >= self.initialized
                // The floor after the shrink must not wrap (never so in practice).
                || self.top_generation > u32::MAX - 4
            {
                return false;
            }
            self.shrink = Shrink {
                cursor: 0,
                end: limit,
                limit,
                below: 0,
            };
            self.free_head = NIL;
        }
        if self.shrink.limit != u32::MAX && self.occupied.saturating_mul(2) > self.shrink.limit {
            self.give_up_shrink();
        }
        let stop = self
            .shrink
            .end
            .min(self.shrink.cursor.saturating_add(SCAN_BUDGET));
        while self.shrink.cursor < stop {
            self.look_at_next();
        }
        if self.shrink.cursor < self.shrink.end {
            return true;
        }
        let limit = self.shrink.limit;
        if limit == u32::MAX {
            self.shrink = Shrink::NONE;
        } else if self.top_generation > u32::MAX - 4 {
            // A generation handed out while the shrink waited is so high that the floor
            // would wrap (after some 2^31 reuses of one entry): keep the chunks.
            self.give_up_shrink();
            return true;
        } else if self.shrink.below == self.occupied {
            // Nothing at or above the limit holds a value: those chunks go.
            let keep = chunk_of::<FIRST_CHUNK_BITS>(limit);
            for (chunk, &base) in self.bases.iter().enumerate().skip(keep) {
                // SAFETY: as in `Drop`: the pointer and layout this chunk was allocated
                // with; its entries hold no value, and the chunk is forgotten just below.
                unsafe { dealloc_chunk::<T>(base, chunk) };
            }
            self.bases.truncate(keep);
            self.initialized = limit;
            self.floor = (self.top_generation | 1).wrapping_add(1);
            self.shrink = Shrink::NONE;
            // The entries held may have fallen further while this one waited: the next
            // shrink begins at once (each frees chunks, so this recursion is short).
            return self.shrink();
        }
        false
    }

    /// Gives the shrink under way up: the look goes on over every initialised entry, and
    /// lists every free one.
    fn give_up_shrink(&mut self) {
        self.shrink.limit = u32::MAX;
        self.shrink.end = self.initialized;
    }

    /// Looks at the entry at the shrink's cursor: lists it if it is free, counts it if not.
    fn look_at_next(&mut self) {
        let index = self.shrink.cursor;
        self.shrink.cursor += 1;
        let free_head = self.free_head;
        let entry = self.entry_mut(index);
        if entry.is_occupied() {
            self.shrink.below += 1;
        } else if entry.next != RETIRED {
            entry.next = free_head;
            self.free_head = index;
        }
    }

    /// Under a shrink, looks on for a free entry and lists it; false if there is none to
    /// look at. The free list running dry under a shrink means the room kept is too small:
    /// the shrink is given up, and the entries left off are looked at before any growth.
    fn scan_for_free(&mut self) -> bool {
        if self.shrink.cursor != u32::MAX && self.shrink.limit != u32::MAX {
            self.give_up_shrink();
        }
        while self.shrink.cursor < self.shrink.end {
            self.look_at_next();
            if self.free_head != NIL {
                return true;
            }
        }
        false
    }

    /// `lookup` and `free` in one: the value and links of the timer the key names, if the
    /// key is current.
    #[inline]
    pub(crate) fn take(&mut self, index: u32, generation: u32) -> Option<(T, u32, u32)> {
        self.lookup(index, generation)?;
        Some(self.free(index))
    }

    /// An initialised entry. Panics on an index that was never handed out: callers pass
    /// indices taken from links or from keys already checked by `lookup`.
    #[inline]
    pub(crate) fn entry(&self, index: u32) -> &Entry<T> {
        // SAFETY: `slot` returns a pointer to an initialised entry of this slab, and
        // `&self` keeps the slab (so the entry) alive and unmodified for the borrow.
        unsafe { &*self.slot(index) }
    }

    #[inline]
    pub(crate) fn entry_mut(&mut self, index: u32) -> &mut Entry<T> {
        // SAFETY: as in `entry`; `&mut self` makes the borrow unique.
        unsafe { &mut *self.slot(index) }
    }

    /// The address of initialised slot `index`; panics if it is not one.
    #[inline]
    fn slot(&self, index: u32) -> *mut Entry<T> {
        assert!(index < self.initialized, "slab: slot out of range");
        let chunk = chunk_of::<FIRST_CHUNK_BITS>(index);
        // SAFETY: `index < initialized`, and chunks are made in order as `initialized`
        // grows into them, so chunk `chunk` exists. (An unchecked index saves the bounds
        // check that this assertion already implies.)
        let base = unsafe { *self.bases.get_unchecked(chunk) };
        // In bounds of chunk `chunk`'s allocation, since `index` lies in that chunk.
        base.wrapping_add(index as usize)
    }
}

impl<T> Drop for Slab<T> {
    fn drop(&mut self) {
        if std::mem::needs_drop::<T>() {
            for index in 0..self.initialized {
                let entry = self.entry_mut(index);
                if entry.is_occupied() {
                    // SAFETY: occupied, so the value is initialised; the slab is going away
                    // and nothing reads this value again.
                    unsafe { entry.value.assume_init_drop() };
                }
            }
        }
        for (chunk, &base) in self.bases.iter().enumerate() {
            // SAFETY: the slab's own chunk, freed once, here. Entries need no drop beyond
            // their values, dropped above.
            unsafe { dealloc_chunk::<T>(base, chunk) };
        }
    }
}
