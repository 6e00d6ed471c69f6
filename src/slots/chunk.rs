//! Where the slots live: chunks that double in size (chunk `c` holds `64 << c` slots),
//! laid out as the wheel's slab lays out its entries, so that a slot's index says which
//! chunk holds it and where; and the chunks' memory, made and freed here.

use super::Slot;
use crate::slab;
#[cfg(loom)]
use std::ptr;

/// log2 of the first chunk's length; 1 under loom, so that a model fills a chunk and gives
/// it back in a few steps.
pub(super) const FIRST_CHUNK_BITS: u32 = if cfg!(loom) { 1 } else { 6 };
/// Enough chunks for `MAX_SLOTS` slots.
pub(crate) const CHUNKS: usize = 32 - FIRST_CHUNK_BITS as usize;

/// The chunk of slot `index` (`CHUNKS` or more for an index past `MAX_SLOTS`).
pub(crate) fn chunk_of(index: u32) -> usize {
    slab::chunk_of::<FIRST_CHUNK_BITS>(index)
}

/// Where slot `index` lives: (chunk, offset), in the wheel slab's geometric layout.
pub(super) fn locate(index: u32) -> (usize, usize) {
    let chunk = chunk_of(index);
    (chunk, index as usize - first_index(chunk) as usize)
}

pub(super) fn chunk_len(chunk: usize) -> usize {
    slab::chunk_len::<FIRST_CHUNK_BITS>(chunk)
}

pub(super) fn first_index(chunk: usize) -> u32 {
    slab::first_index::<FIRST_CHUNK_BITS>(chunk) as u32
}

/// A chunk of `len` fresh slots, on huge pages if `huge` (and it is big enough, see
/// `pages`), owned by the caller until it frees it with `dealloc_chunk`.
///
/// Outside loom the chunk is zeroed memory mapped from the OS (see `pages`), which is what
/// `Slot::new` builds: all-zero atomics are valid, and the payload cell may hold anything.
/// So installing a chunk of millions of slots costs a system call, not a pass over them
/// (the OS hands out zeroed pages as they are first touched), a producer that loses the
/// race to install it wastes nothing, and a chunk given back leaves the process whatever
/// the global allocator. Loom's atomics are not plain integers, so loom builds them one by
/// one.
pub(super) fn new_chunk<T>(len: usize, huge: bool) -> *mut Slot<T> {
    #[cfg(loom)]
    return {
        let _ = huge;
        Box::into_raw((0..len).map(|_| Slot::new()).collect::<Box<[Slot<T>]>>()).cast()
    };
    #[cfg(not(loom))]
    crate::pages::allocate_zeroed(chunk_layout::<T>(len), huge).cast()
}

/// The memory layout of a chunk of `len` slots.
#[cfg(not(loom))]
pub(super) fn chunk_layout<T>(len: usize) -> std::alloc::Layout {
    // A chunk holds at least 64 slots of at least 32 bytes (atomics), so its layout is not
    // zero-sized; chunks hold at most 2^31 slots, far below `isize::MAX` bytes.
    crate::pages::huge_aligned(
        std::alloc::Layout::array::<Slot<T>>(len).expect("chunks fit in memory"),
    )
}

/// The slots of chunk `chunk` made by `new_chunk`.
///
/// # Safety
///
/// `base` came from `new_chunk(chunk_len(chunk))` and is not freed while the slice is
/// used.
pub(super) unsafe fn chunk_slots<'a, T>(base: *mut Slot<T>, chunk: usize) -> &'a [Slot<T>] {
    // SAFETY: the memory holds `chunk_len(chunk)` valid slots (zeroed ones are valid, see
    // `new_chunk`) and outlives the borrow, by the caller's contract.
    unsafe { std::slice::from_raw_parts(base, chunk_len(chunk)) }
}

/// Frees chunk `chunk` made by `new_chunk`. Its slots hold no payload (or the caller has
/// taken them out): a slot has no drop glue of its own outside loom.
///
/// # Safety
///
/// `base` came from `new_chunk(chunk_len(chunk))`, is freed once, and nobody holds a
/// reference into it.
pub(super) unsafe fn dealloc_chunk<T>(base: *mut Slot<T>, chunk: usize) {
    #[cfg(loom)]
    // SAFETY: `new_chunk` made it a boxed slice of this length; the caller gives it up.
    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(base, chunk_len(chunk))) });
    #[cfg(not(loom))]
    // SAFETY: mapped by `new_chunk` with this layout, freed once, never used again.
    unsafe {
        crate::pages::free(base.cast(), chunk_layout::<T>(chunk_len(chunk)))
    };
}

/// Frees a chunk given back, whose slots are all free. Under loom the memory is kept and
/// each slot marked freed instead, so that a model sees any later access (see
/// `Slot::check_live`) rather than reading freed memory.
///
/// # Safety
///
/// As for `dealloc_chunk`.
pub(super) unsafe fn free_chunk<T>(base: *mut Slot<T>, chunk: usize) {
    #[cfg(loom)]
    // SAFETY: the chunk is live until here (its memory is kept under loom).
    for slot in unsafe { chunk_slots(base, chunk) } {
        // SAFETY: loom checks this write against every other access to the flag.
        slot.freed.with_mut(|freed| unsafe { *freed = true });
    }
    #[cfg(not(loom))]
    // SAFETY: the caller's contract is `dealloc_chunk`'s.
    unsafe {
        dealloc_chunk(base, chunk)
    };
}

/// A chunk pointer that may cross to whichever thread runs the deferred free.
pub(super) struct ChunkPtr<T>(pub(super) *mut Slot<T>);

// SAFETY: the pointer is only used to free a chunk no thread reaches any more (see
// `Slots::give_back_top`), and a chunk given back holds no payload, so no `T` moves.
unsafe impl<T> Send for ChunkPtr<T> {}
