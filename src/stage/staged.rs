//! A timer in a stage (`Staged`): its slot's number, and a pointer to the slot's `link`,
//! where a staged timer keeps its place in the stage, so that the owner that takes a timer
//! out moves the last one into the gap and writes its new place without locating its slot
//! again. Only the stage's holder writes through the pointer; once handed over, an entry
//! is its index alone.

use crate::sync::{AtomicU32, Ordering};
use std::ptr::NonNull;

/// A timer in a stage: its slot, and a pointer to the slot's `link`, where it keeps its
/// place in the stage. The owner that takes a timer out of its stage moves the last one
/// into the gap and writes that one's new place through the pointer, rather than locate
/// its slot again from the index (a chunk lookup and some twenty instructions on every
/// cancel of a staged timer). Only the holder of the stage writes through it; once
/// handed over, only the index is used.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Staged {
    pub(crate) index: u32,
    link: NonNull<AtomicU32>,
}

// SAFETY: the pointer is dereferenced only by the holder of the stage the entry is in (see
// `set_place`), whichever thread that is; elsewhere the entry is an index.
unsafe impl Send for Staged {}

impl Staged {
    /// The timer in slot `index`, whose `link` is `link`.
    #[inline]
    pub(crate) fn new(index: u32, link: &AtomicU32) -> Self {
        Staged {
            index,
            link: NonNull::from(link),
        }
    }

    /// Records `place` as the timer's place in its stage, in its slot's `link`.
    ///
    /// # Safety
    ///
    /// The caller holds the stage this entry is in: the slot is staged there, so it is
    /// pending or cancelled, never free, and its chunk, which cannot be given back while
    /// one of its slots is not free, holds the `link` (see `slots::shrink`).
    #[inline]
    pub(crate) unsafe fn set_place(&self, place: usize) {
        // SAFETY: the link lives (the caller's contract), and is an atomic: a shared
        // reference to it is all a store needs.
        let link = unsafe { self.link.as_ref() };
        // Relaxed: the stage's holder alone reads a staged slot's place, published to the
        // next holder with the stage's Acquire and Release.
        link.store(place as u32, Ordering::Relaxed);
    }
}
