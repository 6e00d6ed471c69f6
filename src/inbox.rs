//! A lock-free multi-producer, single-consumer list of slots, intrusive through a link
//! field of each slot: the way producer threads hand timers (and cancellations) to a
//! shard's reaper without a lock and without allocating.
//!
//! Producers push with a compare-and-swap on the head (a Treiber stack push); the reaper
//! takes the whole list at once with a swap, so it never contends with more than the one
//! CAS in flight and needs no per-message synchronisation. Pushes cannot suffer ABA: a push
//! only ever links in front of the head it read and succeeds only if that is still the head.
//! The list comes out newest first; the reaper does not depend on the order.
//!
//! Closing swaps in a sentinel that no push gets past, so that at shutdown every timer is
//! either in the list the reaper took last or was refused to its producer: none is lost.
//!
//! The head word also counts the messages waiting (high half; the newest's index in the
//! low half), for free in the same CAS: a producer learns when a backlog has built up
//! that a sleeping reaper should take now rather than at its planned wake-up.

use crate::slab::NIL;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The head of a closed list. Slot indices stay below `slots::MAX_SLOTS`, so this is free.
const CLOSED: u32 = u32::MAX - 1;

/// The head word of a list holding `count` messages, the newest `index`.
const fn head_word(count: u32, index: u32) -> u64 {
    ((count as u64) << 32) | index as u64
}

/// The newest index of a head word.
const fn newest(word: u64) -> u32 {
    word as u32
}

/// The list was closed: the reaper is gone.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Closed;

#[derive(Debug)]
pub(crate) struct Inbox {
    head: AtomicU64,
}

impl Inbox {
    pub(crate) fn new() -> Self {
        Inbox {
            head: AtomicU64::new(head_word(0, NIL)),
        }
    }

    /// Pushes slot `index`, whose link field is `link`. Returns how many messages were
    /// waiting before it (0: the list was empty, and the reaper may want waking), or
    /// `Closed`.
    pub(crate) fn push(&self, index: u32, link: &AtomicU32) -> Result<u32, Closed> {
        self.push_chain(index, link, 1)
    }

    /// Pushes `count` slots in one CAS: `first` and those its link leads to, the last of
    /// them with link field `last_link` (a stage's timers). As `push` otherwise.
    pub(crate) fn push_chain(
        &self,
        first: u32,
        last_link: &AtomicU32,
        count: u32,
    ) -> Result<u32, Closed> {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            if newest(head) == CLOSED {
                return Err(Closed);
            }
            last_link.store(newest(head), Ordering::Relaxed);
            let waiting = (head >> 32) as u32;
            // Release: publishes the slots (payloads, deadlines, links) to the reaper's
            // Acquire swap. Relaxed on failure: the new head is only re-read. (The park
            // handshake orders this push with a fence of its own: see `wakeup`.)
            match self.head.compare_exchange_weak(
                head,
                head_word(waiting.wrapping_add(count), first),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(waiting),
                Err(current) => head = current,
            }
        }
    }

    /// Takes every slot pushed so far: the newest's index, or `NIL`. Then follow the links.
    /// Only the consumer calls it, and never after `close`.
    pub(crate) fn take_all(&self) -> u32 {
        // Acquire: pairs with the pushes' Release (see `push`).
        let head = newest(self.head.swap(head_word(0, NIL), Ordering::Acquire));
        debug_assert_ne!(head, CLOSED, "take_all after close");
        head
    }

    /// Whether anything waits in the list: the reaper's last look before it parks.
    pub(crate) fn is_empty(&self) -> bool {
        // Relaxed: only a hint; in the park handshake a SeqCst fence orders it (see
        // `wakeup`), and the messages themselves are read after `take_all`'s Acquire.
        matches!(newest(self.head.load(Ordering::Relaxed)), NIL | CLOSED)
    }

    /// Refuses every later push and returns what was pushed before, as `take_all` does.
    pub(crate) fn close(&self) -> u32 {
        // Acquire: see everything the last pushes published.
        match newest(self.head.swap(head_word(0, CLOSED), Ordering::Acquire)) {
            CLOSED => NIL,
            head => head,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_everything_pushed_newest_first() {
        let links: Vec<AtomicU32> = (0..3).map(|_| AtomicU32::new(0)).collect();
        let inbox = Inbox::new();
        assert!(inbox.is_empty());
        assert_eq!(inbox.push(0, &links[0]), Ok(0));
        assert_eq!(inbox.push(2, &links[2]), Ok(1));
        assert!(!inbox.is_empty());
        let mut order = Vec::new();
        let mut at = inbox.take_all();
        while at != NIL {
            order.push(at);
            at = links[at as usize].load(Ordering::Relaxed);
        }
        assert_eq!(order, [2, 0]);
        assert_eq!(inbox.take_all(), NIL);
        assert_eq!(inbox.push(1, &links[1]), Ok(0), "the count starts again");
    }

    #[test]
    fn a_closed_inbox_refuses_pushes_and_hands_back_the_rest() {
        let links: Vec<AtomicU32> = (0..2).map(|_| AtomicU32::new(0)).collect();
        let inbox = Inbox::new();
        inbox.push(1, &links[1]).unwrap();
        assert_eq!(inbox.close(), 1);
        assert_eq!(inbox.push(0, &links[0]), Err(Closed));
        assert!(inbox.is_empty());
        assert_eq!(inbox.close(), NIL);
    }
}
