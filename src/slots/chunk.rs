//! Where the slots live: chunks that double in size (chunk `c` holds `64 << c` slots),
//! laid out as the wheel's slab lays out its entries, so that a slot's index says which
//! chunk holds it and where; and the chunks' memory, made and freed here.
//!
//! A chunk holds its slots' controls (the state word, 4 bytes each) packed together at its
//! front, then their change links (4 bytes each, see `Slot::change_link`), then their
//! bodies (deadline, links, payload). A cancel touches only the control: with a million
//! timers pending the controls fill 4 MB, which a last-level cache can keep, while the
//! bodies (32 MB) cannot. With the state word in the body, engine W1 at a million pending
//! (every cancel names a random timer) spent a third of the producing thread's time
//! waiting for that word; packed apart, it ran about 10 % faster against tokio's timers on
//! our 2-core test VM (median of six paired runs). The change link had its place beside
//! the state word until cancels went through the cancelling thread's stage (see `stage`):
//! then only a reset, or a cancel that cannot use a stage (the thread has none on the
//! shard, or the reaper holds it), writes it, and out of the control it halves the lines
//! a million controls take.

use super::{Body, Control, Slot};
use crate::slab;
use crate::sync::AtomicU32;
use std::alloc::Layout;

/// log2 of the first chunk's length; 1 under loom, so that a model fills a chunk and gives
/// it back in a few steps.
pub(super) const FIRST_CHUNK_BITS: u32 = if cfg!(loom) { 1 } else { 6 };
/// Enough chunks for `MAX_SLOTS` slots.
pub(crate) const CHUNKS: usize = 32 - FIRST_CHUNK_BITS as usize;

/// The chunk of slot `index` (`CHUNKS` or more for an index past `MAX_SLOTS`).
pub(crate) fn chunk_of(index: u32) -> usize {
    slab::chunk_of::<FIRST_CHUNK_BITS>(index)
}

/// Where slot `index` lives: (chunk, offset), in the wheel slab's geometric layout. The
/// index plus the first chunk's length has its top bit at the chunk's length, and the
/// offset below it: the offset is that sum with its top bit cleared (some ten
/// instructions fewer, on every lookup of a slot, than the index less the chunk's first).
#[inline]
pub(super) fn locate(index: u32) -> (usize, usize) {
    let shifted = u64::from(index) + (1 << FIRST_CHUNK_BITS);
    let top = 63 - shifted.leading_zeros();
    (
        (top - FIRST_CHUNK_BITS) as usize,
        (shifted ^ (1 << top)) as usize,
    )
}

pub(super) fn chunk_len(chunk: usize) -> usize {
    slab::chunk_len::<FIRST_CHUNK_BITS>(chunk)
}

pub(super) fn first_index(chunk: usize) -> u32 {
    slab::first_index::<FIRST_CHUNK_BITS>(chunk) as u32
}

/// Where a chunk of `len` slots keeps its change links: right after the controls (both are
/// 4-byte words). Unchecked, as `bodies_offset`.
fn links_offset(len: usize) -> usize {
    len * size_of::<Control>()
}

/// Where a chunk of `len` slots keeps its bodies: after the controls and the change links,
/// aligned for a body. The arithmetic is unchecked: `chunk_layout` checks it for every
/// chunk before the chunk exists, and the offset is below the size it checked.
fn bodies_offset<T>(len: usize) -> usize {
    (links_offset(len) + len * size_of::<AtomicU32>()).next_multiple_of(align_of::<Body<T>>())
}

/// The memory layout of a chunk of `len` slots: `len` controls, `len` change links (at
/// `links_offset`), then `len` bodies (at `bodies_offset`).
fn chunk_layout<T>(len: usize) -> Layout {
    // A chunk holds at most 2^31 slots of a few words and a payload, far below `isize::MAX`
    // bytes for any payload that fits in memory; the checks say so rather than assume it.
    // A body has atomics, so the size is not 0.
    let (layout, links, bodies) = Layout::array::<Control>(len)
        .and_then(|controls| {
            let (layout, links) = controls.extend(Layout::array::<AtomicU32>(len)?)?;
            let (layout, bodies) = layout.extend(Layout::array::<Body<T>>(len)?)?;
            Ok((layout, links, bodies))
        })
        .expect("chunks fit in memory");
    debug_assert_eq!(links, links_offset(len));
    debug_assert_eq!(bodies, bodies_offset::<T>(len));
    crate::pages::huge_aligned(layout)
}

