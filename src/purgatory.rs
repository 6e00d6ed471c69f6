//! Delayed operations that complete early when the event they wait for arrives, or expire
//! at a timeout: Kafka's `DelayedOperationPurgatory` (a produce request waiting for its
//! replicas' acknowledgements, a fetch waiting for bytes) on a shardwheel [`Timer`].
//!
//! An operation is watched under any number of keys. An event calls
//! [`Purgatory::check_and_complete`] with its key, which asks each operation watched under
//! it whether it can complete now. Each operation completes exactly once: by an event, or
//! by its timer, whichever wins one atomic flag; the winner cancels the other side (the
//! timer in O(1); the watcher lists are purged).
//!
//! The lessons of Kafka's issue tracker: no user code runs under the purgatory's locks
//! (KAFKA-3994: completing under a lock deadlocked), and completed operations are purged
//! from every watcher list they sit in, and empty lists removed, so memory follows what is
//! pending (KAFKA-19763: completed operations kept alive by watchers ran a broker out of
//! memory).

use crate::error::{AdvanceError, BuildError, ScheduleError};
use crate::handle::TimerHandle;
use crate::timer::{Builder, Timer};
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// An operation that waits in a [`Purgatory`] until it can complete, or until its delay
/// passes. Its methods may be called from several threads at once (events arrive on any
/// thread; expiry runs on a reaper thread); the purgatory guarantees only that exactly one
/// completion happens.
pub trait DelayedOperation: Send + Sync + 'static {
    /// How long the operation may wait before it expires.
    fn delay(&self) -> Duration;

    /// Whether the operation can complete now (its acknowledgements arrived, its bytes are
    /// there). Called when it enters the purgatory and on every event under one of its
    /// keys, never under the purgatory's locks; it may be called again after it returned
    /// true, while another thread completes the operation.
    fn try_complete(&self) -> bool;

    /// Completes the operation (sends the response): called exactly once, whether an event
    /// or the expiry completed it.
    fn on_complete(&self);

    /// Called after [`on_complete`](Self::on_complete) when the operation expired.
    fn on_expiration(&self) {}
}

/// An operation in the purgatory.
struct Entry<O> {
    op: O,
    /// Set by whichever completes the operation, once.
    completed: AtomicBool,
    /// Its timer, for an event that completes the operation to cancel.
    timer: OnceLock<TimerHandle>,
}

impl<O: DelayedOperation> Entry<O> {
    fn is_completed(&self) -> bool {
        // Acquire: pairs with the winning swap, so a caller that skips a completed
        // operation also sees what its completion did.
        self.completed.load(Ordering::Acquire)
    }

    /// Claims the completion: true for exactly one caller.
    fn claim(&self) -> bool {
        // AcqRel: one RMW decides the winner; Release publishes what the claimer saw
        // before, Acquire sees what an earlier claimer published (if this one loses).
        !self.completed.swap(true, Ordering::AcqRel)
    }
}

/// One shard's watcher lists.
type Lists<K, O> = HashMap<K, Vec<Arc<Entry<O>>>>;

/// Watcher lists: key to the operations watched under it, in shards so that events on
/// different keys seldom take the same lock. Shared with the timer's expiry handler, which
/// purges them as Kafka's expiration reaper does.
struct Watchers<K, O> {
    shards: Box<[Mutex<Lists<K, O>>]>,
    hasher: RandomState,
    /// Operations completed (by events or expiry) since the last purge.
    completed_since_purge: AtomicUsize,
    purge_interval: usize,
    /// What [`Purgatory::counts`] reports besides the levels it reads.
    counts: Totals,
}

/// The purgatory's totals, each counted where it happens (Relaxed: counts).
#[derive(Default)]
struct Totals {
    completed: AtomicU64,
    expired: AtomicU64,
    purges: AtomicU64,
}

