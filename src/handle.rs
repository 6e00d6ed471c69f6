//! Handles that name a timer: a slab slot plus the generation it was issued at.
//!
//! A handle is only ever compared, never trusted: every operation looks the slot up and
//! checks the generation first, so a handle whose timer fired, was cancelled, or whose slot
//! now holds another timer is rejected without touching anything. Handles round-trip through
//! a `u64` so that users can keep them in atomics or send them over the wire; any `u64` is
//! a valid (if probably stale) handle.

/// Names one timer in a [`Wheel`](crate::Wheel).
///
/// A `Key` stays valid until its timer fires (is returned by
/// [`poll_expired`](crate::Wheel::poll_expired)) or is cancelled; after that every
/// operation with it returns `None` or an error, even once the slot holds another timer.
///
/// A key means something only to the wheel that issued it. Using it with another wheel is
/// a logic error: it is memory-safe and never panics, but if that wheel happens to have a
/// timer at the same slot and generation, the key names that timer.
///
/// # Examples
///
/// ```
/// use shardwheel::{Key, Wheel};
///
/// let mut wheel = Wheel::new();
/// let key = wheel.insert(10, "flush");
/// let raw = key.to_bits();
/// assert_eq!(Key::from_bits(raw), key);
/// assert_eq!(wheel.cancel(key), Some("flush"));
/// assert_eq!(wheel.cancel(Key::from_bits(raw)), None); // stale now
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    index: u32,
    generation: u32,
}

impl Key {
    pub(crate) const fn new(index: u32, generation: u32) -> Self {
        Key { index, generation }
    }

    pub(crate) const fn index(self) -> u32 {
        self.index
    }

    pub(crate) const fn generation(self) -> u32 {
        self.generation
    }

    /// Packs the key into a `u64` (generation in the high half, slot in the low half).
    pub const fn to_bits(self) -> u64 {
        ((self.generation as u64) << 32) | self.index as u64
    }

    /// Rebuilds a key from [`to_bits`](Self::to_bits). Any `u64` gives a key; one that was
    /// not issued by the wheel it is used with is simply rejected by that wheel.
    pub const fn from_bits(bits: u64) -> Self {
        Key {
            index: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({}v{})", self.index, self.generation)
    }
}

/// Bits of a handle that hold its generation (see `slots::GENERATIONS`).
#[cfg(feature = "engine")]
const GENERATION_BITS: u32 = crate::slots::GENERATIONS.trailing_zeros();

/// Bits of a handle that hold its slot and its shard together: the slot takes up to 31
/// of them (a shard's `slots::MAX_SLOTS`), the shard the rest.
#[cfg(feature = "engine")]
const PLACE_BITS: u32 = 64 - GENERATION_BITS;

/// Names one timer of a [`Timer`](crate::Timer): the shard, the slot and the generation it
/// was issued at, in eight bytes (as small as a pointer, so that a server can keep one per
/// connection or request at little cost).
///
/// Like a [`Key`], it stays valid until its timer fires or is cancelled; after that
/// [`Timer::cancel`](crate::Timer::cancel) with it returns false, even once the slot holds
/// another timer: a slot is retired rather than reused once its generations run out (after
/// 2^27 timers in it), so no handle ever names a later timer of its own `Timer`.
///
/// The eight bytes bound how many timers a shard indexes: 2^31 in a timer of up to 64
/// shards, 2^(37 - ceil(log2 shards)) past that (2^30 at 65 to 128 shards, down to 2^21 at
/// 32,769 to 65,536). A thread schedules on one shard, so that is also how many timers
/// one thread can have pending; past it, schedules return
/// [`ScheduleError::Full`](crate::ScheduleError::Full). With slots retired after 2^27
/// timers each, a shard takes 2^58 timers over its life (2^48 at 65,536 shards).
///
/// A handle means something only to the `Timer` that issued it, in the process that made
/// it. Using it with another `Timer`, or in another process (a handle kept with
/// [`to_bits`](Self::to_bits) across a restart), is a logic error: memory-safe, never a
/// panic, and almost always rejected. Each `Timer` scrambles its handles with a key of its
/// own, random in each process, so another `Timer`'s handle names a pending timer of its
/// own only by chance: at most about once in 2^27 (134 million), for a pair of `Timer`s
/// rather than for each use (one `Timer`'s handles read in the other all move their slot
/// and generation by the same bits).
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use shardwheel::TimerHandle;
///
/// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
/// // Kept in an atomic, for whichever thread finishes the request first.
/// let kept = AtomicU64::new(timer.schedule(Duration::from_secs(5), || {}).unwrap().to_bits());
/// let handle = TimerHandle::from_bits(kept.load(Ordering::Acquire));
/// assert!(timer.cancel(handle));
/// assert!(!timer.cancel(handle)); // stale now
/// ```
#[cfg(feature = "engine")]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerHandle(u64);

#[cfg(feature = "engine")]
impl TimerHandle {
    /// The handle as a `u64`, to keep in an atomic or send elsewhere.
    pub const fn to_bits(self) -> u64 {
        self.0
    }

