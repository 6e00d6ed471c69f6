//! A shard's shared slab: timer slots that any thread may take and look up, and that only
//! the shard's reaper gives back.
//!
//! Slots live in chunks that never move (chunk `c` holds `64 << c` slots), installed with a
//! compare-and-swap by whichever thread first needs them, so a slot's address is stable and
//! other threads can reach its state word at any time. Free slots form a Treiber stack whose
//! head carries a tag that changes on every pop and push, so a producer whose pop raced with
//! another pop and a push of the same slot fails its CAS instead of corrupting the stack
//! (the ABA problem). Producers pop; the reaper pushes, and so does a producer giving back a
//! slot the closed inbox refused (a tagged push is safe with any number of pushers).
//!
//! Each slot has one state word: generation (high 32 bits), state (low 2 bits) and two
//! flags above the state, `RESETTING` and `QUEUED`:
//!
//! ```text
//!   g|FREE --producer--> g|PENDING --reaper--> g|FIRING    --reaper--> (g+1)|FREE
//!                                 \--cancel--> g|CANCELLED --reaper--> (g+1)|FREE
//! ```
//!
//! The ground rules:
//! - A producer that took a free slot owns its payload and deadline until it publishes the
//!   slot: it marks it `g|PENDING` and pushes it on the inbox, whose Release CAS is the
//!   publication; the slot's handle names generation `g`.
//! - `cancel` and the reaper's firing both start from `g|PENDING` with a CAS, so exactly one
//!   of them wins: a timer either runs once or is cancelled, never both. A handle of another
//!   generation, or a slot in any other state, fails the CAS and changes nothing.
//! - `reset` sets `RESETTING` on a `g|PENDING` slot, which gives it the deadline field;
//!   then it clears the flag and sets `QUEUED`. The reaper fires only a slot with neither
//!   flag, and frees none with `RESETTING`, so a reset never writes a deadline into a slot
//!   that has moved on to another timer. A cancel during a reset still wins at once (it
//!   marks the slot `CANCELLED` and leaves the flag for the resetter to clear).
//! - `QUEUED` says the slot is on the shard's list of changes (cancels and resets), so it
//!   is pushed there at most once at a time; the reaper clears it as it takes the change.
//! - Only the reaper moves a published slot to `(g+1)|FREE`, after it has taken the
//!   payload and unlinked the slot from its wheel (a producer may free a slot it never
//!   published); a slot whose generation would wrap is retired
//!   instead of reused, so no handle ever names a later timer.

use crate::handle::Key;
use crate::slab::{self, NIL};
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::mem::MaybeUninit;
use std::ptr;

/// Slot states, in the low bits of the state word.
pub(crate) const FREE: u64 = 0;
pub(crate) const PENDING: u64 = 1;
pub(crate) const FIRING: u64 = 2;
pub(crate) const CANCELLED: u64 = 3;
const STATE_MASK: u64 = 3;
/// Flag: a `reset` owns the slot's deadline field (see the module doc).
pub(crate) const RESETTING: u64 = 4;
/// Flag: the slot is on the shard's list of changes.
pub(crate) const QUEUED: u64 = 8;
/// Both flags.
pub(crate) const FLAGS: u64 = RESETTING | QUEUED;

/// log2 of the first chunk's length.
const FIRST_CHUNK_BITS: u32 = 6;
/// Enough chunks for `MAX_SLOTS` slots.
const CHUNKS: usize = 26;
/// Slots a shard can hold; handles keep slot numbers in 31 bits.
pub(crate) const MAX_SLOTS: u32 = 1 << 31;

/// The state word of generation `generation` in state `state`.
pub(crate) const fn word(generation: u32, state: u64) -> u64 {
    ((generation as u64) << 32) | state
}

/// The generation and state of a state word (its flags left out).
pub(crate) const fn split(word: u64) -> (u32, u64) {
    ((word >> 32) as u32, word & STATE_MASK)
}

