//! The bound a user sets on a timer's pending timers (`Builder::max_pending`), shared by
//! all its shards.
//!
//! A producer thread keeps to one shard, so a bound split evenly over the shards would
//! refuse a thread's timers at a fraction of what the user asked for. One counter for the
//! whole timer keeps the bound exact; it is a cache line that every shard's producers and
//! reapers write, so a timer without a bound (the default) has none and pays nothing.

use crate::sync::{AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;
use std::sync::Arc;

/// At most `max` timers pending over the shards that share it.
#[derive(Debug)]
pub(crate) struct Bound {
    max: usize,
    pending: CachePadded<AtomicUsize>,
}

impl Bound {
    /// The bound for `max` pending timers; `None` for no bound (`usize::MAX`).
    pub(crate) fn new(max: usize) -> Option<Arc<Bound>> {
        (max != usize::MAX).then(|| {
            Arc::new(Bound {
                max,
                pending: CachePadded::new(AtomicUsize::new(0)),
            })
        })
    }

    /// Counts one more timer in, unless `max` are pending: then false.
    pub(crate) fn admit(&self) -> bool {
        // Relaxed: a count, not a synchronisation. Incremented only while below the bound,
        // so a refusal always means `max` timers really are pending.
        self.pending
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Counts a timer out: it fired, was cancelled, handed back or refused.
    pub(crate) fn discharge(&self) {
        // Relaxed: as in `admit`.
        self.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_bound_admits_up_to_its_max_and_again_after_a_discharge() {
        assert!(Bound::new(usize::MAX).is_none(), "no bound, no counter");
        let bound = Bound::new(2).unwrap();
        assert!(bound.admit());
        assert!(bound.admit());
        assert!(!bound.admit());
        bound.discharge();
        assert!(bound.admit());
        assert!(!bound.admit());
    }
}
