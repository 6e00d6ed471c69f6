//! What a shard's reaper keeps of its timers: the wheel, where each timer waits for the
//! tick it is filed under, and, with exact deadlines, the timers whose tick has come but
//! whose exact deadline has not, in a heap by deadline.
//!
//! With exact deadlines a timer is filed under the tick its deadline falls in (rounded
//! down), so the wheel hands it over at the start of that tick, up to a tick early; the
//! reaper fires it then if its deadline has passed, and otherwise holds it here and sleeps
//! until the earliest deadline held. Only timers within a tick of firing come here, so the
//! heap stays small (a tick's worth of fires) and cancels never touch it: a held timer
//! that was cancelled, reset or fired meanwhile is recognised when it comes out (its slot
//! has moved on) and dropped.

use crate::slots::Freed;
use crate::stage::Stage;
use crate::wheel::Hierarchy;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// A shard's timers as its reaper keeps them (see the module doc).
#[derive(Debug, Default)]
pub struct Due {
    /// The wheel, its entries the shard's slots (see `shard::filing`).
    pub(crate) wheel: Hierarchy,
    near: BinaryHeap<Reverse<Near>>,
    /// The reaper's side of the shard's slots: those it freed this pass, and a shrink
    /// under way (see `slots`).
    pub(crate) freed: Freed,
    /// Whether the last pass left memory to give back (the reaper comes back soon).
    pub(crate) shrinking: bool,
    /// The producers' stages the reaper collects (see `stage`).
    pub(crate) stages: Vec<Arc<Stage>>,
    /// A change came for a timer still staged (a reset): collect every stage this pass.
    pub(crate) collect_all: bool,
    /// Cancels taken from the stages (see `shard::staged`), applied after the reaper's next
    /// look at the inbox.
    pub(crate) cancels: Vec<u32>,
    /// When the reaper next collects the stages that hold cancels (nanoseconds since the
    /// start): once a tidy interval.
    pub(crate) tidy_at: u64,
    /// Timers fired since the reaper last planned a sleep (see `shard::nap`).
    pub(crate) fired: u64,
}

/// A timer held until its exact deadline: its slot, as it stood when it was held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Near {
    /// Nanoseconds since the start; first, so that the heap orders by it.
    pub(crate) deadline: u64,
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl Due {
    /// Nothing pending.
    pub fn new() -> Self {
        Due::default()
    }

    /// The next pass collects the cancels every stage holds, whenever it last did: a
    /// manual timer's `advance` takes in every cancel made since the last.
    pub(crate) fn tidy_now(&mut self) {
        self.tidy_at = 0;
    }

    /// Holds a timer until its deadline.
    pub(crate) fn hold(&mut self, near: Near) {
        self.near.push(Reverse(near));
    }

    /// The earliest deadline held, if any.
    pub(crate) fn next_near(&self) -> Option<u64> {
        self.near.peek().map(|Reverse(near)| near.deadline)
    }

    /// Takes out a held timer whose deadline is at or before `elapsed`.
    pub(crate) fn pop_near(&mut self, elapsed: u64) -> Option<Near> {
        match self.near.peek() {
            Some(Reverse(near)) if near.deadline <= elapsed => {
                self.near.pop().map(|Reverse(near)| near)
            }
            _ => None,
        }
    }

    /// Takes out every held timer, at shutdown.
    pub(crate) fn drain_near(&mut self) -> impl Iterator<Item = Near> + '_ {
        self.near.drain().map(|Reverse(near)| near)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_timers_come_out_by_deadline_once_due() {
        let mut due = Due::new();
        for (deadline, index) in [(30, 3), (10, 1), (20, 2)] {
            due.hold(Near {
                deadline,
                index,
                generation: 0,
            });
        }
        assert_eq!(due.next_near(), Some(10));
        assert_eq!(due.pop_near(9), None);
        assert_eq!(due.pop_near(25).map(|near| near.index), Some(1));
        assert_eq!(due.pop_near(25).map(|near| near.index), Some(2));
        assert_eq!(due.pop_near(25), None);
        assert_eq!(
            due.drain_near().map(|near| near.index).collect::<Vec<_>>(),
            [3]
        );
        assert_eq!(due.next_near(), None);
    }
}