/// One timer slot, shared between the producers, cancellers and the reaper.
pub(crate) struct Slot<T> {
    pub(crate) state: AtomicU64,
    /// The tick it is due at; written by the producer before it publishes the slot, and
    /// after that only by a `reset` holding the `RESETTING` flag.
    pub(crate) deadline: AtomicU64,
    /// Next slot in the free stack or in the shard's inbox (a slot is never in both).
    pub(crate) link: AtomicU32,
    /// Next slot in the shard's list of changes (cancels and resets).
    pub(crate) change_link: AtomicU32,
    /// The slot's key in the reaper's wheel plus one, 0 when it is not in the wheel (so an
    /// all-zero slot is a valid fresh one). Only the reaper touches it; an atomic rather
    /// than a cell because it costs nothing and needs no `unsafe`.
    wheel_key: AtomicU64,
    /// Initialised from the producer's write until the reaper takes it out.
    payload: UnsafeCell<MaybeUninit<T>>,
}

impl<T> Slot<T> {
    /// A fresh slot: every field zero, as in a chunk from `new_chunk` outside loom. The
    /// links are written before they are read (by the pushes that chain the slot).
    #[cfg(loom)]
    fn new() -> Self {
        Slot {
            state: AtomicU64::new(word(0, FREE)),
            deadline: AtomicU64::new(0),
            link: AtomicU32::new(0),
            change_link: AtomicU32::new(0),
            wheel_key: AtomicU64::new(0),
            payload: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The slot's key in the reaper's wheel, if it is in it. Reaper only.
    pub(crate) fn wheel_key(&self) -> Option<Key> {
        // Relaxed: the key is the reaper's own bookkeeping.
        decode_key(self.wheel_key.load(Ordering::Relaxed))
    }

    /// Records the slot's key in the reaper's wheel. Reaper only.
    pub(crate) fn set_wheel_key(&self, key: Option<Key>) {
        // The wheel's keys never have all bits set (its slab indices stay below 2^31), so
        // the `+ 1` cannot wrap.
        let bits = key.map_or(0, |key| key.to_bits() + 1);
        // Relaxed: as in `wheel_key`.
        self.wheel_key.store(bits, Ordering::Relaxed);
    }

    /// Takes the slot's key in the reaper's wheel out, leaving none. Reaper only.
    pub(crate) fn take_wheel_key(&self) -> Option<Key> {
        // Relaxed: as in `wheel_key`.
        decode_key(self.wheel_key.swap(0, Ordering::Relaxed))
    }

    /// Stores the payload of a slot the caller has just taken from `Slots::take`.
    ///
    /// # Safety
    ///
    /// The caller owns the slot: it took it from `Slots::take` and has not published it.
    pub(crate) unsafe fn write_payload(&self, payload: T) {
        // SAFETY: the caller owns the slot, so nobody else reads or writes the payload.
        self.payload
            .with_mut(|cell| unsafe { (*cell).write(payload) });
    }

    /// Moves the payload out.
    ///
    /// # Safety
    ///
    /// The caller owns the payload (the reaper, having won the slot's state word, or the
    /// producer of a slot it never published), the payload is initialised, and it is read
    /// out once: the caller frees the slot afterwards.
    pub(crate) unsafe fn take_payload(&self) -> T {
        // SAFETY: by the contract above the payload is initialised and no other thread
        // touches it while the slot is published (producers only write before publishing).
        self.payload
            .with_mut(|cell| unsafe { (*cell).assume_init_read() })
    }
}

/// A wheel key as `Slot::wheel_key` stores it: plus one, 0 for none.
fn decode_key(bits: u64) -> Option<Key> {
    bits.checked_sub(1).map(Key::from_bits)
}

/// Where slot `index` lives: (chunk, offset), in the wheel slab's geometric layout.
fn locate(index: u32) -> (usize, usize) {
    let chunk = slab::chunk_of::<FIRST_CHUNK_BITS>(index);
    (
        chunk,
        index as usize - slab::first_index::<FIRST_CHUNK_BITS>(chunk),
    )
}

fn chunk_len(chunk: usize) -> usize {
    slab::chunk_len::<FIRST_CHUNK_BITS>(chunk)
}

/// A chunk of `len` fresh slots, owned by the caller (see `chunk_box`).
///
/// Outside loom the chunk is zeroed memory, which is what `Slot::new` builds: all-zero
/// atomics are valid, and the payload cell may hold anything. So installing a chunk of
/// millions of slots costs an allocation, not a pass over them (the OS hands out zeroed
/// pages as they are first touched), and a producer that loses the race to install it
/// wastes nothing. Loom's atomics are not plain integers, so loom builds them one by one.
fn new_chunk<T>(len: usize) -> *mut Slot<T> {
    #[cfg(loom)]
    return Box::into_raw((0..len).map(|_| Slot::new()).collect::<Box<[Slot<T>]>>()).cast();
    #[cfg(not(loom))]
    {
        let layout = std::alloc::Layout::array::<Slot<T>>(len).expect("chunks fit in memory");
        // SAFETY: the layout has a non-zero size: chunks hold at least 64 slots and a slot
        // holds atomics.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        base.cast()
    }
}

/// Takes back ownership of chunk `chunk` made by `new_chunk`, to drop it.
///
/// # Safety
///
/// `base` came from `new_chunk(chunk_len(chunk))`, is not owned elsewhere, and nobody
/// holds a reference into it.
unsafe fn chunk_box<T>(base: *mut Slot<T>, chunk: usize) -> Box<[Slot<T>]> {
    // SAFETY: `new_chunk` allocates with the global allocator and the layout of a
    // `[Slot<T>]` of this length, as `Box` does, and its memory holds valid slots (zeroed
    // ones are valid, see `new_chunk`); the caller gives up ownership.
    unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(base, chunk_len(chunk))) }
}

