//! A shard: its shared slots, the two inboxes producers feed it through, and its reaper.
//!
//! Producers take a slot, write the payload and deadline, mark it `PENDING` and push it on
//! the inbox; cancellers and resetters change the slot's state word (see `slots`) and push
//! it on the list of changes (a thread cancelling on a shard it has a stage on keeps the
//! slot's number in its stage instead, see `staged`). The reaper is the only thread that
//! touches the shard's wheel (or, while it is held up, a sibling's reaper in its place,
//! holding the wheel's lock: `rescue`), whose entries are the slots themselves
//! (`filing`): each pass it takes the changes, then the inbox, links the new timers into
//! the wheel, moves the reset ones, unlinks and frees the cancelled ones, fires what is
//! due, and parks until the wheel's next deadline.
//!
//! Taking the changes *before* the inbox is what lets a pass trust that every changed slot
//! it sees has already arrived: a handle only exists once its slot was pushed on the inbox,
//! so that push happens before any change of it, and a swap that sees the change is
//! followed by a swap that sees the push. Cancels taken from the stages, later in the
//! pass, are applied after another look at the inbox, for the same reason.
//!
//! Before parking, the reaper publishes the tick it plans to wake at and looks at both
//! inboxes once more; producers unpark it only for a deadline earlier than that plan
//! (`wakeup` has the handshake and why no wake-up is lost). While the reaper works,
//! producers make no system call at all.
//!
//! Cancels and resets (`changes`), the reaper's passes (`reaper`), its wheel over the
//! slots (`filing`), the stages' side (`staged`), the rescue of a sibling's held-up reaper
//! (`rescue`) and the shutdown's wind-up (`wind_up`) have modules of their own.

mod changes;
mod early;
mod filing;
mod lead;
mod nap;
mod pace;
mod reaper;
mod rescue;
mod staged;
#[cfg(test)]
mod tests;
mod unstage;
mod wind_up;

