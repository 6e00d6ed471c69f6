//! A shard's shared slab: timer slots that any thread may take and look up, and that only
//! the shard's reaper gives back.
//!
//! Slots live in chunks that never move (chunk `c` holds `64 << c` slots), installed with a
//! compare-and-swap by whichever thread first needs them, so a slot's address is stable and
//! other threads can reach its state word at any time. Free slots wait on a lock-free stack
//! of batches (`free`): the reaper pushes what a pass freed as one batch, and a producer
//! takes a whole batch into its stage with one CAS. The spare stack of a shrink (below)
//! works the same way, taken from by producers and the reaper.
//!
//! Each slot has one state word: generation (high 27 bits), state (low 2 bits) and three
//! flags above the state, `RESETTING`, `QUEUED` and `STAGED`:
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
//! - `QUEUED` says the slot's change is on its way to the reaper: on the shard's list of
//!   changes (resets, and cancels), so it is pushed there at most once at a time, or, for
//!   a cancel made by a thread holding its stage, in that stage's cancels (see `stage`);
//!   the reaper clears it as it takes the change.
//! - `STAGED` says the timer waits in its producer's stage (see `stage`), not yet handed to
//!   the reaper: a cancel then pushes no change, and the stage's holder (its owner
//!   handing it over, or the reaper collecting it) clears the flag and frees the slot if
//!   it was cancelled, once no change and no reset holds it (neither `QUEUED` nor
//!   `RESETTING`). A reset pushes its change as usual; the reaper, finding the slot
//!   still staged, collects the stages.
//! - Only the reaper moves a published slot to `(g+1)|FREE`, after it has taken the
//!   payload and unlinked the slot from its wheel (a producer may free a slot it never
//!   published, or a staged one it reclaims from its own stage); a slot whose generation
//!   would wrap is retired instead of reused, so no handle ever names a later timer.
//!
//! Chunks (`chunk`), the free stacks (`free`) and the memory a shard gives back after a
//! spike (`shrink`) have modules of their own.

mod chunk;
mod free;
mod raw;
mod shrink;
pub(crate) use raw::RawSlot;
#[cfg(test)]
mod tests;

use crate::slab::NIL;
use crate::sync::epoch::{self, Guard};
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, UnsafeCell};
pub(crate) use chunk::{CHUNKS, chunk_of};
use chunk::{chunk_len, dealloc_chunk, first_index, locate, new_chunk, slot_at};
use crossbeam_utils::CachePadded;
use free::Chain;
use shrink::Shrink;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::Arc;

/// Slot states, in the low bits of the state word.
pub(crate) const FREE: u32 = 0;
pub(crate) const PENDING: u32 = 1;
pub(crate) const FIRING: u32 = 2;
pub(crate) const CANCELLED: u32 = 3;
const STATE_MASK: u32 = 3;
/// Flag: a `reset` owns the slot's deadline field (see the module doc).
pub(crate) const RESETTING: u32 = 4;
/// Flag: the slot's change is on its way to the reaper (see the module doc).
pub(crate) const QUEUED: u32 = 8;
/// Flag: the timer is staged (see `stage`): it has not reached the reaper yet, so a cancel
/// pushes no change, and whoever hands it over frees it if it was cancelled.
pub(crate) const STAGED: u32 = 16;
/// The flags.
pub(crate) const FLAGS: u32 = RESETTING | QUEUED | STAGED;
/// Bits of the state word below the generation: the state's two and the three flags.
const GENERATION_SHIFT: u32 = 5;
/// Generations a slot goes through before it is retired (see `next_generation`).
pub(crate) const GENERATIONS: u32 = 1 << (32 - GENERATION_SHIFT);

/// Set in `Slots::claimed` while the reaper gives the top chunk back.
const CLOSED: u64 = 1 << 32;
/// Slots a shard can hold; handles keep slot numbers in 31 bits at most.
pub(crate) const MAX_SLOTS: u32 = 1 << 31;

/// The state word of generation `generation` (below `GENERATIONS`) in state `state`.
pub(crate) const fn word(generation: u32, state: u32) -> u32 {
    (generation << GENERATION_SHIFT) | state
}

