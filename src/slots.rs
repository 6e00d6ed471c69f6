//! A shard's shared slab: timer slots that any thread may take and look up, and that only
//! the shard's reaper gives back.
//!
//! Slots live in chunks that never move (chunk `c` holds `64 << c` slots), installed with a
//! compare-and-swap by whichever thread first needs them, so a slot's address is stable and
//! other threads can reach its state word at any time. Free slots form a Treiber stack whose
//! head carries a tag that changes on every pop and push, so a producer whose pop raced with
//! another pop and a push of the same slot fails its CAS instead of corrupting the stack
//! (the ABA problem). Producers pop; the reaper pushes, and so does a producer giving back a
//! slot the closed inbox refused (a tagged push is safe with any number of pushers). The
//! spare stack of a shrink (below) works the same way, popped by producers and the reaper.
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
//!
//! # Giving memory back
//!
//! After a spike, when the timers pending drop below an eighth of the slots ever handed
//! out (`SHRINK_BELOW`), the reaper gives the top chunks back until what is left holds
//! four times the pending timers (`ROOM`, and at least `KEEP_CHUNKS` chunks). It moves
//! the whole free stack to a second one, the spare stack, and sorts that, at most
//! `SORT_BUDGET` slots or `SORT_TIME` a pass (and comes back every millisecond
//! meanwhile), so that no pass stalls the timers due: slots below the limit go back on the
//! free stack, the others it holds, and so it does with every slot it frees above the
//! limit from then on. Producers that find the free stack empty pop the spare one before
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
//!   (`cancel` and `reset` with any handle, and `take` popping the free stack) are pinned
//!   meanwhile, and the free waits until every thread pinned before the pointer was
//!   cleared has unpinned. Afterwards a stale handle finds no chunk, or a fresh one.
//!
//! If timers come back before the shrink is done (to more than half the room), the held
//! slots go back on the stack. Only the top chunk can go, so a timer that lives long in
//! a high chunk holds the chunks below it too until it fires or is cancelled.

use crate::handle::Key;
use crate::slab::{self, NIL};
use crate::sync::epoch::{self, Guard};
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::Arc;

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

/// log2 of the first chunk's length; 1 under loom, so that a model fills a chunk and gives
/// it back in a few steps.
const FIRST_CHUNK_BITS: u32 = if cfg!(loom) { 1 } else { 6 };
/// Enough chunks for `MAX_SLOTS` slots.
const CHUNKS: usize = 32 - FIRST_CHUNK_BITS as usize;
/// Set in `Slots::claimed` while the reaper gives the top chunk back.
const CLOSED: u64 = 1 << 32;
/// Chunks a shard keeps however few timers are pending (4,032 slots, 200 KB or so; one
/// chunk under loom, miri and the fuzzer, so that a model, test or fuzz case of a few
/// slots gets to shrink).
const KEEP_CHUNKS: usize = if cfg!(any(loom, miri, fuzzing)) { 1 } else { 6 };
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
const SORT_BUDGET: u32 = if cfg!(miri) { 64 } else { 16_384 };
/// ...and how long it may spend on them. A free stack left by a million fired timers is in
/// no order: each slot is a cache and TLB miss, some 200 ns, and 16,384 of them took 3 ms
/// a pass, every timer due then that much late (W2's p99 doubled). One left by a spike
/// cancelled in order is 20 times as fast.
#[cfg(not(loom))]
const SORT_TIME: std::time::Duration = std::time::Duration::from_micros(100);
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
    /// Set when the slot's chunk is freed (loom keeps the memory; see `free_chunk`).
    #[cfg(loom)]
    freed: UnsafeCell<bool>,
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
            freed: UnsafeCell::new(false),
        }
    }

    /// Under loom, fails the model if the slot's chunk was freed: a read of the flag that
    /// races with `free_chunk`'s write is reported by loom, one ordered after it fails here.
    fn check_live(&self) {
        #[cfg(loom)]
        // SAFETY: loom checks this read against `free_chunk`'s write.
        self.freed
            .with(|freed| assert!(!unsafe { *freed }, "touched a slot of a freed chunk"));
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
    (chunk, index as usize - first_index(chunk) as usize)
}