/// The free stack's head: a tag in the high half, a slot index (or `NIL`) in the low half.
fn free_head(tag: u32, index: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(index)
}

/// The shared slots of one shard.
pub(crate) struct Slots<T> {
    /// Chunk `c`, or null until some thread installs it; never changes once installed.
    chunks: [AtomicPtr<Slot<T>>; CHUNKS],
    /// Slots handed out at least once; every index below is in an installed chunk or in
    /// one being installed by the thread that claimed the index.
    claimed: AtomicU32,
    /// Head of the free stack (see `free_head`); on its own cache line, as producers and
    /// the reaper both write it while every thread reads `chunks`.
    free: CachePadded<AtomicU64>,
}

// SAFETY: slots are shared between threads by design: every field other threads touch is
// atomic, and the payload cell is handed from producer to reaper under the state word's
// Release/Acquire protocol (see the module doc), which moves a `T` across threads: `T:
// Send` is what that needs. No `&T` is ever shared, so `T: Sync` is not required.
unsafe impl<T: Send> Sync for Slots<T> {}
// SAFETY: as above; owning the slots owns the payloads, which may move with it.
unsafe impl<T: Send> Send for Slots<T> {}

impl<T> Slots<T> {
    pub(crate) fn new() -> Self {
        Slots {
            chunks: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            claimed: AtomicU32::new(0),
            free: CachePadded::new(AtomicU64::new(free_head(0, NIL))),
        }
    }

