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

/// Bits of a handle that name its shard; the timer's id has the other 48 of a `u64`.
#[cfg(feature = "engine")]
pub(crate) const SHARD_BITS: u32 = 16;

/// Names one timer of a [`Timer`](crate::Timer): the timer, the shard, the slot and the
/// generation it was issued at.
///
/// Like a [`Key`], it stays valid until its timer fires or is cancelled; after that
/// [`Timer::cancel`](crate::Timer::cancel) with it returns false, even once the slot holds
/// another timer, and so does a handle of another `Timer`: every `Timer` a process builds
/// has an id of its own, never given again.
#[cfg(feature = "engine")]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    /// The timer's id in the high 48 bits, the shard in the low 16.
    owner: u64,
    slot: u32,
    generation: u32,
}

#[cfg(feature = "engine")]
impl TimerHandle {
    /// The handle of slot `slot` at `generation` in shard `shard` (below 2^16) of timer
    /// `timer` (below 2^48).
    pub(crate) const fn new(timer: u64, shard: u32, slot: u32, generation: u32) -> Self {
        TimerHandle {
            owner: (timer << SHARD_BITS) | shard as u64,
            slot,
            generation,
        }
    }

    pub(crate) const fn timer(self) -> u64 {
        self.owner >> SHARD_BITS
    }

    pub(crate) const fn shard(self) -> u32 {
        (self.owner & ((1 << SHARD_BITS) - 1)) as u32
    }

    pub(crate) const fn slot(self) -> u32 {
        self.slot
    }

    pub(crate) const fn generation(self) -> u32 {
        self.generation
    }
}

#[cfg(feature = "engine")]
impl std::fmt::Debug for TimerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TimerHandle({}:{}:{}v{})",
            self.timer(),
            self.shard(),
            self.slot,
            self.generation
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Key;
    #[cfg(feature = "engine")]
    use super::{SHARD_BITS, TimerHandle};
    use proptest::prelude::*;

    #[cfg(feature = "engine")]
    proptest! {
        // Timer ids were 32 bits: after 2^32 timers were built, a handle of the first
        // could name a slot of a later one.
        #[test]
        fn timer_handles_keep_every_bit_of_the_id_and_shard(
            timer in 0..1u64 << (64 - SHARD_BITS),
            shard in 0..1u32 << SHARD_BITS,
            slot: u32,
            generation: u32,
        ) {
            let handle = TimerHandle::new(timer, shard, slot, generation);
            prop_assert_eq!(handle.timer(), timer);
            prop_assert_eq!(handle.shard(), shard);
            prop_assert_eq!(handle.slot(), slot);
            prop_assert_eq!(handle.generation(), generation);
            let after_2_32 = TimerHandle::new(timer ^ (1 << 32), shard, slot, generation);
            prop_assert_ne!(after_2_32, handle);
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