    /// Rebuilds a handle from [`to_bits`](Self::to_bits). Any `u64` gives a handle; one
    /// that the `Timer` it is used with did not issue is rejected, as above.
    pub const fn from_bits(bits: u64) -> Self {
        TimerHandle(bits)
    }
}

#[cfg(feature = "engine")]
impl std::fmt::Debug for TimerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TimerHandle({:#018x})", self.0)
    }
}

/// How one `Timer` packs its handles: generation in the low `GENERATION_BITS`, then the
/// slot in `slot_bits`, then the shard, the whole XORed with the timer's key.
///
/// A shard's slot numbers take 31 bits (`slots::MAX_SLOTS`) while the shard number fits
/// the 6 bits left, that is up to 64 shards; a timer with more gives each shard fewer
/// (`slot_limit`): 2^(37 - ceil(log2 shards)), 2^30 from 65 to 128 shards down to 2^21
/// from 32,769 to 65,536, between 2^36 and 2^37 in all. A thread schedules on one shard,
/// so that is also how many timers one thread can have pending. The key, a bijective mix
/// of the timer's id and a seed drawn once per process, makes one timer's handles look
/// like random bits to another, in this process or another; an id is never given twice
/// in a process, so no two of its timers share a key.
#[cfg(feature = "engine")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handles {
    key: u64,
    slot_bits: u32,
}

/// A handle unpacked: where its timer is and the generation it was issued at.
#[cfg(feature = "engine")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) shard: usize,
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

#[cfg(feature = "engine")]
impl Handles {
    /// The packing of timer `id`'s handles, for `shards` shards (1 to 2^16).
    pub(crate) fn new(id: u64, shards: usize) -> Self {
        Handles {
            key: mix(id ^ process_seed()),
            slot_bits: Self::slot_limit(shards).trailing_zeros(),
        }
    }

    /// How many slots each of a timer's `shards` shards may hold: its slot numbers stay
    /// below this, a power of two.
    pub(crate) fn slot_limit(shards: usize) -> u32 {
        let shard_bits = usize::BITS - (shards.max(1) - 1).leading_zeros();
        crate::slots::MAX_SLOTS
            >> (shard_bits + crate::slots::MAX_SLOTS.trailing_zeros()).saturating_sub(PLACE_BITS)
    }

    /// The handle of slot `slot` (below `slot_limit`) at `generation` (below
    /// `slots::GENERATIONS`) in shard `shard`.
    #[inline]
    pub(crate) fn handle(self, shard: usize, slot: u32, generation: u32) -> TimerHandle {
        debug_assert!(
            u64::from(slot) >> self.slot_bits == 0,
            "slot {slot} past the limit"
        );
        debug_assert!(
            generation < crate::slots::GENERATIONS,
            "generation {generation}"
        );
        debug_assert!(
            (shard as u64) >> (PLACE_BITS - self.slot_bits) == 0,
            "shard {shard} past the bits left"
        );
        let place = ((shard as u64) << self.slot_bits) | u64::from(slot);
        TimerHandle(((place << GENERATION_BITS) | u64::from(generation)) ^ self.key)
    }