    /// Takes a free slot for a producer, which then owns it until it publishes it. Returns
    /// its index and the slot, or `None` when all `MAX_SLOTS` slots are in use.
    pub(crate) fn take(&self) -> Option<(u32, &Slot<T>)> {
        // Acquire: pairs with the reaper's Release push, so the slot's `link` and the state
        // it freed the slot with are visible.
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            let (tag, index) = ((head >> 32) as u32, head as u32);
            if index == NIL {
                return self.claim();
            }
            let slot = self.get(index).expect("free stack holds installed slots");
            // Relaxed: if the slot was popped and pushed again meanwhile, the tag differs and
            // the CAS below fails, whatever this read returned.
            let next = slot.link.load(Ordering::Relaxed);
            match self.free.compare_exchange_weak(
                head,
                free_head(tag.wrapping_add(1), next),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some((index, slot)),
                Err(current) => head = current,
            }
        }
    }

    /// A never-used slot, installing its chunk if this is the chunk's first slot.
    fn claim(&self) -> Option<(u32, &Slot<T>)> {
        // Relaxed: the counter only hands out distinct indices; the chunk pointer carries
        // the synchronisation.
        let index = self
            .claimed
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < MAX_SLOTS).then_some(n + 1)
            })
            .ok()?;
        let (chunk, offset) = locate(index);
        let mut base = self.chunks[chunk].load(Ordering::Acquire);
        if base.is_null() {
            let fresh = new_chunk::<T>(chunk_len(chunk));
            // AcqRel: Release publishes the initialised chunk to every thread that loads the
            // pointer with Acquire; Acquire on failure sees the winner's chunk.
            base = match self.chunks[chunk].compare_exchange(
                ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => fresh,
                Err(installed) => {
                    // SAFETY: `fresh` came from `new_chunk` with this length just above and
                    // lost the race, so nothing else has seen it.
                    drop(unsafe { chunk_box(fresh, chunk) });
                    installed
                }
            };
        }
        // SAFETY: `base` is an installed chunk of `chunk_len(chunk)` slots, `offset` is below
        // that, and chunks live as long as `self`.
        Some((index, unsafe { &*base.add(offset) }))
    }

    /// The slot at `index`, if it exists. Any `u32` may be asked for.
    pub(crate) fn get(&self, index: u32) -> Option<&Slot<T>> {
        if index >= MAX_SLOTS {
            return None;
        }
        let (chunk, offset) = locate(index);
        // Acquire: pairs with the installing CAS, so the slots are seen initialised.
        let base = self.chunks[chunk].load(Ordering::Acquire);
        // SAFETY: a non-null chunk pointer is an installed chunk of `chunk_len(chunk)`
        // slots, `offset` is below that, and chunks live as long as `self`.
        (!base.is_null()).then(|| unsafe { &*base.add(offset) })
    }

    /// Gives a slot back after its payload was taken: bumps its generation and chains it
    /// on `freed`, or retires it when the generation would wrap. Called by the owner of
    /// the slot: the reaper, or a producer whose push was refused. The slot is free from
    /// here on (no handle reaches its payload), and reusable once `freed` is recycled.
    pub(crate) fn release(&self, index: u32, slot: &Slot<T>, generation: u32, freed: &mut Freed) {
        let next_generation = generation.wrapping_add(1);
        // Release: a producer that later sees the slot FREE (through the free stack's
        // Acquire) also sees everything the reaper did with the payload.
        slot.state
            .store(word(next_generation, FREE), Ordering::Release);
        if next_generation == 0 {
            return;
        }
        // Relaxed: published by `recycle`'s Release CAS.
        slot.link.store(freed.first, Ordering::Relaxed);
        if freed.first == NIL {
            freed.last = index;
        }
        freed.first = index;
    }

    /// Pushes the slots chained on `freed` on the free stack, with one CAS for them all:
    /// the reaper frees many slots a pass, and producers pop from the same head.
    pub(crate) fn recycle(&self, freed: &mut Freed) {
        if freed.first == NIL {
            return;
        }
        let last = self.get(freed.last).expect("freed slots are installed");
        let mut head = self.free.load(Ordering::Relaxed);
        loop {
            let (tag, top) = ((head >> 32) as u32, head as u32);
            last.link.store(top, Ordering::Relaxed);
            // Release: publishes the chain's links and FREE states to the producers that
            // pop them.
            match self.free.compare_exchange_weak(
                head,
                free_head(tag.wrapping_add(1), freed.first),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(current) => head = current,
            }
        }
        *freed = Freed::new();
    }
}

/// Slots freed but not yet back on the free stack, chained through their `link`.
#[derive(Debug)]
pub(crate) struct Freed {
    first: u32,
    last: u32,
}

impl Freed {
    pub(crate) const fn new() -> Self {
        Freed {
            first: NIL,
            last: NIL,
        }
    }
}