/// The generation and state of a state word (its flags left out).
pub(crate) const fn split(word: u32) -> (u32, u32) {
    (word >> GENERATION_SHIFT, word & STATE_MASK)
}

/// The generation after `generation`: 0 after the last one, when the slot is retired
/// rather than reused, so that no handle ever names a later timer.
pub(crate) const fn next_generation(generation: u32) -> u32 {
    (generation + 1) % GENERATIONS
}

/// The word of a slot that a cancel touches, kept apart from its body (see `chunk`).
pub(crate) struct Control {
    /// Generation and state (see `word`).
    state: AtomicU32,
}

impl Control {
    /// A fresh control: zero, as in a chunk from `new_chunk` outside loom.
    #[cfg(loom)]
    fn new() -> Self {
        Control {
            state: AtomicU32::new(word(0, FREE)),
        }
    }
}

/// The rest of a slot: with a 16-byte payload, 32 bytes, so that no body straddles two
/// cache lines (and with its control and change link a slot is 40 bytes).
pub(crate) struct Body<T> {
    /// The tick it is due at; written by the producer before it publishes the slot, and
    /// after that only by a `reset` holding the `RESETTING` flag. In the first free slot
    /// of a batch on a free stack: the batch below (see `free`).
    pub(crate) deadline: AtomicU64,
    /// Next slot in a batch of free slots, in the shard's inbox, or in the reaper's wheel
    /// bucket (a slot is in one at most); a staged slot's place in its stage.
    pub(crate) link: AtomicU32,
    /// The previous link in the reaper's wheel bucket (see `wheel::hierarchy`) plus one, 0
    /// when the slot is not in the wheel (so an all-zero slot is a valid fresh one). Only
    /// the reaper touches it; an atomic rather than a cell because it costs nothing and
    /// needs no `unsafe`.
    wheel_prev: AtomicU32,
    /// Initialised from the producer's write until the reaper takes it out.
    payload: UnsafeCell<MaybeUninit<T>>,
    /// Set when the slot's chunk is freed (loom keeps the memory; see `free_chunk`).
    #[cfg(loom)]
    freed: UnsafeCell<bool>,
}

/// One timer slot, shared between the producers, cancellers and the reaper: its control
/// word, change link and body (through `Deref`), which live apart in their chunk (see
/// `chunk`).
pub(crate) struct Slot<'a, T> {
    /// Generation and state (see `word`).
    pub(crate) state: &'a AtomicU32,
    /// Next slot in the shard's list of changes: cancels from a thread without its stage
    /// at hand, and resets (the owner's cancels go through its stage, see `stage`).
    pub(crate) change_link: &'a AtomicU32,
    body: &'a Body<T>,
}

impl<T> Clone for Slot<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Slot<'_, T> {}

impl<T> std::ops::Deref for Slot<'_, T> {
    type Target = Body<T>;

    fn deref(&self) -> &Body<T> {
        self.body
    }
}

impl<'a, T> Slot<'a, T> {
    fn new(control: &'a Control, change_link: &'a AtomicU32, body: &'a Body<T>) -> Self {
        Slot {
            state: &control.state,
            change_link,
            body,
        }
    }

    /// Under loom, fails the model if the slot's chunk was freed: a read of the flag that
    /// races with `free_chunk`'s write is reported by loom, one ordered after it fails here.
    fn check_live(self) {
        #[cfg(loom)]
        // SAFETY: loom checks this read against `free_chunk`'s write.
        self.body
            .freed
            .with(|freed| assert!(!unsafe { *freed }, "touched a slot of a freed chunk"));
    }

    /// Marks the slot's chunk freed (loom keeps its memory; see `free_chunk`).
    #[cfg(loom)]
    fn mark_freed(self) {
        // SAFETY: loom checks this write against every other access to the flag.
        self.body.freed.with_mut(|freed| unsafe { *freed = true });
    }
}

impl<T> Body<T> {
    /// A fresh body: every field zero, as in a chunk from `new_chunk` outside loom. The
    /// links are written before they are read (by the pushes that chain the slot).
    #[cfg(loom)]
    fn new() -> Self {
        Body {
            deadline: AtomicU64::new(0),
            link: AtomicU32::new(0),
            wheel_prev: AtomicU32::new(0),
            payload: UnsafeCell::new(MaybeUninit::uninit()),
            freed: UnsafeCell::new(false),
        }
    }

