//! The reaper's wheel over the shard's own slots: one record per timer.
//!
//! The reaper files each timer in a hierarchical wheel (`wheel::hierarchy`) whose entries
//! are the shard's slots themselves, named by slot number: a slot's deadline is the
//! timer's, its `link` is the next entry of its bucket (a slot in the wheel is in no free
//! stack, inbox or stage, the other users of `link`), and its `wheel_prev` the previous
//! one. So a pending timer costs one slot, not a slot and a second entry in a wheel of its
//! own, and filing it touches the line its producer wrote rather than another.
//!
//! Only the reaper reads or writes the wheel's links. The deadline is the slot's, which a
//! `reset` may be rewriting while the timer is in the wheel: the wheel then sees either
//! value, which is sound, since such a timer is never fired (its flags stop the claim) and
//! the reset's change moves it once it lands.

use super::Shard;
use crate::clock;
use crate::due::Due;
use crate::slab::NIL;
use crate::slots::{Slot, Slots};
use crate::sync::Ordering;
use crate::wheel::hierarchy::Links;

/// The shard's slots as the wheel reaches them (see the module doc).
pub(super) struct Filed<'a, T> {
    slots: &'a Slots<T>,
    tick_nanos: u64,
    exact: bool,
}

impl<T> Filed<'_, T> {
    fn slot(&self, index: u32) -> Slot<'_, T> {
        // SAFETY: the reaper may look at any slot (see `Slots::owned`), and the wheel holds
        // live ones.
        unsafe { self.slots.owned(index) }.expect("the wheel holds live slots")
    }
}

impl<T> Links for Filed<'_, T> {
    #[inline]
    fn tick(&self, index: u32) -> u64 {
        // Relaxed: published by the arrival or change that filed the slot; a reset's write
        // meanwhile is handled as the module doc says.
        let deadline = self.slot(index).deadline.load(Ordering::Relaxed);
        tick_of(deadline, self.tick_nanos, self.exact)
    }

    #[inline]
    fn prev(&self, index: u32) -> u32 {
        self.slot(index).wheel_prev()
    }

    #[inline]
    fn next(&self, index: u32) -> u32 {
        // Relaxed: the reaper's own link while the slot is in the wheel.
        self.slot(index).link.load(Ordering::Relaxed)
    }

    #[inline]
    fn set_prev(&mut self, index: u32, prev: u32) {
        self.slot(index).set_wheel_prev(prev);
    }

    #[inline]
    fn set_next(&mut self, index: u32, next: u32) {
        // Relaxed: as in `next`.
        self.slot(index).link.store(next, Ordering::Relaxed);
    }
}

/// The tick a deadline (nanoseconds since the start) is filed under: with exact deadlines
/// the tick it falls in, rounded down (see `due`), otherwise the first tick at or after it.
fn tick_of(deadline: u64, tick_nanos: u64, exact: bool) -> u64 {
    if exact {
        deadline / tick_nanos
    } else {
        clock::tick_of(deadline, tick_nanos)
    }
}

impl<T> Shard<T> {
    /// The slots as the wheel reaches them.
    fn filed(&self) -> Filed<'_, T> {
        Filed {
            slots: &self.slots,
            tick_nanos: self.tick_nanos,
            exact: self.exact,
        }
    }

    /// Files slot `index` in the wheel under tick `tick`, or moves it there if it is in.
    pub(super) fn place(&self, due: &mut Due, index: u32, slot: Slot<'_, T>, tick: u64) {
        let mut filed = self.filed();
        if slot.wheel_prev() != NIL {
            due.wheel.unlink(&mut filed, index);
        }
        due.wheel.link(&mut filed, index, tick);
    }

    /// Files slot `index` in the wheel, or moves it there, under its deadline's tick.
    pub(super) fn place_at_deadline(&self, due: &mut Due, index: u32, slot: Slot<'_, T>) {
        // Relaxed: published by the inbox push or the change that brought the slot here.
        let deadline = slot.deadline.load(Ordering::Relaxed);
        self.place(
            due,
            index,
            slot,
            tick_of(deadline, self.tick_nanos, self.exact),
        );
    }

    /// Takes slot `index` out of the wheel, if it is in.
    pub(super) fn unfile(&self, due: &mut Due, index: u32, slot: Slot<'_, T>) {
        if slot.wheel_prev() != NIL {
            due.wheel.unlink(&mut self.filed(), index);
            slot.set_wheel_prev(NIL);
        }
    }

    /// Advances the wheel to tick `now` and takes out a timer due by then: its slot
    /// number, out of the wheel.
    pub(super) fn poll_wheel(&self, due: &mut Due, now: u64) -> Option<u32> {
        let mut filed = self.filed();
        let (index, _) = due.wheel.poll(&mut filed, now)?;
        filed.slot(index).set_wheel_prev(NIL);
        Some(index)
    }
}