fn chunk_len(chunk: usize) -> usize {
    slab::chunk_len::<FIRST_CHUNK_BITS>(chunk)
}

fn first_index(chunk: usize) -> u32 {
    slab::first_index::<FIRST_CHUNK_BITS>(chunk) as u32
}

/// A chunk of `len` fresh slots, owned by the caller until it frees it with
/// `dealloc_chunk`.
///
/// Outside loom the chunk is zeroed memory mapped from the OS (see `pages`), which is what
/// `Slot::new` builds: all-zero atomics are valid, and the payload cell may hold anything.
/// So installing a chunk of millions of slots costs a system call, not a pass over them
/// (the OS hands out zeroed pages as they are first touched), a producer that loses the
/// race to install it wastes nothing, and a chunk given back leaves the process whatever
/// the global allocator. Loom's atomics are not plain integers, so loom builds them one by
/// one.
fn new_chunk<T>(len: usize) -> *mut Slot<T> {
    #[cfg(loom)]
    return Box::into_raw((0..len).map(|_| Slot::new()).collect::<Box<[Slot<T>]>>()).cast();
    #[cfg(not(loom))]
    crate::pages::allocate_zeroed(chunk_layout::<T>(len)).cast()
}

/// The memory layout of a chunk of `len` slots.
#[cfg(not(loom))]
fn chunk_layout<T>(len: usize) -> std::alloc::Layout {
    // A chunk holds at least 64 slots of at least 32 bytes (atomics), so its layout is not
    // zero-sized; chunks hold at most 2^31 slots, far below `isize::MAX` bytes.
    std::alloc::Layout::array::<Slot<T>>(len).expect("chunks fit in memory")
}