    /// Its previous link in the reaper's wheel, `NIL` when it is not in the wheel. Reaper
    /// only.
    pub(crate) fn wheel_prev(&self) -> u32 {
        // Relaxed: the reaper's own bookkeeping. `NIL + 1` wraps to the 0 of "none".
        self.wheel_prev.load(Ordering::Relaxed).wrapping_sub(1)
    }

    /// Sets its previous link in the reaper's wheel (`NIL`: out of it). Reaper only.
    pub(crate) fn set_wheel_prev(&self, prev: u32) {
        // Relaxed: as in `wheel_prev`.
        self.wheel_prev
            .store(prev.wrapping_add(1), Ordering::Relaxed);
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

/// What keeps a slot readable while a thread that does not own it looks it up by index:
/// nothing for a slot in the chunks a shard never gives back (the first `KEEP_CHUNKS`,
/// where the slots of a timer with few pending live) or in one a stage its caller holds
/// has a slot of (`stage::Chunks`), a pin of the epoch for any other. Pinning costs a
/// thread-local lookup and a locked instruction; most schedules and cancels need none.
pub(crate) struct Pin(Option<Guard>);

impl Pin {
    /// No pin yet: covers the kept chunks only.
    pub(crate) const NONE: Pin = Pin(None);

    /// A pin that covers slot `index`.
    #[inline]
    pub(crate) fn for_slot(index: u32) -> Pin {
        let mut pin = Pin::NONE;
        pin.cover(index);
        pin
    }

    /// Pins now if slot `index` needs it and this does not pin yet.
    #[inline]
    pub(crate) fn cover(&mut self, index: u32) {
        if self.0.is_none() && !kept(index) {
            self.0 = Some(epoch::pin());
        }
    }

    /// Whether a lookup of slot `index` under this is safe.
    pub(crate) fn covers(&self, index: u32) -> bool {
        self.0.is_some() || kept(index)
    }
}

/// Whether slot `index` lies in a chunk the shard never gives back (see `Pin`).
#[inline]
fn kept(index: u32) -> bool {
    index < first_index(shrink::KEEP_CHUNKS)
}

/// The shared slots of one shard.
pub(crate) struct Slots<T> {
    /// Chunk `c`, or null until some thread installs it; then fixed until the reaper gives
    /// it back (and a later claim installs a fresh one).
    chunks: [AtomicPtr<u8>; CHUNKS],
    /// The claim frontier: slots below it were handed out at least once, and every one is
    /// in an installed chunk or in one being installed by the thread that claimed it. Only
    /// the reaper lowers it, as it gives the top chunk back (with `CLOSED` set meanwhile).
    claimed: AtomicU64,
    /// The generation a newly claimed slot starts at: above every generation any handle
    /// names in a chunk given back, so a fresh chunk in its place can never match one.
    floor: AtomicU32,
    /// Chunks given back whose memory is not freed yet (the epoch has not moved on).
    unfreed: Arc<AtomicUsize>,
    /// Head of the free stack (see `free`); on its own cache line, as producers and
    /// the reaper both write it while every thread reads `chunks`.
    free: CachePadded<AtomicU64>,
    /// Head of the spare stack: the free stack as it stood when a shrink began, which the
    /// reaper sorts a share of each pass, and which producers pop when the free stack is
    /// empty, rather than claim new slots (see "Giving memory back").
    spare: CachePadded<AtomicU64>,
    /// Whether big chunks go on huge pages (`Builder::huge_pages`).
    huge_pages: bool,
    /// Drops a cancelled timer's payload (see `Shard::with_discard`).
    pub(crate) discard: fn(T),
    /// Slots claims may reach, at most `MAX_SLOTS`: fewer in a timer of over 64 shards,
    /// whose handles leave each shard fewer bits (see `handle::Handles`).
    limit: u32,
    /// The chunks hold `T`s (and the slots' drop drops those still pending), in cells:
    /// `T` is invariant, as the slots take payloads in and hand them out through `&self`.
    /// (Only a marker: `Send` and `Sync` are implemented below.)
    payloads: PhantomData<std::cell::Cell<T>>,
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
            free: CachePadded::new(AtomicU64::new(free::head(0, NIL))),
            spare: CachePadded::new(AtomicU64::new(free::head(0, NIL))),
            huge_pages: true,
            discard: drop,
            limit: MAX_SLOTS,
            payloads: PhantomData,
        }
    }