    /// What `handle` names, if it is one of this packing's (any other gives a shard,
    /// slot and generation too, which the timer then rejects, but for chance).
    #[inline]
    pub(crate) fn named(self, handle: TimerHandle) -> Named {
        let bits = handle.0 ^ self.key;
        let place = bits >> GENERATION_BITS;
        Named {
            // PLACE_BITS - slot_bits bits, 16 at most (slot_bits is 21 or more): it fits
            // any usize.
            shard: (place >> self.slot_bits) as usize,
            slot: (place & ((1 << self.slot_bits) - 1)) as u32,
            generation: (bits & ((1 << GENERATION_BITS) - 1)) as u32,
        }
    }
}

/// A random `u64` drawn once per process (from the OS, as std seeds its hash maps), so that
/// timer ids, which start at 0 in every process, key the handles differently in each.
#[cfg(feature = "engine")]
fn process_seed() -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64))
}

/// SplitMix64's finaliser: a bijection on `u64` that spreads every bit of `id` over all
/// 64, so two ids' keys differ in about half their bits.
#[cfg(feature = "engine")]
const fn mix(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::Key;
    #[cfg(feature = "engine")]
    use super::{Handles, Named, TimerHandle};
    #[cfg(feature = "engine")]
    use crate::slots::GENERATIONS;
    use proptest::prelude::*;

    #[cfg(feature = "engine")]
    proptest! {
        #[test]
        fn a_timer_reads_back_every_bit_of_its_handles(
            id: u64,
            shards in 1..=1usize << 16,
            shard_seed: usize,
            slot_seed: u32,
            generation in 0..GENERATIONS,
        ) {
            let handles = Handles::new(id, shards);
            let limit = Handles::slot_limit(shards);
            let (shard, slot) = (shard_seed % shards, slot_seed % limit);
            let handle = handles.handle(shard, slot, generation);
            prop_assert_eq!(handles.named(handle), Named { shard, slot, generation });
            prop_assert_eq!(TimerHandle::from_bits(handle.to_bits()), handle);
        }

        // Another timer's handle never unpacks to what it named there (the keys differ):
        // it names some other slot or generation, pending only by chance.
        #[test]
        fn another_timers_handles_name_something_else(id: u64, slot in 0..1u32 << 20) {
            let (ours, theirs) = (Handles::new(id, 2), Handles::new(id.wrapping_add(1), 2));
            let named = ours.named(theirs.handle(1, slot, 0));
            prop_assert_ne!(named, Named { shard: 1, slot, generation: 0 });
        }
    }

    #[cfg(feature = "engine")]
    #[test]
    fn shards_share_the_bits_a_generation_leaves() {
        // Up to 64 shards, each keeps a shard's full 2^31 slots; past that, each keeps
        // 2^(37 - ceil(log2 shards)).
        let limits = [
            (1, 1 << 31),
            (2, 1 << 31),
            (63, 1 << 31),
            (64, 1 << 31),
            (65, 1 << 30),
            (128, 1 << 30),
            (129, 1 << 29),
            (1 << 15, 1 << 22),
            ((1 << 15) + 1, 1 << 21),
            (1 << 16, 1 << 21),
        ];
        for (shards, limit) in limits {
            assert_eq!(Handles::slot_limit(shards), limit, "{shards} shards");
            // The last shard's last slot at the last generation, and the first of each,
            // read back whole: no field spills into another.
            let handles = Handles::new(7, shards);
            for named in [
                Named {
                    shard: shards - 1,
                    slot: limit - 1,
                    generation: GENERATIONS - 1,
                },
                Named {
                    shard: 0,
                    slot: 0,
                    generation: 0,
                },
                Named {
                    shard: shards - 1,
                    slot: 0,
                    generation: 0,
                },
                Named {
                    shard: 0,
                    slot: limit - 1,
                    generation: 0,
                },
            ] {
                let handle = handles.handle(named.shard, named.slot, named.generation);
                assert_eq!(handles.named(handle), named, "{shards} shards");
            }
        }
    }

    proptest! {
        #[test]
        fn bits_round_trip(index: u32, generation: u32) {
            let key = Key::new(index, generation);
            prop_assert_eq!(Key::from_bits(key.to_bits()), key);
            prop_assert_eq!(Key::from_bits(key.to_bits()).index(), index);
            prop_assert_eq!(Key::from_bits(key.to_bits()).generation(), generation);
        }

        #[test]
        fn any_bits_round_trip(bits: u64) {
            prop_assert_eq!(Key::from_bits(bits).to_bits(), bits);
        }
    }
}