/// A [`Purgatory`]'s counts: from [`Purgatory::counts`], for a scrape (Kafka's
/// `PurgatorySize`, `NumDelayedOperations` and expiration rate), and to the `metrics`
/// facade with the `metrics` feature (`Purgatory::record_metrics`).
///
/// ```
/// use shardwheel::purgatory::{DelayedOperation, Purgatory};
/// use std::time::Duration;
///
/// struct Fetch(bool);
/// impl DelayedOperation for Fetch {
///     fn delay(&self) -> Duration { Duration::from_millis(500) }
///     fn try_complete(&self) -> bool { self.0 }
///     fn on_complete(&self) {}
/// }
///
/// let purgatory = Purgatory::new(shardwheel::Timer::builder().shards(1).manual()).unwrap();
/// purgatory.try_complete_else_watch(Fetch(true), ["topic-0"]).unwrap(); // at once
/// purgatory.try_complete_else_watch(Fetch(false), ["topic-0"]).unwrap();
/// purgatory.try_complete_else_watch(Fetch(false), ["topic-1"]).unwrap();
/// purgatory.advance(Duration::from_millis(500)).unwrap();
/// let counts = purgatory.counts();
/// assert_eq!((counts.completed, counts.expired, counts.delayed), (1, 2, 0));
/// assert_eq!(counts.watched, 2); // expired, not yet purged
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgatoryCounts {
    /// Operations waiting: neither completed nor expired ([`Purgatory::delayed`]).
    pub delayed: usize,
    /// Entries in the watcher lists, completed ones not yet purged included
    /// ([`Purgatory::watched`]).
    pub watched: usize,
    /// Operations completed by an event, or at once as they came.
    pub completed: u64,
    /// Operations that expired.
    pub expired: u64,
    /// Purges of the watcher lists, by themselves or by [`Purgatory::purge`].
    pub purges: u64,
}

impl PurgatoryCounts {
    /// Each count with its field's name, in the order of the fields, as
    /// [`Counts::named`](crate::Counts::named) gives a timer's. `delayed` and `watched`
    /// are levels; the others only grow.
    ///
    /// ```
    /// use shardwheel::purgatory::PurgatoryCounts;
    ///
    /// let named = PurgatoryCounts::default().named();
    /// assert_eq!(named[0], ("delayed", 0));
    /// ```
    pub fn named(&self) -> [(&'static str, u64); 5] {
        [
            ("delayed", self.delayed as u64),
            ("watched", self.watched as u64),
            ("completed", self.completed),
            ("expired", self.expired),
            ("purges", self.purges),
        ]
    }

    /// Whether the count named `name` (by [`named`](Self::named)) is a level (`delayed`,
    /// `watched`) rather than a total.
    ///
    /// ```
    /// use shardwheel::purgatory::PurgatoryCounts;
    ///
    /// assert!(PurgatoryCounts::is_level("watched"));
    /// assert!(!PurgatoryCounts::is_level("expired"));
    /// ```
    pub fn is_level(name: &str) -> bool {
        matches!(name, "delayed" | "watched")
    }
}

/// Watcher-list shards; a power of two.
const WATCHER_SHARDS: usize = 64;

impl<K: Hash + Eq, O: DelayedOperation> Watchers<K, O> {
    fn shard(&self, key: &K) -> MutexGuard<'_, Lists<K, O>> {
        let index = self.hasher.hash_one(key) as usize & (WATCHER_SHARDS - 1);
        // No user code runs under these locks, so a poisoned one still holds valid lists.
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a completion, and purges once they add up to the purge interval.
    fn completed(&self) {
        // Relaxed: a trigger; the purge itself takes the locks.
        let since = self.completed_since_purge.fetch_add(1, Ordering::Relaxed) + 1;
        if since >= self.purge_interval
            && self.completed_since_purge.swap(0, Ordering::Relaxed) >= self.purge_interval
        {
            self.purge();
        }
    }

