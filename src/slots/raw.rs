//! A slot's addresses with its payload's type left out (`RawSlot`): how a producer's stage
//! keeps the slots its owner freed and takes one again without locating it from its index
//! (the chunk, its pointer's load and check, the three offsets: some twenty instructions on
//! every schedule that reuses a slot). Only the stage's holder follows the addresses, and a
//! slot kept there is counted in the stage's chunk counts, so its chunk stays.

use super::{Body, Slot};
use crate::sync::AtomicU32;
use std::ptr::NonNull;

/// A slot's addresses with its payload's type left out, for a stage to keep the slots
/// its owner freed (see `stage::Held::free`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawSlot {
    state: NonNull<AtomicU32>,
    change_link: NonNull<AtomicU32>,
    body: NonNull<u8>,
}

// SAFETY: the pointers are followed only by `Slot::from_raw`, under its contract, on
// whichever thread holds the stage that keeps them; elsewhere they are not read.
unsafe impl Send for RawSlot {}

impl<'a, T> Slot<'a, T> {
    /// The slot's addresses, to find it again with `from_raw`.
    #[inline]
    pub(crate) fn raw(self) -> RawSlot {
        RawSlot {
            state: NonNull::from(self.state),
            change_link: NonNull::from(self.change_link),
            body: NonNull::from(self.body).cast(),
        }
    }

    /// The slot whose addresses `raw` are.
    ///
    /// # Safety
    ///
    /// `raw` came from `raw` of a slot of the same `Slots<T>` (so its body is a `Body<T>`),
    /// and that slot's chunk lives for `'a` (as `Slots::owned` requires: the slot, or
    /// another of its chunk, is the caller's).
    #[inline]
    pub(crate) unsafe fn from_raw(raw: RawSlot) -> Self {
        // SAFETY: the addresses are a live slot's (the caller's contract), whose body is a
        // `Body<T>`; all three are shared references to atomics and cells, as `slot_at`
        // makes them.
        let slot = unsafe {
            Slot {
                state: raw.state.as_ref(),
                change_link: raw.change_link.as_ref(),
                body: raw.body.cast::<Body<T>>().as_ref(),
            }
        };
        slot.check_live();
        slot
    }
}