/// The slots of chunk `chunk` made by `new_chunk`.
///
/// # Safety
///
/// `base` came from `new_chunk(chunk_len(chunk))` and is not freed while the slice is
/// used.
unsafe fn chunk_slots<'a, T>(base: *mut Slot<T>, chunk: usize) -> &'a [Slot<T>] {
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
unsafe fn dealloc_chunk<T>(base: *mut Slot<T>, chunk: usize) {
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
unsafe fn free_chunk<T>(base: *mut Slot<T>, chunk: usize) {
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
struct ChunkPtr<T>(*mut Slot<T>);

// SAFETY: the pointer is only used to free a chunk no thread reaches any more (see
// `Slots::give_back_top`), and a chunk given back holds no payload, so no `T` moves.
unsafe impl<T> Send for ChunkPtr<T> {}

/// The free stack's head: a tag in the high half, a slot index (or `NIL`) in the low half.
fn free_head(tag: u32, index: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(index)
}

/// The shared slots of one shard.
pub(crate) struct Slots<T> {
    /// Chunk `c`, or null until some thread installs it; then fixed until the reaper gives
    /// it back (and a later claim installs a fresh one).
    chunks: [AtomicPtr<Slot<T>>; CHUNKS],
    /// The claim frontier: slots below it were handed out at least once, and every one is
    /// in an installed chunk or in one being installed by the thread that claimed it. Only
    /// the reaper lowers it, as it gives the top chunk back (with `CLOSED` set meanwhile).
    claimed: AtomicU64,
    /// The generation a newly claimed slot starts at: above every generation any handle
    /// names in a chunk given back, so a fresh chunk in its place can never match one.
    floor: AtomicU32,
    /// Chunks given back whose memory is not freed yet (the epoch has not moved on).
    unfreed: Arc<AtomicUsize>,
    /// Head of the free stack (see `free_head`); on its own cache line, as producers and
    /// the reaper both write it while every thread reads `chunks`.
    free: CachePadded<AtomicU64>,
    /// Head of the spare stack: the free stack as it stood when a shrink began, which the
    /// reaper sorts a share of each pass, and which producers pop when the free stack is
    /// empty, rather than claim new slots (see "Giving memory back").
    spare: CachePadded<AtomicU64>,
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
            claimed: AtomicU64::new(0),
            floor: AtomicU32::new(0),
            unfreed: Arc::new(AtomicUsize::new(0)),
            free: CachePadded::new(AtomicU64::new(free_head(0, NIL))),
            spare: CachePadded::new(AtomicU64::new(free_head(0, NIL))),
        }
    }

    /// Takes a free slot for a producer, which then owns it until it publishes it. Returns
    /// its index and the slot, or `None` when all `MAX_SLOTS` slots are in use. A slot of
    /// the free stack, or else of the spare stack (a shrink under way), or else a new one.
    pub(crate) fn take(&self) -> Option<(u32, &Slot<T>)> {
        // Pinned while popping: see `pop`.
        let guard = epoch::pin();
        let Some(index) = self
            .pop(&self.free, &guard)
            .or_else(|| self.pop(&self.spare, &guard))
        else {
            return self.claim();
        };
        // SAFETY: popped, so the slot is the caller's, which keeps its chunk (see `owned`).
        Some((index, unsafe { self.owned(index) }.expect("popped")))
    }

    /// Pops a slot off `stack` (the free or the spare stack), if it holds one.
    ///
    /// The head's `link` is read before the CAS that decides whether the slot was still
    /// free, and by then another thread may have popped it, and the reaper given its chunk
    /// back: `guard` keeps that memory alive (and the CAS fails).
    fn pop(&self, stack: &AtomicU64, guard: &Guard) -> Option<u32> {
        // Acquire: pairs with the Release of the push (or of the reaper's move to the
        // spare stack), so the slot's `link` and the state it was freed with are visible.
        let mut head = stack.load(Ordering::Acquire);
        loop {
            let (tag, index) = ((head >> 32) as u32, head as u32);
            if index == NIL {
                return None;
            }
            let Some(slot) = self.get(index, guard) else {
                // The slot was popped and its chunk given back since the head was read, so
                // the head has moved on (the cleared pointer was published after the slot
                // left the stack): read it with an RMW, which sees the latest value (a load
                // might see this one again).
                head = match stack.compare_exchange(
                    head,
                    head,
                    Ordering::Acquire,
                    Ordering::Acquire,
                ) {
                    Ok(current) | Err(current) => current,
                };
                continue;
            };
            // Relaxed: if the slot was popped and pushed again meanwhile, the tag differs and
            // the CAS below fails, whatever this read returned.
            let next = slot.link.load(Ordering::Relaxed);
            match stack.compare_exchange_weak(
                head,
                free_head(tag.wrapping_add(1), next),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(index),
                Err(current) => head = current,
            }
        }
    }

    /// A never-used slot (or one of a chunk given back), installing its chunk if this is
    /// the first claim in it.
    fn claim(&self) -> Option<(u32, &Slot<T>)> {
        // Acquire: pairs with the reaper's Release store that reopens claims, so a claim
        // after a give-back sees the chunk's pointer cleared and the raised floor.
        let index = loop {
            match self
                .claimed
                .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                    (n < u64::from(MAX_SLOTS)).then_some(n + 1)
                }) {
                Ok(n) => break n as u32,
                // The reaper is between two stores (`give_back_top`): claims wait for it.
                Err(n) if n & CLOSED != 0 => crate::sync::thread::yield_now(),
                Err(_) => return None,
            }
        };
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
                    unsafe { dealloc_chunk(fresh, chunk) };
                    installed
                }
            };
        }
        // SAFETY: `base` is an installed chunk of `chunk_len(chunk)` slots and `offset` is
        // below that; the chunk stays while this slot is not free (see `owned`).
        let slot = unsafe { &*base.add(offset) };
        slot.check_live();
        // Relaxed: the slot is ours; a stale handle's CAS on it fails whichever word it
        // sees (0 in a fresh chunk, or a generation above the one it names).
        slot.state.store(
            word(self.floor.load(Ordering::Relaxed), FREE),
            Ordering::Relaxed,
        );
        Some((index, slot))
    }

    /// The address of slot `index`, if its chunk is installed. Any `u32` may be asked for.
    fn address(&self, index: u32) -> Option<*const Slot<T>> {
        if index >= MAX_SLOTS {
            return None;
        }
        let (chunk, offset) = locate(index);
        // Acquire: pairs with the installing CAS, so the slots are seen initialised.
        let base = self.chunks[chunk].load(Ordering::Acquire);
        // In bounds: a non-null chunk pointer is an installed chunk of `chunk_len(chunk)`
        // slots, and `offset` is below that.
        (!base.is_null()).then(|| base.wrapping_add(offset).cast_const())
    }

    /// The slot at `index`, if its chunk is installed, for as long as `guard` pins the
    /// thread: any thread, with any index (a stale handle's, say).
    pub(crate) fn get<'g>(&'g self, index: u32, _guard: &'g Guard) -> Option<&'g Slot<T>> {
        // SAFETY: the chunk was installed when its pointer was read, and the reaper frees
        // a chunk it gives back only once every thread pinned before it cleared the
        // pointer has unpinned: `guard` keeps the memory for the borrow.
        let slot = unsafe { &*self.address(index)? };
        slot.check_live();
        Some(slot)
    }

    /// The slot at `index`, if its chunk is installed, without a pin.
    ///
    /// # Safety
    ///
    /// The slot is not free, or it is the reaper's (it freed it and holds it back), for as
    /// long as the reference is used: a chunk is given back only when every slot it has
    /// handed out is free and held by the reaper, so the caller's slot keeps it. The
    /// reaper may ask for any index: it is the only thread that gives chunks back, so a
    /// pointer it reads is current.
    pub(crate) unsafe fn owned(&self, index: u32) -> Option<&Slot<T>> {
        // SAFETY: by the contract above the chunk outlives the borrow.
        let slot = unsafe { &*self.address(index)? };
        slot.check_live();
        Some(slot)
    }

    /// Gives a slot back after its payload was taken: bumps its generation and chains it
    /// on `freed` (or holds it back, while the reaper gives its chunk back), or retires it
    /// when the generation would wrap. Called by the owner of the slot: the reaper, or a
    /// producer whose push was refused. The slot is free from here on (no handle reaches
    /// its payload), and reusable once `freed` is recycled.
    pub(crate) fn release(&self, index: u32, slot: &Slot<T>, generation: u32, freed: &mut Freed) {
        let next_generation = generation.wrapping_add(1);
        // Release: a producer that later sees the slot FREE (through the free stack's
        // Acquire) also sees everything the reaper did with the payload.
        slot.state
            .store(word(next_generation, FREE), Ordering::Release);
        if next_generation == 0 {
            return;
        }
        match &mut freed.shrink {
            Some(shrink) if index >= shrink.limit => shrink.hold(index, slot),
            _ => freed.chain.push(index, slot),
        }
    }

    /// Pushes the slots chained on `freed` on the free stack, with one CAS for them all:
    /// the reaper frees many slots a pass, and producers pop from the same head.
    pub(crate) fn recycle(&self, freed: &mut Freed) {
        self.push_chain(std::mem::take(&mut freed.chain));
    }

    fn push_chain(&self, chain: Chain) {
        if chain.first == NIL {
            return;
        }
        // SAFETY: the chain's slots are free and the caller's.
        let last = unsafe { self.owned(chain.last) }.expect("chained slots are installed");
        let mut head = self.free.load(Ordering::Relaxed);
        loop {
            let (tag, top) = ((head >> 32) as u32, head as u32);
            last.link.store(top, Ordering::Relaxed);
            // Release: publishes the chain's links and FREE states to the producers that
            // pop them.
            match self.free.compare_exchange_weak(
                head,
                free_head(tag.wrapping_add(1), chain.first),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(current) => head = current,
            }
        }
    }

    /// Takes the whole free stack, for the reaper to sort; returns its first slot.
    fn take_free_stack(&self) -> u32 {
        let mut head = self.free.load(Ordering::Relaxed);
        loop {
            let tag = (head >> 32) as u32;
            // Acquire: pairs with the pushes' Release, so the links are visible.
            match self.free.compare_exchange_weak(
                head,
                free_head(tag.wrapping_add(1), NIL),
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
                    self.push_chain(std::mem::replace(held, Held::EMPTY).chain);
                }
            }
            self.sort(shrink, &mut freed.chain);
            self.push_chain(std::mem::take(&mut freed.chain));
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
        // Relaxed: only the reaper fills it, and a pop racing this read only empties it.
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
            // The spare stack is empty: only the reaper fills it, here, and a shrink ends
            // only once it is empty again.
            let first = self.take_free_stack();
            // Release: the links, which the stack's Acquire take made visible to the
            // reaper, to the producers that pop the spare stack. Only the reaper stores to
            // it while it is empty; the tag moves on all the same.
            let tag = (self.spare.load(Ordering::Relaxed) >> 32) as u32;
            self.spare
                .store(free_head(tag.wrapping_add(1), first), Ordering::Release);
            freed.shrink = Some(Box::new(Shrink {
                limit,
                held: [Held::EMPTY; CHUNKS],
            }));
        }
    }

    /// Sorts up to `SORT_BUDGET` slots of the spare stack, for at most `SORT_TIME`: those
    /// below the limit go back on `hot` (for the free stack), the others are held.
    fn sort(&self, shrink: &mut Shrink, hot: &mut Chain) {
        // Loom runs every path again the same way: no clock there.
        #[cfg(not(loom))]
        let start = std::time::Instant::now();
        let guard = epoch::pin();
        #[cfg_attr(loom, allow(unused_variables))]
        for sorted in 0..SORT_BUDGET {
            #[cfg(not(loom))]
            if sorted % 256 == 255 && start.elapsed() >= SORT_TIME {
                break;
            }
            let Some(index) = self.pop(&self.spare, &guard) else {
                break;
            };
            // SAFETY: popped by the reaper, so its own.
            let slot = unsafe { self.owned(index) }.expect("free slots are installed");
            if index >= shrink.limit {
                shrink.hold(index, slot);
            } else {
                hot.push(index, slot);
            }
        }
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
        // free stack taken too, so `take` retrying reads a head that has moved on. A
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
        // no reference from `get` or `take` outlives it; the reaper keeps none. The closure
        // touches no `T` (all slots are free) and the memory it frees is its own.
        unsafe {
            guard.defer_unchecked(move || {
                let ChunkPtr(base) = base;
                free_chunk(base, chunk);
                unfreed.fetch_sub(1, Ordering::Relaxed);
            });
        }
        guard.flush();
        true
    }

    /// Slots handed out and not given back: the shard's capacity in use, pending or free.
    pub(crate) fn claimed(&self) -> u32 {
        // Relaxed: a figure for the stats.
        self.claimed.load(Ordering::Relaxed) as u32
    }

    /// Chunks given back whose memory the epoch has not freed yet.
    #[cfg(test)]
    fn unfreed(&self) -> usize {
        self.unfreed.load(Ordering::Relaxed)
    }
}