    /// See [`Purgatory::purge`].
    fn purge(&self) {
        self.counts.purges.fetch_add(1, Ordering::Relaxed);
        for shard in self.shards.iter() {
            let mut garbage = Vec::new();
            {
                let mut lists = shard.lock().unwrap_or_else(PoisonError::into_inner);
                lists.retain(|_, list| {
                    garbage.extend(list.extract_if(.., |entry| entry.is_completed()));
                    !list.is_empty()
                });
            }
            // Dropped with no lock held: the last reference drops the operation, user
            // code.
            drop(garbage);
        }
    }
}

/// Kafka's `DelayedOperationPurgatory` on shardwheel: operations of type `O`, watched
/// under keys of type `K`, each completed exactly once by an event or by its expiry.
///
/// ```
/// use shardwheel::purgatory::{DelayedOperation, Purgatory};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// /// Waits for two acknowledgements.
/// struct Produce { acks: Arc<AtomicUsize>, done: Arc<AtomicUsize> }
///
/// impl DelayedOperation for Produce {
///     fn delay(&self) -> Duration { Duration::from_secs(30) }
///     fn try_complete(&self) -> bool { self.acks.load(Ordering::SeqCst) >= 2 }
///     fn on_complete(&self) { self.done.fetch_add(1, Ordering::SeqCst); }
/// }
///
/// let purgatory = Purgatory::new(shardwheel::Timer::builder().shards(1)).unwrap();
/// let (acks, done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
/// let op = Produce { acks: Arc::clone(&acks), done: Arc::clone(&done) };
/// assert!(!purgatory.try_complete_else_watch(op, ["partition-0"]).unwrap());
/// acks.fetch_add(1, Ordering::SeqCst);
/// assert_eq!(purgatory.check_and_complete(&"partition-0"), 0);
/// acks.fetch_add(1, Ordering::SeqCst);
/// assert_eq!(purgatory.check_and_complete(&"partition-0"), 1);
/// assert_eq!((done.load(Ordering::SeqCst), purgatory.delayed()), (1, 0));
/// ```
pub struct Purgatory<K, O: DelayedOperation> {
    timer: Timer<Arc<Entry<O>>>,
    watchers: Arc<Watchers<K, O>>,
}

impl<K: Hash + Eq + Send + Sync + 'static, O: DelayedOperation> Purgatory<K, O> {
    /// A purgatory whose operations expire on a timer configured by `builder` (its
    /// shards, tick, `max_pending`...). Completed operations are purged from the watcher
    /// lists after every 1,000 completions.
    ///
    /// # Errors
    ///
    /// As [`Builder::build`].
    pub fn new(builder: Builder) -> Result<Self, BuildError> {
        Self::with_purge_interval(builder, 1_000)
    }