/// A chunk of `len` fresh slots, on huge pages if `huge` (and it is big enough, see
/// `pages`), owned by the caller until it frees it with `dealloc_chunk`.
///
/// Outside loom the chunk is zeroed memory mapped from the OS (see `pages`), which is what
/// `Control::new` and `Body::new` build: all-zero atomics are valid, and the payload cell
/// may hold anything. So installing a chunk of millions of slots costs a system call, not
/// a pass over them (the OS hands out zeroed pages as they are first touched), a producer
/// that loses the race to install it wastes nothing, and a chunk given back leaves the
/// process whatever the global allocator. Loom's atomics are not plain integers, so loom
/// builds them one by one, in memory of the same layout.
pub(super) fn new_chunk<T>(len: usize, huge: bool) -> *mut u8 {
    let layout = chunk_layout::<T>(len);
    #[cfg(loom)]
    return {
        let _ = huge;
        // SAFETY: the layout's size is not zero (see `chunk_layout`).
        let base = unsafe { std::alloc::alloc(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        for offset in 0..len {
            let (control, link, body) = parts::<T>(base, len, offset);
            // SAFETY: all three lie in the block just allocated for `len` slots, aligned
            // for their types, and are written once, before anyone reads them.
            unsafe {
                control.cast_mut().write(Control::new());
                link.cast_mut().write(AtomicU32::new(0));
                body.cast_mut().write(Body::new());
            }
        }
        base
    };
    #[cfg(not(loom))]
    crate::pages::allocate_zeroed(layout, huge)
}

/// The control, change link and body of the slot at `offset` of a chunk of `len` slots at
/// `base`, as pointers: in bounds if `offset < len` (only the arithmetic is done here).
fn parts<T>(
    base: *mut u8,
    len: usize,
    offset: usize,
) -> (*const Control, *const AtomicU32, *const Body<T>) {
    let control = base.cast::<Control>().wrapping_add(offset);
    let link = base
        .wrapping_add(links_offset(len))
        .cast::<AtomicU32>()
        .wrapping_add(offset);
    let body = base
        .wrapping_add(bodies_offset::<T>(len))
        .cast::<Body<T>>()
        .wrapping_add(offset);
    (control, link, body)
}

/// The slot at `offset` of chunk `chunk`, whose memory starts at `base`.
///
/// # Safety
///
/// `base` came from `new_chunk(chunk_len(chunk))`, `offset` is below `chunk_len(chunk)`,
/// and the chunk is not freed while the slot is used.
pub(super) unsafe fn slot_at<'a, T>(base: *mut u8, chunk: usize, offset: usize) -> Slot<'a, T> {
    let (control, link, body) = parts::<T>(base, chunk_len(chunk), offset);
    // SAFETY: all three are in the chunk (`offset` is in bounds) and initialised (zeroed
    // ones are valid, see `new_chunk`), and the memory outlives the borrow, by the
    // caller's contract.
    unsafe { Slot::new(&*control, &*link, &*body) }
}

/// Asks the CPU to bring the slot at `offset` of chunk `chunk` (at `base`) into its cache:
/// its control and its body. A hint: it reads nothing the program sees and never faults.
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
pub(super) fn prefetch<T>(base: *mut u8, chunk: usize, offset: usize) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    let (control, _, body) = parts::<T>(base, chunk_len(chunk), offset);
    // SAFETY: a prefetch reads no memory the program sees and never faults, whatever the
    // address.
    unsafe {
        _mm_prefetch::<_MM_HINT_T0>(control.cast());
        _mm_prefetch::<_MM_HINT_T0>(body.cast());
    }
}

/// Frees chunk `chunk` made by `new_chunk`. Its slots hold no payload (or the caller has
/// taken them out): a slot has no drop glue of its own outside loom.
///
/// # Safety
///
/// `base` came from `new_chunk(chunk_len(chunk))`, is freed once, and nobody holds a
/// reference into it.
pub(super) unsafe fn dealloc_chunk<T>(base: *mut u8, chunk: usize) {
    let len = chunk_len(chunk);
    #[cfg(loom)]
    for offset in 0..len {
        let (control, link, body) = parts::<T>(base, len, offset);
        // SAFETY: `new_chunk` wrote all three, and the caller gives the chunk up: they are
        // dropped once (loom's atomics and cells have drop glue; a payload cell's
        // `MaybeUninit` drops no `T`).
        unsafe {
            control.cast_mut().drop_in_place();
            link.cast_mut().drop_in_place();
            body.cast_mut().drop_in_place();
        }
    }
    // SAFETY: made by `new_chunk` with this layout, freed once, never used again.
    #[cfg(loom)]
    unsafe {
        std::alloc::dealloc(base, chunk_layout::<T>(len))
    };
    #[cfg(not(loom))]
    // SAFETY: mapped by `new_chunk` with this layout, freed once, never used again.
    unsafe {
        crate::pages::free(base, chunk_layout::<T>(len))
    };
}

/// Frees a chunk given back, whose slots are all free. Under loom the memory is kept and
/// each slot marked freed instead, so that a model sees any later access (see
/// `Body::check_live`) rather than reading freed memory.
///
/// # Safety
///
/// As for `dealloc_chunk`.
pub(super) unsafe fn free_chunk<T>(base: *mut u8, chunk: usize) {
    #[cfg(loom)]
    for offset in 0..chunk_len(chunk) {
        // SAFETY: the chunk is live until here (its memory is kept under loom).
        let slot = unsafe { slot_at::<T>(base, chunk, offset) };
        slot.mark_freed();
    }
    #[cfg(not(loom))]
    // SAFETY: the caller's contract is `dealloc_chunk`'s.
    unsafe {
        dealloc_chunk::<T>(base, chunk)
    };
}

/// A chunk pointer that may cross to whichever thread runs the deferred free.
pub(super) struct ChunkPtr(pub(super) *mut u8);

// SAFETY: the pointer is only used to free a chunk no thread reaches any more (see
// `Slots::give_back_top`), and a chunk given back holds no payload, so no `T` moves.
unsafe impl Send for ChunkPtr {}