impl<T> Drop for Slots<T> {
    fn drop(&mut self) {
        // Slots at or above `claimed` were never handed out, so hold no payload; not
        // visiting them leaves the untouched pages of a huge chunk untouched.
        let claimed = self.claimed.load(Ordering::Relaxed);
        for (chunk, pointer) in self.chunks.iter().enumerate() {
            // Acquire: `&mut self` already excludes other threads; this only makes the
            // chunk's contents visible as any reader's load would.
            let base = pointer.load(Ordering::Acquire);
            if base.is_null() {
                continue;
            }
            // SAFETY: installed chunks come from `new_chunk` with this length, and `&mut
            // self` means no other thread holds a reference into them.
            let slots = unsafe { chunk_box(base, chunk) };
            let first = slab::first_index::<FIRST_CHUNK_BITS>(chunk);
            let used = (claimed as usize).saturating_sub(first).min(slots.len());
            for slot in &slots[..used] {
                let (_, state) = split(slot.state.load(Ordering::Relaxed));
                if state == PENDING || state == CANCELLED {
                    // SAFETY: published and not yet taken by the reaper (which takes the
                    // payload only when it fires or frees the slot), so initialised; the
                    // slots are going away, so it is read once.
                    drop(unsafe { slot.take_payload() });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn state_words_round_trip() {
        for generation in [0, 1, u32::MAX] {
            for state in [FREE, PENDING, FIRING, CANCELLED] {
                assert_eq!(split(word(generation, state)), (generation, state));
            }
        }
    }

    #[test]
    fn released_slots_are_reused_with_the_next_generation() {
        let slots: Slots<u8> = Slots::new();
        let (a, slot) = slots.take().unwrap();
        // SAFETY: just taken, unpublished.
        unsafe { slot.write_payload(7) };
        slot.state.store(word(0, PENDING), Ordering::Release);
        // SAFETY: published, taken once, then released.
        assert_eq!(unsafe { slot.take_payload() }, 7);
        let mut freed = Freed::new();
        slots.release(a, slot, 0, &mut freed);
        assert_ne!(
            slots.take().unwrap().0,
            a,
            "not reusable before it is recycled"
        );
        slots.recycle(&mut freed);
        let (b, again) = slots.take().unwrap();
        assert_eq!(b, a);
        assert_eq!(split(again.state.load(Ordering::Relaxed)), (1, FREE));
        assert!(slots.get(MAX_SLOTS).is_none());
        assert!(slots.get(5_000).is_none(), "chunk never installed");
    }

    /// Resident memory of this process, in bytes.
    #[cfg(all(target_os = "linux", not(miri)))]
    fn resident_bytes() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib * 1024
    }

    // A producer used to build every slot of a fresh chunk before installing it: for the
    // chunk of 4M slots here, 200 MB written while its `schedule` call waited.
    #[test]
    #[cfg(all(target_os = "linux", not(miri)))]
    fn installing_a_chunk_does_not_touch_its_slots() {
        let slots: Slots<u64> = Slots::new();
        let chunk = 16;
        let first = slab::first_index::<FIRST_CHUNK_BITS>(chunk) as u32;
        slots.claimed.store(first, Ordering::Relaxed);
        let chunk_bytes = chunk_len(chunk) * std::mem::size_of::<Slot<u64>>();
        let before = resident_bytes();
        let (index, slot) = slots.take().unwrap();
        let grown = resident_bytes().saturating_sub(before);
        assert_eq!(index, first);
        assert!(
            grown < chunk_bytes / 8,
            "installing a {chunk_bytes}-byte chunk made {grown} bytes resident"
        );
        assert_eq!(split(slot.state.load(Ordering::Relaxed)), (0, FREE));
        assert_eq!(slot.wheel_key(), None);
        // The fresh slot works: the drop below must find and drop its payload.
        // SAFETY: just taken, unpublished.
        unsafe { slot.write_payload(9) };
        slot.state.store(word(0, PENDING), Ordering::Release);
    }

    #[test]
    fn a_slot_at_the_last_generation_is_retired() {
        let slots: Slots<()> = Slots::new();
        let (a, slot) = slots.take().unwrap();
        let mut freed = Freed::new();
        slots.release(a, slot, u32::MAX, &mut freed);
        slots.recycle(&mut freed);
        let (b, _) = slots.take().unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn concurrent_takers_get_distinct_slots() {
        const PER_THREAD: usize = if cfg!(miri) { 100 } else { 5_000 };
        let slots: Arc<Slots<u64>> = Arc::new(Slots::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let slots = Arc::clone(&slots);
                std::thread::spawn(move || {
                    (0..PER_THREAD)
                        .map(|_| slots.take().unwrap().0)
                        .collect::<Vec<u32>>()
                })
            })
            .collect();
        let mut all: Vec<u32> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4 * PER_THREAD);
    }
}