    /// As [`new`](Self::new), purging after every `purge_interval` completions (Kafka's
    /// `purgeInterval`): smaller keeps less memory, larger costs less time.
    ///
    /// # Errors
    ///
    /// As [`Builder::build`].
    pub fn with_purge_interval(
        builder: Builder,
        purge_interval: usize,
    ) -> Result<Self, BuildError> {
        let watchers = Arc::new(Watchers {
            shards: (0..WATCHER_SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            completed_since_purge: AtomicUsize::new(0),
            purge_interval: purge_interval.max(1),
            counts: Totals::default(),
        });
        let expired = Arc::clone(&watchers);
        let timer = builder.build_with(move |entry: Arc<Entry<O>>| {
            if entry.claim() {
                expired.counts.expired.fetch_add(1, Ordering::Relaxed);
                entry.op.on_complete();
                entry.op.on_expiration();
                expired.completed();
            }
        })?;
        Ok(Purgatory { timer, watchers })
    }

    /// Completes `op` at once if it can; otherwise watches it under each of `keys` and
    /// starts its expiry timer. Returns whether it completed here.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Full`] or [`ScheduleError::Shutdown`] if its timer could not be
    /// scheduled; the operation is handed back, neither completed nor watched.
    pub fn try_complete_else_watch(
        &self,
        op: O,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<bool, ScheduleError<O>> {
        if op.try_complete() {
            self.watchers
                .counts
                .completed
                .fetch_add(1, Ordering::Relaxed);
            op.on_complete();
            return Ok(true);
        }
        let entry = self.start_timer(op)?;
        for key in keys {
            self.watchers
                .shard(&key)
                .entry(key)
                .or_default()
                .push(Arc::clone(&entry));
        }
        // An event may have come between the first try and the watching, and found
        // nothing to complete: try again now that events will find it.
        Ok(entry.op.try_complete() && self.complete(&entry))
    }

    /// Puts `op` in an entry and schedules its expiry.
    fn start_timer(&self, op: O) -> Result<Arc<Entry<O>>, ScheduleError<O>> {
        let entry = Arc::new(Entry {
            op,
            completed: AtomicBool::new(false),
            timer: OnceLock::new(),
        });
        match self.timer.insert(entry.op.delay(), Arc::clone(&entry)) {
            Ok(handle) => {
                // Set before any event can reach the entry: events find it through the
                // watcher lists, whose locks publish this.
                let _ = entry.timer.set(handle);
                Ok(entry)
            }
            Err(refused) => {
                let full = matches!(refused, ScheduleError::Full(_));
                drop(refused); // the timer's reference
                let op = Arc::into_inner(entry).expect("the only reference left").op;
                Err(if full {
                    ScheduleError::Full(op)
                } else {
                    ScheduleError::Shutdown(op)
                })
            }
        }
    }

    /// Completes `entry` if nobody has: cancels its timer and runs `on_complete`.
    fn complete(&self, entry: &Entry<O>) -> bool {
        if !entry.claim() {
            return false;
        }
        if let Some(&handle) = entry.timer.get() {
            self.timer.cancel(handle);
        }
        self.watchers
            .counts
            .completed
            .fetch_add(1, Ordering::Relaxed);
        entry.op.on_complete();
        self.watchers.completed();
        true
    }

    /// Tries to complete every operation watched under `key` (call it when the event
    /// they wait for happens), and returns how many it completed. Completed operations
    /// leave `key`'s list, and an empty list is removed.
    pub fn check_and_complete(&self, key: &K) -> usize {
        // A snapshot: operations are tried with no lock held, and one that joins the list
        // meanwhile tries itself after joining (see `try_complete_else_watch`).
        let Some(watched) = self.watchers.shard(key).get(key).cloned() else {
            return 0;
        };
        let completed = watched
            .iter()
            .filter(|entry| {
                !entry.is_completed() && entry.op.try_complete() && self.complete(entry)
            })
            .count();
        let mut shard = self.watchers.shard(key);
        let removed: Vec<_> = match shard.get_mut(key) {
            Some(list) => {
                let removed = list.extract_if(.., |entry| entry.is_completed()).collect();
                if list.is_empty() {
                    shard.remove(key);
                }
                removed
            }
            None => Vec::new(),
        };
        drop(shard);
        // Dropped with no lock held: the last reference drops the operation, user code.
        drop((watched, removed));
        completed
    }

    /// Removes completed (and expired) operations from every watcher list, and the lists
    /// left empty. It runs by itself after every `purge_interval` completions (on the
    /// thread that made the last one: an event's, or a reaper for an expiry).
    pub fn purge(&self) {
        self.watchers.purge();
    }

    /// Moves the time of a purgatory built on a [manual](Builder::manual) timer forward by
    /// `by`, and expires, on the calling thread, the operations that makes due (see
    /// [`Timer::advance`]): a test drives expiry without waiting.
    ///
    /// # Errors
    ///
    /// As [`Timer::advance`]: [`AdvanceError::NotManual`] for a purgatory with reaper
    /// threads.
    ///
    /// ```
    /// use shardwheel::purgatory::{DelayedOperation, Purgatory};
    /// use std::time::Duration;
    ///
    /// struct Fetch;
    /// impl DelayedOperation for Fetch {
    ///     fn delay(&self) -> Duration { Duration::from_millis(500) }
    ///     fn try_complete(&self) -> bool { false }
    ///     fn on_complete(&self) {}
    /// }
    ///
    /// let purgatory = Purgatory::new(shardwheel::Timer::builder().shards(1).manual()).unwrap();
    /// purgatory.try_complete_else_watch(Fetch, ["topic-0"]).unwrap();
    /// purgatory.advance(Duration::from_millis(499)).unwrap();
    /// assert_eq!(purgatory.delayed(), 1);
    /// purgatory.advance(Duration::from_millis(1)).unwrap();
    /// assert_eq!(purgatory.delayed(), 0); // expired
    /// ```
    pub fn advance(&self, by: Duration) -> Result<(), AdvanceError> {
        self.timer.advance(by)
    }

    /// Operations waiting: neither completed nor expired.
    pub fn delayed(&self) -> usize {
        self.timer.pending()
    }

    /// Entries in all watcher lists (an operation counts once per key), completed ones
    /// not yet purged included: what the watchers hold in memory.
    pub fn watched(&self) -> usize {
        self.watchers
            .shards
            .iter()
            .map(|shard| {
                let lists = shard.lock().unwrap_or_else(PoisonError::into_inner);
                lists.values().map(Vec::len).sum::<usize>()
            })
            .sum()
    }

    /// The purgatory's counts (see [`PurgatoryCounts`]). Reading `watched` takes each
    /// watcher-list lock briefly.
    pub fn counts(&self) -> PurgatoryCounts {
        let totals = &self.watchers.counts;
        PurgatoryCounts {
            delayed: self.delayed(),
            watched: self.watched(),
            completed: totals.completed.load(Ordering::Relaxed),
            expired: totals.expired.load(Ordering::Relaxed),
            purges: totals.purges.load(Ordering::Relaxed),
        }
    }

    /// Sets the `metrics` facade's metrics to the purgatory's counts, labelled `purgatory`
    /// (with `name`): counters `shardwheel_purgatory_completed_total`, `_expired_total`
    /// and `_purges_total`, gauges `shardwheel_purgatory_delayed` and
    /// `shardwheel_purgatory_watched` (see [`PurgatoryCounts`]); and its timer's, as
    /// [`Timer::record_metrics`] sets them, labelled `timer` (with `name`). Call it
    /// periodically or before each scrape.
    ///
    /// ```
    /// use shardwheel::purgatory::{DelayedOperation, Purgatory};
    /// use std::time::Duration;
    ///
    /// struct Fetch;
    /// impl DelayedOperation for Fetch {
    ///     fn delay(&self) -> Duration { Duration::from_millis(500) }
    ///     fn try_complete(&self) -> bool { false }
    ///     fn on_complete(&self) {}
    /// }
    ///
    /// let purgatory = Purgatory::new(shardwheel::Timer::builder().shards(1).manual()).unwrap();
    /// purgatory.try_complete_else_watch(Fetch, ["topic-0"]).unwrap();
    /// purgatory.record_metrics("fetch"); // no recorder installed here: nothing is recorded
    /// ```
    #[cfg(feature = "metrics")]
    pub fn record_metrics(&self, name: &str) {
        let labels = [("purgatory", name.to_owned())];
        let counts = self.counts();
        crate::observe::record_named(
            "shardwheel_purgatory",
            counts.named(),
            PurgatoryCounts::is_level,
            &labels,
        );
        self.timer.record_metrics(name);
    }

    /// Stops the timer and hands back the operations still waiting, neither completed nor
    /// expired.
    pub fn shutdown(self) -> Vec<O> {
        let waiting = self.timer.shutdown();
        for shard in self.watchers.shards.iter() {
            let lists = std::mem::take(&mut *shard.lock().unwrap_or_else(PoisonError::into_inner));
            drop(lists);
        }
        waiting
            .into_iter()
            .filter_map(|entry| Arc::into_inner(entry).map(|entry| entry.op))
            .collect()
    }
}