use crate::bound::Bound;
use crate::clock;
use crate::due::Due;
use crate::inbox::{Closed, Inbox};
use crate::observe;
use crate::slots::{self, Freed, PENDING, Slot, Slots};
use crate::stage::Stage;
use crate::stats::{Counts, ShardStats};
use crate::sync::{self, AtomicBool, AtomicU32, AtomicU64, Ordering};
use crate::wakeup::Wakeup;
use changes::Cancelled;
use crossbeam_utils::CachePadded;
use staged::Registry;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long cancelled timers may wait for the reaper while cancels keep coming (see
/// `run`): their memory comes back within about this long.
const TIDY_INTERVAL: Duration = Duration::from_millis(10);

/// The longest a reaper sleeps, even with nothing due: producers stage a timer due later
/// than that without waking it (see `stage`). A pass a second costs a few microseconds.
const IDLE_HORIZON: Duration = Duration::from_secs(1);

/// How often the reaper comes back to a shrink under way: a step sorts for 0.1 ms at most
/// (see `slots`), so the shrink takes a tenth of the reaper's time while it lasts.
const SHRINK_INTERVAL: Duration = Duration::from_millis(1);

/// Messages (arrivals, changes) a pass takes in between two looks at what is due.
const BATCH: u64 = 4096;

/// How far ahead of its walk over a batch of slot numbers the reaper prefetches slots:
/// with a million timers pending their lines are out of the cache, and the misses then
/// overlap rather than come one after another.
const PREFETCH_AHEAD: usize = 16;

/// Messages waiting in an inbox at which a producer wakes a sleeping reaper, whatever its
/// plan, and again at every multiple of it: the reaper takes a backlog in batches as it
/// builds up instead of in one long pass at its next deadline, late for everything due
/// meanwhile (and cancels that keep coming wait for no more than a few batches).
const BACKLOG: u32 = 4096;

/// Whether a push that found `waiting` messages waiting makes a backlog (see `BACKLOG`).
fn is_backlog(waiting: u32) -> bool {
    waiting != 0 && waiting.is_multiple_of(BACKLOG)
}

/// Why a schedule was refused; the payload is handed back.
#[derive(Debug)]
pub enum Refused<T> {
    /// `max_pending` timers are pending.
    Full(T),
    /// The reaper has shut down.
    Closed(T),
}

/// One shard of a timer engine (see the module doc).
///
/// The fields that different threads write are each on their own cache line: the inbox
/// heads (producers push, the reaper swaps), the wake-up plan (the reaper writes it every
/// pass) and the pending count; otherwise every reaper pass would take the producers'
/// lines away from them, and neighbouring shards would share lines.
pub struct Shard<T> {
    slots: Slots<T>,
    inbox: CachePadded<Inbox>,
    changes: CachePadded<Inbox>,
    wakeup: CachePadded<Wakeup>,
    counts: CachePadded<ProducerCounts>,
    /// The bound on pending timers, shared with the timer's other shards; none if unbounded.
    bound: Option<Arc<Bound>>,
    /// The wheel's tick: deadlines are nanoseconds since the start, the wheel counts ticks.
    tick_nanos: u64,
    /// Whether fired timers' lateness goes into the stats.
    record_lateness: bool,
    /// Whether timers fire at their exact deadline (see `due`), or at the start of the
    /// first tick at or after it.
    exact: bool,
    /// How long before a deadline the reaper stops sleeping and spins (0: never).
    spin_nanos: u64,
    /// Whether the reaper also wakes early by the OS's usual lateness (see `early`).
    wake_early: bool,
    /// The timer's table of which shard's reaper is pinned to each CPU (see
    /// `reaper_pinned_to`), shared by its shards; empty if the reapers are not pinned.
    reapers_by_cpu: Arc<[AtomicU32]>,
    stopping: AtomicBool,
    panicked: AtomicU64,
    /// Timers fired or handed back: counted by the reaper (or the wind-up).
    out: AtomicU64,
    /// Stages registered, and timers handed over, since the reaper last looked (see
    /// `stage`).
    registry: sync::Mutex<Registry>,
    /// The registry has news (a stage, or timers handed over) for the reaper.
    news: AtomicBool,
    /// The reaper's counts; see `stats`. (A std lock: it is not part of any protocol the
    /// loom models check, and the reaper never holds it while user code runs.)
    stats: Mutex<ShardStats>,
    /// The reaper's wheel, from the start of its thread to its wind-up: the reaper holds
    /// it while awake, and a sibling's reaper while it rescues this shard (see `rescue`).
    /// (A std lock, as `stats`: whoever holds it is the shard's reaper for that while,
    /// which is all the loom models' reaper side assumes.)
    reaping: Mutex<Option<Due>>,
    /// The payloads a rescue pass frees, dropped once the wheel is let go (see `rescue`).
    deferred: rescue::Deferred<T>,
}

/// What producers count, on one cache line of their own: threads with a stage count their
/// schedules and cancels there instead (see `stage`), and the stages of threads that
/// exited are folded in here.
struct ProducerCounts {
    /// Successful resets.
    resets: AtomicU64,
    /// Timers scheduled.
    scheduled: AtomicU64,
    /// Successful cancels.
    cancelled: AtomicU64,
    /// Times a producer yielded to the reaper: behind by a backlog (`notify_backlog`), or
    /// waiting for the producer's core (`yield_if_reaper_overdue`).
    yielded: AtomicU64,
}

impl<T> Shard<T> {
    /// A shard holding at most `max_pending` timers, its wheel in ticks of `tick_nanos`
    /// nanoseconds (at least 1), recording lateness if `record_lateness`, firing timers at
    /// their exact deadlines if `exact`.
    pub fn new(max_pending: usize, tick_nanos: u64, record_lateness: bool, exact: bool) -> Self {
        // Before any stage exists: the stages' handshake fences depend on it.
        crate::barrier::init();
        Shard {
            slots: Slots::new(),
            inbox: CachePadded::new(Inbox::new()),
            changes: CachePadded::new(Inbox::new()),
            wakeup: CachePadded::new(Wakeup::new()),
            counts: CachePadded::new(ProducerCounts {
                resets: AtomicU64::new(0),
                scheduled: AtomicU64::new(0),
                cancelled: AtomicU64::new(0),
                yielded: AtomicU64::new(0),
            }),
            stats: Mutex::new(ShardStats::new()),
            bound: Bound::new(max_pending),
            tick_nanos: tick_nanos.max(1),
            record_lateness,
            exact,
            spin_nanos: 0,
            wake_early: true,
            reapers_by_cpu: Arc::new([]),
            stopping: AtomicBool::new(false),
            panicked: AtomicU64::new(0),
            out: AtomicU64::new(0),
            registry: sync::Mutex::new(Registry::default()),
            news: AtomicBool::new(false),
            reaping: Mutex::new(None),
            deferred: rescue::Deferred::default(),
        }
    }

    /// Reads the timer's `clock` where a producer wakes the reaper for a timer already due
    /// (see `wakeup`'s `asked`).
    pub(crate) fn with_clock(mut self, clock: clock::Clock) -> Self {
        self.wakeup = CachePadded::new(CachePadded::into_inner(self.wakeup).with_clock(clock));
        self
    }

    /// Whether the shard's big chunks of slots go on huge pages (`Builder::huge_pages`).
    pub(crate) fn with_huge_pages(mut self, huge_pages: bool) -> Self {
        self.slots = self.slots.with_huge_pages(huge_pages);
        self
    }

    /// Makes the shard drop the payload of a cancelled timer with `discard` rather than as
    /// a drop does: a timer of callbacks discards a sleep's wake-up without waking its
    /// task (see `callback::discard_of`).
    pub fn with_discard(mut self, discard: fn(T)) -> Self {
        self.slots.discard = discard;
        self
    }

    /// Makes the shard hold at most `limit` slots (see `Slots::with_limit`).
    pub(crate) fn with_slot_limit(mut self, limit: u32) -> Self {
        self.slots = self.slots.with_limit(limit);
        self
    }

    /// Makes the shard count its pending timers against `bound`, which the timer's other
    /// shards share, in place of its own.
    pub(crate) fn with_bound(mut self, bound: Option<Arc<Bound>>) -> Self {
        self.bound = bound;
        self
    }

    /// Makes the reaper spin, rather than sleep, for the last `spin` before each deadline:
    /// wake-ups on time to the microsecond, for a core kept busy while timers are near.
    pub(crate) fn with_spin(mut self, spin: Duration) -> Self {
        self.spin_nanos = clock::nanos(spin);
        self
    }

    /// Whether the reaper wakes early by what it learns of the OS's lateness (`early`).
    pub(crate) fn with_wake_early(mut self, wake_early: bool) -> Self {
        self.wake_early = wake_early;
        self
    }

    /// Gives a timer's place under the bound back (fired, cancelled, handed back, refused).
    fn discharge(&self) {
        if let Some(bound) = &self.bound {
            bound.discharge();
        }
    }

    /// Counts a timer scheduled, in `stage` (the calling thread's) if given.
    fn count_scheduled(&self, stage: Option<&Stage>) {
        match stage {
            Some(stage) => stage.count_scheduled(),
            // Relaxed: a count.
            None => drop(self.counts.scheduled.fetch_add(1, Ordering::Relaxed)),
        }
    }

    /// Counts a timer cancelled, in `stage` (the calling thread's) if given, and gives
    /// its place under the bound back.
    fn count_cancelled(&self, stage: Option<&Stage>) {
        match stage {
            Some(stage) => stage.count_cancelled(),
            // Relaxed: a count.
            None => drop(self.counts.cancelled.fetch_add(1, Ordering::Relaxed)),
        }
        self.discharge();
    }

    /// Counts a timer fired or handed back, and gives its place under the bound back.
    fn count_out(&self) {
        // Relaxed: a count. (One thread counts at a time, the reaper or the wind-up.)
        self.out.fetch_add(1, Ordering::Relaxed);
        self.discharge();
    }

    /// Timers scheduled and cancelled so far, over the shared counts and every stage.
    fn scheduled_and_cancelled(&self) -> (u64, u64) {
        // The shared counts are read under the registry's lock, which `retire` holds while
        // it folds a stage's counts into them and forgets the stage: each stage is counted
        // either in them or in the list, never in neither nor in both.
        let registry = self.registry();
        // Relaxed: counts, ordered against `retire` by the lock.
        let mut counted = (
            self.counts.scheduled.load(Ordering::Relaxed),
            self.counts.cancelled.load(Ordering::Relaxed),
        );
        for stage in &registry.all {
            let (scheduled, cancelled) = stage.counts();
            counted = (counted.0 + scheduled, counted.1 + cancelled);
        }
        counted
    }

    /// Timers scheduled and neither fired nor cancelled. (A count taken as timers come
    /// and go may be off by those in flight.)
    pub fn pending(&self) -> usize {
        let (scheduled, cancelled) = self.scheduled_and_cancelled();
        // Relaxed: a count.
        let out = cancelled + self.out.load(Ordering::Relaxed);
        usize::try_from(scheduled.saturating_sub(out)).unwrap_or(usize::MAX)
    }

    /// Callbacks that panicked.
    pub(crate) fn panicked(&self) -> u64 {
        self.panicked.load(Ordering::Relaxed)
    }

    /// A copy of the shard's counts and histograms.
    pub(crate) fn stats(&self) -> ShardStats {
        let mut stats = self.reaper_stats().clone();
        self.count_producers(&mut stats.counts);
        stats
    }

    /// A copy of the shard's counts alone.
    pub(crate) fn counts(&self) -> Counts {
        let mut counts = self.reaper_stats().counts;
        self.count_producers(&mut counts);
        counts
    }

    /// Fills in what the producers count rather than the reaper.
    fn count_producers(&self, counts: &mut Counts) {
        counts.reset = self.counts.resets.load(Ordering::Relaxed);
        counts.yielded = self.counts.yielded.load(Ordering::Relaxed);
        (counts.scheduled, counts.cancelled) = self.scheduled_and_cancelled();
        counts.pending = self.pending();
        counts.panicked = self.panicked();
        counts.slots = u64::from(self.slots.claimed());
    }

    fn reaper_stats(&self) -> MutexGuard<'_, ShardStats> {
        // A panic while recording leaves counts behind, never a broken invariant.
        self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Schedules `payload`, due at `deadline` (nanoseconds since the start); returns its
    /// slot and generation.
    pub fn schedule(&self, deadline: u64, payload: T) -> Result<(u32, u32), Refused<T>> {
        if !self.admit() {
            return Err(Refused::Full(payload));
        }
        let scheduled = self.schedule_admitted(deadline, payload)?;
        self.count_scheduled(None);
        Ok(scheduled)
    }

    /// Takes a place under the bound for a new timer, if there is one.
    #[inline]
    fn admit(&self) -> bool {
        self.bound.as_ref().is_none_or(|bound| bound.admit())
    }

    /// `schedule` for a timer `admit` let in: pushes it on the inbox. The caller counts it.
    fn schedule_admitted(&self, deadline: u64, payload: T) -> Result<(u32, u32), Refused<T>> {
        let Some((index, slot)) = self.slots.take() else {
            self.discharge();
            return Err(Refused::Full(payload));
        };
        // Relaxed: the slot is ours; `take` synchronised with whoever freed it.
        let (generation, _) = slots::split(slot.state.load(Ordering::Relaxed));
        // SAFETY: the slot was just taken and is not yet published.
        unsafe { slot.write_payload(payload) };
        // Relaxed: both are published by the inbox push, a Release (SeqCst) CAS.
        slot.deadline.store(deadline, Ordering::Relaxed);
        slot.state
            .store(slots::word(generation, PENDING), Ordering::Relaxed);
        let waiting = self.inbox.push(index, &slot.link);
        if let Err(Closed) = waiting {
            // The reaper is gone: the slot was never published, so it is still ours.
            // SAFETY: written above and not published, so initialised and read once here.
            let payload = unsafe { slot.take_payload() };
            self.release_now(index, slot, generation);
            self.discharge();
            return Err(Refused::Closed(payload));
        }
        self.wakeup.notify(deadline);
        if waiting.is_ok_and(is_backlog) {
            self.notify_backlog();
        }
        Ok((index, generation))
    }

    /// Frees slot `index` of generation `generation`, whose payload its owner took (a
    /// producer's slot it never published, or one it reclaimed from its stage), onto the
    /// free stack at once.
    #[cold]
    #[inline(never)]
    fn release_now(&self, index: u32, slot: Slot<'_, T>, generation: u32) {
        let mut freed = Freed::new();
        self.slots.release(index, slot, generation, &mut freed);
        self.slots.recycle(&mut freed);
    }

    /// A pass's last step: gives memory back after a spike (see `slots`), and says
    /// whether there is more to do soon. What it gives back is traced.
    fn shrink(&self, freed: &mut Freed) -> bool {
        let before = self.slots.claimed();
        let more = self.slots.shrink(freed, self.pending());
        observe::gave_back(before, self.slots.claimed());
        more
    }

    /// Asks the reaper to stop; `run` then returns the unfired payloads.
    pub(crate) fn stop(&self) {
        // The same handshake as a producer's (see `wakeup`): the store, a SeqCst fence,
        // then the wake, against the reaper's plan, fence, and look at `stopping` in
        // `may_sleep`: either the reaper sees the flag or this sees it registered.
        self.stopping.store(true, Ordering::Relaxed);
        sync::fence(Ordering::SeqCst);
        self.wakeup.wake();
    }

    /// Whether `stop` was called.
    pub(crate) fn is_stopping(&self) -> bool {
        // Relaxed: read by the thread that called `stop` (a manual timer's `advance`).
        self.stopping.load(Ordering::Relaxed)
    }
}