/// A chain of free slots through their `link`, which its owner can push in one CAS.
#[derive(Debug, Clone, Copy)]
struct Chain {
    first: u32,
    last: u32,
}

impl Chain {
    const EMPTY: Chain = Chain {
        first: NIL,
        last: NIL,
    };

    fn push<T>(&mut self, index: u32, slot: &Slot<T>) {
        // Relaxed: published by the push on the free stack, a Release CAS.
        slot.link.store(self.first, Ordering::Relaxed);
        if self.first == NIL {
            self.last = index;
        }
        self.first = index;
    }
}

impl Default for Chain {
    fn default() -> Self {
        Chain::EMPTY
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
struct Shrink {
    /// A chunk boundary (`u32::MAX` once given up: everything goes back on the stack).
    limit: u32,
    held: [Held; CHUNKS],
}

impl Shrink {
    fn hold<T>(&mut self, index: u32, slot: &Slot<T>) {
        // Relaxed: a FREE word the reaper wrote, or read through the stack's Acquire.
        let (generation, _) = split(slot.state.load(Ordering::Relaxed));
        let held = &mut self.held[locate(index).0];
        held.chain.push(index, slot);
        held.count += 1;
        held.next_generation = held.next_generation.max(generation);
    }
}

/// Slots freed but not yet back on the free stack, chained through their `link`; and, for
/// the reaper, a shrink under way.
#[derive(Debug, Default)]
pub(crate) struct Freed {
    chain: Chain,
    shrink: Option<Box<Shrink>>,
    /// Passes left that move the epoch on for the chunks given back (see `shrink`).
    flushes: u32,
}

impl Freed {
    pub(crate) const fn new() -> Self {
        Freed {
            chain: Chain::EMPTY,
            shrink: None,
            flushes: 0,
        }
    }
}

impl<T> Drop for Slots<T> {
    fn drop(&mut self) {
        // Slots at or above `claimed` were never handed out, so hold no payload; not
        // visiting them leaves the untouched pages of a huge chunk untouched.
        let claimed = self.claimed.load(Ordering::Relaxed) as u32;
        for (chunk, pointer) in self.chunks.iter().enumerate() {
            // Acquire: `&mut self` already excludes other threads; this only makes the
            // chunk's contents visible as any reader's load would.
            let base = pointer.load(Ordering::Acquire);
            if base.is_null() {
                continue;
            }
            // SAFETY: installed chunks come from `new_chunk` with this length, and `&mut
            // self` means no other thread holds a reference into them.
            let slots = unsafe { chunk_slots(base, chunk) };
            let first = first_index(chunk) as usize;
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
            // SAFETY: as above; the payloads are out, and nothing uses the chunk again.
            unsafe { dealloc_chunk(base, chunk) };
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
        let guard = epoch::pin();
        assert!(slots.get(MAX_SLOTS, &guard).is_none());
        assert!(slots.get(5_000, &guard).is_none(), "chunk never installed");
    }

    /// Plays producer and reaper: takes `count` slots, publishes each (generation as it
    /// came), then frees them all as the reaper would; returns their indices and
    /// generations.
    fn take_and_free(slots: &Slots<u64>, count: usize, freed: &mut Freed) -> Vec<(u32, u32)> {
        let taken: Vec<(u32, u32)> = (0..count)
            .map(|_| {
                let (index, slot) = slots.take().unwrap();
                let (generation, _) = split(slot.state.load(Ordering::Relaxed));
                // SAFETY: just taken, unpublished.
                unsafe { slot.write_payload(u64::from(index)) };
                slot.state
                    .store(word(generation, PENDING), Ordering::Release);
                (index, generation)
            })
            .collect();
        for &(index, generation) in &taken {
            // SAFETY: published above; the test is its reaper.
            let slot = unsafe { slots.owned(index) }.unwrap();
            // SAFETY: published, taken once here, then released.
            assert_eq!(unsafe { slot.take_payload() }, u64::from(index));
            slots.release(index, slot, generation, freed);
        }
        slots.recycle(freed);
        taken
    }

    /// Runs the reaper's shrink step until it has nothing left to do soon (the deferred
    /// frees need the epoch to move on, which other tests' threads may hold up a while).
    fn shrink_until_settled(slots: &Slots<u64>, freed: &mut Freed, pending: usize) {
        for _ in 0..100_000 {
            if !slots.shrink(freed, pending) {
                return;
            }
            std::thread::yield_now();
        }
        panic!("the shrink never settled");
    }

    fn frontier(slots: &Slots<u64>) -> u32 {
        slots.claimed.load(Ordering::Relaxed) as u32
    }

    #[test]
    fn chunks_all_free_are_given_back_and_stale_handles_find_nothing() {
        let slots: Slots<u64> = Slots::new();
        let mut freed = Freed::new();
        let count = if cfg!(miri) { 300 } else { 20_000 };
        let taken = take_and_free(&slots, count, &mut freed);
        assert_eq!(frontier(&slots), count as u32);
        shrink_until_settled(&slots, &mut freed, 0);
        let keep = first_index(KEEP_CHUNKS);
        assert_eq!(
            frontier(&slots),
            keep,
            "claims start again where the kept chunks end"
        );
        assert_eq!(slots.unfreed(), 0, "every chunk given back is freed");
        let guard = epoch::pin();
        for chunk in 0..CHUNKS {
            let installed = !slots.chunks[chunk].load(Ordering::Relaxed).is_null();
            assert_eq!(installed, chunk < KEEP_CHUNKS, "chunk {chunk}");
        }
        let (above, generation) = *taken.last().unwrap();
        assert!(above >= keep);
        assert!(
            slots.get(above, &guard).is_none(),
            "a stale handle finds no slot"
        );
        drop(guard);
        // The kept slots are all back on the free stack: taking them claims nothing new.
        let again: Vec<u32> = (0..keep).map(|_| slots.take().unwrap().0).collect();
        assert!(again.iter().all(|&index| index < keep));
        assert_eq!(frontier(&slots), keep);
        // The next claim is in a fresh chunk, at a generation no old handle names.
        let (index, slot) = slots.take().unwrap();
        assert_eq!(index, keep);
        let (fresh_generation, state) = split(slot.state.load(Ordering::Relaxed));
        assert_eq!(state, FREE);
        assert!(
            fresh_generation > generation,
            "{fresh_generation} > {generation}"
        );
        assert!(
            taken
                .iter()
                .all(|&(i, g)| i != index || g < fresh_generation)
        );
    }

    #[test]
    fn a_slot_in_use_keeps_its_chunk_until_it_is_freed() {
        let slots: Slots<u64> = Slots::new();
        let mut freed = Freed::new();
        let count = if cfg!(miri) { 200 } else { 10_000 };
        take_and_free(&slots, count, &mut freed);
        // Taken again in the order the free stack gives them: the last is in the top chunk.
        let mut held_back = None;
        for _ in 0..count {
            let (index, slot) = slots.take().unwrap();
            if locate(index).0 == locate(count as u32 - 1).0 {
                held_back = Some((index, slot));
                break;
            }
        }
        let (index, slot) = held_back.expect("the top chunk's slots are on the stack");
        let generation = split(slot.state.load(Ordering::Relaxed)).0;
        // Slots taken above and not kept go back, as if they had fired.
        shrink_until_settled(&slots, &mut freed, 1);
        assert_eq!(
            frontier(&slots),
            count as u32,
            "the chunk of a slot in use is not given back"
        );
        // SAFETY: taken above, never published.
        unsafe { slot.write_payload(1) };
        slots.release(index, slot, generation, &mut freed);
        shrink_until_settled(&slots, &mut freed, 0);
        assert!(
            frontier(&slots) < count as u32,
            "given back once it is free"
        );
    }

    // A shrink that began while cancels were still coming stopped at its limit, and the
    // reaper slept: the rest stayed until the next pass, which might never come.
    #[test]
    fn a_shrink_that_ends_high_is_followed_by_the_next_in_the_same_step() {
        let slots: Slots<u64> = Slots::new();
        let mut freed = Freed::new();
        let count = if cfg!(miri) { 1_000 } else { 100_000 };
        take_and_free(&slots, count, &mut freed);
        let early = count / 20;
        // The first step sees a twentieth of the timers still pending: it begins a shrink
        // that keeps room for four times that, and sorts a share of the free stack.
        assert!(slots.shrink(&mut freed, early));
        // The steps after see none pending: once that shrink is done, the next begins.
        shrink_until_settled(&slots, &mut freed, 0);
        assert_eq!(frontier(&slots), first_index(KEEP_CHUNKS));
    }

    // A shrink used to take the free stack for itself and sort it a share a pass, while
    // producers found the stack empty and claimed new slots above the frontier: churn
    // faster than the sorting grew memory while it was being given back.
    #[test]
    fn producers_take_the_slots_a_shrink_has_still_to_sort_before_new_ones() {
        let slots: Slots<u64> = Slots::new();
        let mut freed = Freed::new();
        let count = if cfg!(miri) { 300 } else { 100_000 };
        take_and_free(&slots, count, &mut freed);
        let top = frontier(&slots);
        // One step begins a shrink and sorts a share of the free slots (the top ones,
        // freed last, which it holds).
        assert!(slots.shrink(&mut freed, 0), "more to sort");
        // Producers take half as many slots as were free: none is claimed anew.
        let taken: Vec<(u32, u32)> = (0..count / 2)
            .map(|_| {
                let (index, slot) = slots.take().unwrap();
                (index, split(slot.state.load(Ordering::Relaxed)).0)
            })
            .collect();
        assert!(
            frontier(&slots) <= top,
            "claimed up to {} of {top} handed out while a shrink sorted the rest",
            frontier(&slots)
        );
        // Given back, they let the shrink end where it would have.
        for (index, generation) in taken {
            // SAFETY: taken above, never published.
            let slot = unsafe { slots.owned(index) }.unwrap();
            slots.release(index, slot, generation, &mut freed);
        }
        shrink_until_settled(&slots, &mut freed, 0);
        assert_eq!(frontier(&slots), first_index(KEEP_CHUNKS));
    }

    #[test]
    fn timers_coming_back_stop_the_shrink_and_get_the_held_slots() {
        let slots: Slots<u64> = Slots::new();
        let mut freed = Freed::new();
        // A few slots in the top chunk, under a chunk bigger than one step sorts.
        let top = (KEEP_CHUNKS + 1..CHUNKS)
            .find(|&chunk| chunk_len(chunk - 1) > SORT_BUDGET as usize)
            .unwrap();
        let count = first_index(top) as usize + 10;
        take_and_free(&slots, count, &mut freed);
        // One step sorts part of the free stack: the top chunks go, some slots are held.
        assert!(slots.shrink(&mut freed, 0));
        let given_back_to = frontier(&slots);
        assert_eq!(
            given_back_to,
            first_index(top),
            "the first step gives the top chunk back"
        );
        assert!(
            given_back_to > first_index(KEEP_CHUNKS),
            "but not everything yet"
        );
        // Then as many timers as slots are pending: the held slots go back on the stack.
        shrink_until_settled(&slots, &mut freed, count);
        assert!(freed.shrink.is_none(), "the shrink is over");
        assert_eq!(
            frontier(&slots),
            given_back_to,
            "nothing more was given back"
        );
        let mut indices: Vec<u32> = (0..given_back_to)
            .map(|_| slots.take().unwrap().0)
            .collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), given_back_to as usize);
        assert_eq!(
            frontier(&slots),
            given_back_to,
            "every slot kept was on the stack"
        );
    }

    /// Threads look slots up by index and pop the free stack while the test, as the
    /// reaper, hands out and frees slots and gives chunks back, round after round. Under
    /// miri, a slot read after its chunk was freed is an error the run reports.
    #[test]
    fn lookups_race_with_chunks_given_back() {
        let rounds = if cfg!(miri) { 3 } else { 200 };
        let count = if cfg!(miri) { 150 } else { 5_000 };
        let slots: Arc<Slots<u64>> = Arc::new(Slots::new());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|seed| {
                let (slots, stop) = (Arc::clone(&slots), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut index = seed;
                    let mut seen = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        index = (index * 7 + 13) % (count as u32 * 2);
                        let guard = epoch::pin();
                        if let Some(slot) = slots.get(index, &guard) {
                            seen += slot.state.load(Ordering::Relaxed) & 1;
                        }
                    }
                    seen
                })
            })
            .collect();
        let mut freed = Freed::new();
        for _ in 0..rounds {
            take_and_free(&slots, count, &mut freed);
            shrink_until_settled(&slots, &mut freed, 0);
        }
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            reader.join().unwrap();
        }
        assert_eq!(frontier(&slots), first_index(KEEP_CHUNKS));
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
        let first = first_index(chunk);
        slots.claimed.store(first.into(), Ordering::Relaxed);
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
