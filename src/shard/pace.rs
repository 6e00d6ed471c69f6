//! What keeps a shard's reaper in pace with its producers where they share its core:
//! the producers' yields to it, and the timer's table of which reaper is pinned to which
//! CPU, from which a producer learns which reaper waits for the core it holds.
//!
//! A reaper with work to do waits for a core when producers keep every core busy, and a
//! producer holding its core would otherwise run out its time slice first (1.4 ms and
//! more on Linux). Two kinds of yield hand the core over sooner: the schedule or cancel
//! that makes a backlog (`BACKLOG`) yields to its shard's reaper if that is awake, and a
//! thread's periodic look (`Scheduler::look_for_waiting_reaper`) yields to the reaper
//! pinned to the core it runs on if that reaper is awake or overdue (it cannot be
//! running: this thread is). Both are hints read with Relaxed loads: a stale one costs one
//! needless yield, or one missed. `Counts::yielded` counts them.

use super::Shard;
use crate::sync::{AtomicU32, Ordering};
use std::sync::Arc;

impl<T> Shard<T> {
    /// Gives the shard its timer's table of which shard's reaper is pinned to each CPU:
    /// indexed by the CPU's number, the shard's index plus one, 0 for none; each reaper
    /// fills in its own entry once it is pinned (`pinned_to`).
    pub(crate) fn with_reapers_by_cpu(mut self, reapers_by_cpu: Arc<[AtomicU32]>) -> Self {
        self.reapers_by_cpu = reapers_by_cpu;
        self
    }

    /// The reaper of shard `index` (of this shard's timer) is pinned to CPU `cpu`.
    pub(crate) fn pinned_to(&self, index: usize, cpu: usize) {
        if let Some(entry) = self.reapers_by_cpu.get(cpu) {
            // Relaxed: a hint for producers' looks (`reaper_pinned_to`), which may miss
            // it for a while. The index fits: a timer has at most `MAX_SHARDS` shards.
            entry.store(index as u32 + 1, Ordering::Relaxed);
        }
    }

    /// The index of the shard (of this shard's timer) whose reaper is pinned to CPU `cpu`.
    pub(crate) fn reaper_pinned_to(&self, cpu: u32) -> Option<usize> {
        // Relaxed: as in `pinned_to`.
        let shard = self
            .reapers_by_cpu
            .get(cpu as usize)?
            .load(Ordering::Relaxed);
        (shard != 0).then(|| shard as usize - 1)
    }

    /// Whether this shard's timer pins its reapers (see `reaper_pinned_to`).
    pub(crate) fn reapers_pinned(&self) -> bool {
        !self.reapers_by_cpu.is_empty()
    }

    /// A push made a backlog (see `BACKLOG`): wakes the reaper, or yields to it if it is
    /// awake, and counts the yield.
    pub(super) fn notify_backlog(&self) {
        let yielded = self.wakeup.notify_backlog();
        self.count_yield(yielded);
    }

    /// The calling thread runs on the core this shard's reaper is pinned to: if the reaper
    /// is awake or planned to wake by `now`, yields to it (see `Wakeup::yield_if_overdue`),
    /// and counts the yield.
    pub(crate) fn yield_if_reaper_overdue(&self, now: u64) {
        let yielded = self.wakeup.yield_if_overdue(now);
        self.count_yield(yielded);
    }

    fn count_yield(&self, yielded: bool) {
        if yielded {
            // Relaxed: a count.
            self.counts.yielded.fetch_add(1, Ordering::Relaxed);
        }
    }
}