    /// Whether chunks of 2 MiB and more are advised onto huge pages (the default) or left
    /// on small ones (see `pages`).
    pub(crate) fn with_huge_pages(mut self, huge_pages: bool) -> Self {
        self.huge_pages = huge_pages;
        self
    }

    /// Claims stop at `limit` slots (at most `MAX_SLOTS`) rather than `MAX_SLOTS`.
    pub(crate) fn with_limit(mut self, limit: u32) -> Self {
        self.limit = limit.min(MAX_SLOTS);
        self
    }

    /// A never-used slot (or one of a chunk given back), installing its chunk if this is
    /// the first claim in it.
    fn claim(&self) -> Option<(u32, Slot<'_, T>)> {
        // Acquire: pairs with the reaper's Release store that reopens claims, so a claim
        // after a give-back sees the chunk's pointer cleared and the raised floor.
        let index = loop {
            match self
                .claimed
                .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                    (n < u64::from(self.limit)).then_some(n + 1)
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
            let fresh = new_chunk::<T>(chunk_len(chunk), self.huge_pages);
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
                    unsafe { dealloc_chunk::<T>(fresh, chunk) };
                    installed
                }
            };
        }
        // SAFETY: `base` is an installed chunk of `chunk_len(chunk)` slots and `offset` is
        // below that; the chunk stays while this slot is not free (see `owned`).
        let slot = unsafe { slot_at(base, chunk, offset) };
        slot.check_live();
        // Relaxed: the slot is ours; a stale handle's CAS on it fails whichever word it
        // sees (0 in a fresh chunk, or a generation above the one it names).
        slot.state.store(
            word(self.floor.load(Ordering::Relaxed), FREE),
            Ordering::Relaxed,
        );
        Some((index, slot))
    }

    /// Where slot `index` is, if its chunk is installed: the chunk's memory, the chunk and
    /// the slot's offset in it, which is below the chunk's length. Any `u32` may be asked
    /// for.
    fn address(&self, index: u32) -> Option<(*mut u8, usize, usize)> {
        if index >= MAX_SLOTS {
            return None;
        }
        let (chunk, offset) = locate(index);
        // Acquire: pairs with the installing CAS, so the slots are seen initialised.
        let base = self.chunks[chunk].load(Ordering::Acquire);
        (!base.is_null()).then_some((base, chunk, offset))
    }

    /// Asks the CPU to bring slot `index` into its cache, if its chunk is installed: for
    /// the slot a producer will take next (see `free`). A hint only; elsewhere than x86-64
    /// it does nothing.
    #[inline]
    pub(crate) fn prefetch(&self, index: u32) {
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        if let Some((base, chunk, offset)) = self.address(index) {
            chunk::prefetch::<T>(base, chunk, offset);
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
        let _ = index;
    }

    /// The slot at `index`, if its chunk is installed, for as long as `pin` lasts: any
    /// thread, with any index (a stale handle's, say), and a `pin` made for it.
    pub(crate) fn get<'g>(&'g self, index: u32, pin: &'g Pin) -> Option<Slot<'g, T>> {
        debug_assert!(pin.covers(index), "looked up without a pin");
        let (base, chunk, offset) = self.address(index)?;
        // SAFETY: the chunk was installed when its pointer was read, and holds the offset
        // `address` gives. A chunk below `KEEP_CHUNKS` is never given back while the slots
        // live, which the borrow of `self` covers; the reaper frees any other chunk it
        // gives back only once every thread pinned before it cleared the pointer has
        // unpinned, and `pin` pins this thread for such an index: the memory outlives the
        // borrow either way.
        let slot = unsafe { slot_at(base, chunk, offset) };
        slot.check_live();
        Some(slot)
    }

    /// The slot at `index`, if its chunk is installed, without a pin.
    ///
    /// # Safety
    ///
    /// The slot, or another of its chunk, is the caller's or pending, and not held back by
    /// a shrink of the reaper's, for as long as the reference is used: a chunk is given
    /// back only when the reaper holds every slot it has handed out (see `shrink`), so the
    /// caller's slot keeps it: one it took (a free slot of a batch it took, a stage's kept
    /// free slot), one it published, or, for a stage's holder, any slot of a chunk the
    /// stage has a slot of (see `stage::Chunks`). The reaper may ask for any index: it is
    /// the only thread that gives chunks back, so a pointer it reads is current.
    pub(crate) unsafe fn owned(&self, index: u32) -> Option<Slot<'_, T>> {
        let (base, chunk, offset) = self.address(index)?;
        // SAFETY: an installed chunk holds the offset `address` gives; by the contract
        // above the chunk outlives the borrow.
        let slot = unsafe { slot_at(base, chunk, offset) };
        slot.check_live();
        Some(slot)
    }

    /// Gives a slot back after its payload was taken: bumps its generation and chains it
    /// on `freed` (or holds it back, while the reaper gives its chunk back), or retires it
    /// when the generation would wrap. Called by the owner of the slot: the reaper, or a
    /// producer whose push was refused. The slot is free from here on (no handle reaches
    /// its payload), and reusable once `freed` is recycled.
    pub(crate) fn release(
        &self,
        index: u32,
        slot: Slot<'_, T>,
        generation: u32,
        freed: &mut Freed,
    ) {
        let next_generation = next_generation(generation);
        // Release: a producer that later sees the slot FREE (through the free stack's
        // Acquire) also sees everything the reaper did with the payload.
        slot.state
            .store(word(next_generation, FREE), Ordering::Release);
        if next_generation != 0 {
            self.keep(index, slot, freed);
        }
    }

    /// Chains a free slot on `freed` (or holds it back, while the reaper gives its chunk
    /// back): the reaper taking back the free slots a stage kept.
    pub(crate) fn keep(&self, index: u32, slot: Slot<'_, T>, freed: &mut Freed) {
        match &mut freed.shrink {
            Some(shrink) if index >= shrink.limit => shrink.hold(index, slot),
            _ => self.chain(&mut freed.chain, index, slot),
        }
    }

    /// Frees a slot whose payload its owner took, for the owner to take again itself (a
    /// stage's free slots): bumps its generation; false if that would wrap (the slot is
    /// retired).
    pub(crate) fn renew(slot: Slot<'_, T>, generation: u32) -> bool {
        let next_generation = next_generation(generation);
        // Relaxed: the owner keeps the slot; whoever takes it from the owner later does so
        // through the stage's Acquire and Release.
        slot.state
            .store(word(next_generation, FREE), Ordering::Relaxed);
        next_generation != 0
    }

    /// Slots handed out and not given back: the shard's capacity in use, pending or free.
    pub(crate) fn claimed(&self) -> u32 {
        // Relaxed: a figure for the stats.
        self.claimed.load(Ordering::Relaxed) as u32
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

    /// Whether the reaper is giving memory back (and wants every free slot it can get).
    pub(crate) fn is_shrinking(&self) -> bool {
        self.shrink.is_some()
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
            let first = first_index(chunk) as usize;
            let used = (claimed as usize)
                .saturating_sub(first)
                .min(chunk_len(chunk));
            for offset in 0..used {
                // SAFETY: installed chunks come from `new_chunk` with this length, `offset`
                // is below it, and `&mut self` means no other thread holds a reference
                // into them.
                let slot = unsafe { slot_at::<T>(base, chunk, offset) };
                let (_, state) = split(slot.state.load(Ordering::Relaxed));
                if state == PENDING || state == CANCELLED {
                    // SAFETY: published and not yet taken by the reaper (which takes the
                    // payload only when it fires or frees the slot), so initialised; the
                    // slots are going away, so it is read once.
                    let payload = unsafe { slot.take_payload() };
                    if state == CANCELLED {
                        (self.discard)(payload);
                    } else {
                        drop(payload);
                    }
                }
            }
            // SAFETY: as above; the payloads are out, and nothing uses the chunk again.
            unsafe { dealloc_chunk::<T>(base, chunk) };
        }
    }
}
