//! The public engine: `Timer` and its `Builder`.
//!
//! A `Timer` owns one shard per core, each with a reaper thread. A producer thread keeps to
//! one shard (chosen round-robin the first time it schedules), so threads on different
//! cores do not share a shard's inbox cache line; any thread may cancel any timer, since the
//! handle names its shard.

use crate::bound::Bound;
use crate::callback::Callback;
use crate::clock::{self, Clock};
use crate::due::Due;
use crate::error::{AdvanceError, BuildError, ScheduleError, StaleHandle};
use crate::handle::{SHARD_BITS, TimerHandle};
use crate::scheduler::Scheduler;
use crate::shard::Shard;
use crate::stats::Stats;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Configures and starts a [`Timer`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder()
///     .shards(2)
///     .tick(Duration::from_millis(1))
///     .max_pending(1_000_000)
///     .build()
///     .unwrap();
/// assert_eq!(timer.shards(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    shards: usize,
    tick: Duration,
    pin_threads: bool,
    max_pending: usize,
    manual: bool,
    record_lateness: bool,
    exact_deadlines: bool,
    spin: Duration,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()),
            tick: Duration::from_millis(1),
            pin_threads: true,
            max_pending: usize::MAX,
            manual: false,
            record_lateness: true,
            exact_deadlines: true,
            spin: Duration::ZERO,
        }
    }
}

impl Builder {
    /// Number of shards, each with its own reaper thread: 1 to 65,536. Default: the
    /// available cores.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// The wheel's resolution. With exact deadlines (the default) a timer fires when its
    /// deadline passes whatever the tick, and the tick is how finely the wheel sorts timers
    /// before that; without, a timer fires at the start of the first tick at or after its
    /// deadline, at most one tick late. Never early, either way; plus the time the reaper
    /// takes to wake. A finer tick means more cascades and wake-ups, not costlier
    /// operations. Default: 1 ms.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// Pin reaper `i` to core `i` (modulo the cores) where the system allows it; where it
    /// does not, the threads run unpinned. Default: true.
    pub fn pin_threads(mut self, pin: bool) -> Self {
        self.pin_threads = pin;
        self
    }

    /// How many timers may be pending at once over the whole timer, whichever threads
    /// schedule them; beyond it [`Timer::schedule`] returns [`ScheduleError::Full`]. A
    /// bound costs one counter that every shard shares (a cache line its producers and
    /// reapers all write); without one there is none. Default: unbounded (each shard can
    /// index 2^31 timers).
    pub fn max_pending(mut self, max_pending: usize) -> Self {
        self.max_pending = max_pending;
        self
    }

    /// Record each fired timer's lateness in [`Timer::stats`]' histogram: a clock read
    /// and an uncontended lock per fired timer, on the reaper. The counts are kept either
    /// way. Default: true.
    pub fn record_lateness(mut self, record: bool) -> Self {
        self.record_lateness = record;
        self
    }

    /// Fire each timer when its exact deadline passes (true), or at the start of the first
    /// tick at or after it (false). Exact deadlines cost a reaper wake-up per distinct
    /// deadline in place of one per tick, and a small heap of the timers due within the
    /// current tick; timers cancelled before then cost nothing more. Default: true.
    pub fn exact_deadlines(mut self, exact: bool) -> Self {
        self.exact_deadlines = exact;
        self
    }

    /// Each reaper spins instead of sleeping for the last `spin` before a deadline, so that
    /// timers fire within microseconds of it rather than when the OS wakes the thread
    /// (tens of microseconds, more on a busy machine). It keeps a core busy while a
    /// deadline is near: for latency-critical timers only. Default: zero (no spin).
    pub fn spin_before_deadline(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// Starts no reaper threads: the timer's time stands still until [`Timer::advance`]
    /// moves it, and its callbacks run inside `advance`, on the caller's thread. For tests
    /// and fuzzing: the same shards, slots, inboxes and state words as the threaded engine,
    /// driven deterministically. Default: off.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let fired = Arc::new(AtomicUsize::new(0));
    /// let count = Arc::clone(&fired);
    /// let timer = shardwheel::Timer::builder()
    ///     .manual()
    ///     .build_with(move |_: ()| {
    ///         count.fetch_add(1, Ordering::Relaxed);
    ///     })
    ///     .unwrap();
    /// timer.insert(Duration::from_secs(60), ()).unwrap();
    /// timer.advance(Duration::from_secs(59)).unwrap();
    /// assert_eq!(fired.load(Ordering::Relaxed), 0);
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// assert_eq!(fired.load(Ordering::Relaxed), 1);
    /// ```
    pub fn manual(mut self) -> Self {
        self.manual = true;
        self
    }

    /// Starts the reaper threads of a [`Timer`] of boxed callbacks.
    ///
    /// # Errors
    ///
    /// [`BuildError`] if the shard count is zero or above 65,536, the tick is zero, or a
    /// thread cannot be started.
    pub fn build(self) -> Result<Timer, BuildError> {
        self.build_with(Callback::run)
    }

    /// Starts the reaper threads of a payload-generic [`Timer<T>`]: every timer carries a
    /// `T`, and `handler` runs with it, on a reaper thread, when the timer comes due. Nothing
    /// is allocated per timer (the payload lives in the shard's slab).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let expired = Arc::new(AtomicU64::new(0));
    /// let counter = Arc::clone(&expired);
    /// let timer = shardwheel::Timer::builder()
    ///     .shards(1)
    ///     .build_with(move |request_id: u64| {
    ///         counter.fetch_add(request_id, Ordering::Relaxed);
    ///     })
    ///     .unwrap();
    /// timer.insert(Duration::from_millis(1), 7).unwrap();
    /// let cancelled = timer.insert(Duration::from_secs(30), 100).unwrap();
    /// assert!(timer.cancel(cancelled));
    /// while timer.pending() > 0 {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert!(timer.shutdown().is_empty());
    /// assert_eq!(expired.load(Ordering::Relaxed), 7);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build).
    pub fn build_with<T: Send + 'static>(
        self,
        handler: impl Fn(T) + Send + Sync + 'static,
    ) -> Result<Timer<T>, BuildError> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(BuildError::Shards(self.shards));
        }
        if self.tick.is_zero() {
            return Err(BuildError::ZeroTick);
        }
        let bound = Bound::new(self.max_pending);
        let clock = Clock::new(self.tick);
        let shards: Arc<[Shard<T>]> = (0..self.shards)
            .map(|_| {
                Shard::new(
                    usize::MAX,
                    clock.tick_nanos(),
                    self.record_lateness,
                    self.exact_deadlines,
                )
                .with_bound(bound.clone())
                .with_spin(self.spin)
            })
            .collect();
        let id = take_id(&NEXT_TIMER_ID).ok_or(BuildError::Ids)?;
        if self.manual {
            let manual = Manual {
                reapers: (0..self.shards).map(|_| Due::new()).collect(),
                handler: Box::new(handler),
            };
            let elapsed = Arc::new(AtomicU64::new(0));
            return Ok(Timer {
                scheduler: Scheduler::new(id, shards, clock, Some(elapsed)),
                driver: Driver::Manual(Mutex::new(Some(manual))),
            });
        }
        let cores = if self.pin_threads {
            core_affinity::get_core_ids().unwrap_or_default()
        } else {
            Vec::new()
        };
        let handler = Arc::new(handler);
        let mut reapers = Vec::new();
        let mut failure = None;
        for index in 0..self.shards {
            let shards = Arc::clone(&shards);
            let handler = Arc::clone(&handler);
            let core = (!cores.is_empty()).then(|| cores[index % cores.len()]);
            let reaper = std::thread::Builder::new()
                .name(format!("shardwheel-reaper-{index}"))
                .spawn(move || {
                    if let Some(core) = core {
                        // Pinning is an optimisation: where it is refused, run unpinned.
                        let _ = core_affinity::set_for_current(core);
                    }
                    tighten_timer_slack();
                    shards[index].run(&clock, &*handler)
                });
            match reaper {
                Ok(handle) => reapers.push(handle),
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        let timer = Timer {
            scheduler: Scheduler::new(id, shards, clock, None),
            driver: Driver::Reapers(Mutex::new(reapers)),
        };
        match failure {
            // Dropping `timer` stops and joins the reapers already started.
            Some(error) => Err(BuildError::Thread(error)),
            None => Ok(timer),
        }
    }
}

/// Who runs the shards' passes.
enum Driver<T> {
    /// A reaper thread per shard; their join handles until shutdown.
    Reapers(Mutex<Vec<JoinHandle<Vec<T>>>>),
    /// The caller, through [`Timer::advance`] (which moves the scheduler's manual time);
    /// `None` once shut down.
    Manual(Mutex<Option<Manual<T>>>),
}

/// What a reaper thread would own, kept by a manual timer for `advance` to use.
struct Manual<T> {
    /// What each shard's reaper would keep.
    reapers: Vec<Due>,
    handler: Box<dyn Fn(T) + Send + Sync>,
}

/// Asks the OS to end the calling thread's timed sleeps on time: Linux lets a sleep run
/// up to the thread's timer slack (50 us by default) past its timeout, to batch wake-ups,
/// which would add that to the lateness of every exactly-due timer. A reaper sleeps once
/// per deadline at most, so the batching it gives up is small.
fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument (the slack in nanoseconds) and
    // changes only the calling thread's timer slack; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

thread_local! {
    /// The state of the manual timer whose `advance` this thread is running (its address;
    /// 0 for none): a `shutdown` from one of its callbacks must not wait for the lock that
    /// `advance` holds.
    static ADVANCING: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as advancing a manual timer until dropped.
struct Advancing {
    outer: usize,
}

impl Advancing {
    fn enter<T>(state: &Mutex<Option<Manual<T>>>) -> Self {
        let outer = ADVANCING.replace(state as *const _ as usize);
        Advancing { outer }
    }

    /// Whether the calling thread is advancing the manual timer whose state this is.
    fn is<T>(state: &Mutex<Option<Manual<T>>>) -> bool {
        ADVANCING.get() == state as *const _ as usize
    }
}

impl Drop for Advancing {
    fn drop(&mut self) {
        ADVANCING.set(self.outer);
    }
}

/// The most shards a timer can have: a handle names its shard in `SHARD_BITS` bits.
const MAX_SHARDS: usize = 1 << SHARD_BITS;

/// Timer ids: a handle keeps one in the 48 bits its shard leaves.
const TIMER_IDS: u64 = 1 << (64 - SHARD_BITS);

/// The next id to give a timer: ids tell one timer's handles from another's.
static NEXT_TIMER_ID: AtomicU64 = AtomicU64::new(0);

/// Takes the next id from `counter`, or `None` once every id was given. Ids are never
/// given twice, so a handle of a timer dropped long ago never names a later timer's
/// slot. (At a million timers built a second, they last nine years.)
fn take_id(counter: &AtomicU64) -> Option<u64> {
    // Relaxed: ids only need to differ, which the RMW's total order gives.
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |id| {
            (id < TIMER_IDS).then_some(id + 1)
        })
        .ok()
}
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The lock guards join handles only; a panic while holding it leaves them usable.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A sharded timer engine: schedule timers from any thread; each fires once on a reaper
/// thread when due, unless cancelled first.
///
/// # Usage
///
/// `Timer` (that is, `Timer<Callback>`) runs boxed callbacks:
/// [`schedule`](Self::schedule) returns a [`TimerHandle`]; [`cancel`](Self::cancel) and
/// [`reset`](Self::reset) take it, from any thread, in O(1). [`shutdown`](Self::shutdown)
/// (or dropping the timer) stops the reapers and hands back the callbacks that had not run.
/// `Timer<T>`, made by [`Builder::build_with`], carries a payload `T` per timer instead and
/// runs one handler for all of them; [`insert`](Self::insert) schedules one.
///
/// Callbacks run on the shard's reaper thread, one after another: a slow callback delays
/// the shard's other timers (hand long work to an executor or a channel from the callback).
/// A callback that panics is caught and counted ([`panicked`](Self::panicked)); the shard
/// goes on.
///
/// # Memory
///
/// A shard's memory grows with the most timers it had pending at once, and comes back on
/// its own after a spike: once the timers pending drop below an eighth of the slots the
/// shard handed out, its reaper gives the slots above four times the pending count back to
/// the allocator, and its wheel does the same. It spends at most 0.1 ms a millisecond on
/// it: ten million timers cancelled in the order they were made go back in half a second;
/// after timers fired, their slots in no order, it sorts some 500 slots a pass (190 ns
/// each measured after a million fired), so ten million would take some 20 s. Handles of
/// timers whose memory went stay harmless: `cancel` returns false, `reset` an error. A
/// long-lived timer in the highest memory holds that memory (and what lies below it)
/// until it fires or is cancelled.
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
/// let (fired, rx) = mpsc::channel();
/// let fired2 = fired.clone();
/// timer.schedule(Duration::from_millis(5), move || fired.send("timeout").unwrap()).unwrap();
/// let retry = timer.schedule(Duration::from_secs(60), move || fired2.send("retry").unwrap()).unwrap();
/// assert!(timer.cancel(retry)); // will never run
/// assert_eq!(rx.recv().unwrap(), "timeout");
/// assert!(timer.shutdown().is_empty());
/// ```
///
/// # Implementation
///
/// Per-core shards, each a hierarchical [`Wheel`](crate::Wheel) owned by one reaper
/// thread, fed through lock-free intrusive inboxes from a shared slab of slots; cancel is
/// one compare-and-swap on the slot's state word. See the `shard`, `inbox` and `slots`
/// module docs.
pub struct Timer<T: Send + 'static = Callback> {
    scheduler: Scheduler<T>,
    driver: Driver<T>,
}

impl Timer {
    /// A [`Builder`] with the defaults: a shard per core, 1 ms tick, pinned threads.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Schedules `callback` to run once, `delay` from now. Any thread may call it; it takes
    /// no lock and makes no system call unless it must wake a sleeping reaper for an
    /// earlier deadline. A deadline more than 584 years after the timer started is clamped
    /// to that.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Full`] beyond `max_pending`, [`ScheduleError::Shutdown`] after
    /// shutdown; both hand the callback back.
    pub fn schedule(
        &self,
        delay: Duration,
        callback: impl FnOnce() + Send + 'static,
    ) -> Result<TimerHandle, ScheduleError<Callback>> {
        self.insert(delay, Callback::new(callback))
    }

    /// Schedules `callback` to run once at `instant` (at once if it has passed).
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule).
    pub fn schedule_at(
        &self,
        instant: Instant,
        callback: impl FnOnce() + Send + 'static,
    ) -> Result<TimerHandle, ScheduleError<Callback>> {
        self.insert_at(instant, Callback::new(callback))
    }
}

impl<T: Send + 'static> Timer<T> {
    /// Schedules a timer carrying `payload`, due `delay` from now: the handler given to
    /// [`Builder::build_with`] runs with it then. Lock-free, from any thread, as
    /// [`schedule`](Timer::schedule); a deadline past 584 years is clamped.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Full`] beyond `max_pending`, [`ScheduleError::Shutdown`] after
    /// shutdown; both hand the payload back.
    pub fn insert(&self, delay: Duration, payload: T) -> Result<TimerHandle, ScheduleError<T>> {
        self.scheduler
            .insert_due(self.scheduler.deadline_after(delay), payload)
    }

    /// Schedules a timer carrying `payload`, due at `instant` (at once if it has passed).
    ///
    /// # Errors
    ///
    /// As [`insert`](Self::insert).
    pub fn insert_at(&self, instant: Instant, payload: T) -> Result<TimerHandle, ScheduleError<T>> {
        self.scheduler
            .insert_due(self.scheduler.deadline_at(instant), payload)
    }

    /// What schedules, cancels and resets this timer's timers.
    pub(crate) fn scheduler(&self) -> &Scheduler<T> {
        &self.scheduler
    }

    /// Cancels a timer: true if it was pending and now will never run; false if it already
    /// ran or is running, was cancelled, or the handle is not this timer's. O(1), lock-free,
    /// from any thread; the slot is freed by the next reaper pass, which a cancel starts.
    ///
    /// The payload of a cancelled timer is dropped on the reaper, except during a
    /// shutdown: a cancel that comes after the reaper stopped taking cancels drops the
    /// payload itself, on the calling thread, before it returns.
    pub fn cancel(&self, handle: TimerHandle) -> bool {
        self.scheduler.cancel(handle)
    }

    /// Moves a pending timer to `delay` from now, keeping its handle and payload: the
    /// idle-timeout pattern (push the deadline back on every message). O(1), lock-free, from
    /// any thread. A timer already due but not yet run is still moved.
    ///
    /// Two resets of one timer racing each other both succeed and one deadline wins; a
    /// reset racing a cancel either succeeds before the cancel or fails after it.
    ///
    /// # Errors
    ///
    /// [`StaleHandle`] if the timer already ran or is running, was cancelled, or the handle
    /// is not this timer's; nothing changes then.
    pub fn reset(&self, handle: TimerHandle, delay: Duration) -> Result<(), StaleHandle> {
        self.scheduler
            .reset_due(handle, self.scheduler.deadline_after(delay))
    }

    /// Moves a pending timer to `instant`, as [`reset`](Self::reset) does.
    ///
    /// # Errors
    ///
    /// As [`reset`](Self::reset).
    pub fn reset_at(&self, handle: TimerHandle, instant: Instant) -> Result<(), StaleHandle> {
        self.scheduler
            .reset_due(handle, self.scheduler.deadline_at(instant))
    }

    /// Timers scheduled and not yet fired or cancelled.
    pub fn pending(&self) -> usize {
        self.scheduler.shards().iter().map(Shard::pending).sum()
    }

    /// Callbacks (or handler calls, or payload drops) that panicked; each was caught and
    /// its shard went on.
    pub fn panicked(&self) -> u64 {
        self.scheduler.shards().iter().map(Shard::panicked).sum()
    }

    /// A snapshot of the counts and the lateness histogram, merged over the shards (see
    /// [`Stats`]). Takes each shard's statistics lock briefly; reapers record into it
    /// without contention otherwise.
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::new();
        for shard in self.scheduler.shards().iter() {
            stats.merge(&shard.stats());
        }
        stats
    }

    /// The number of shards (and reaper threads).
    pub fn shards(&self) -> usize {
        self.scheduler.shards().len()
    }

    /// Moves a [manual](Builder::manual) timer's time forward by `by` and runs what
    /// that makes due, on the calling thread: every shard takes in the timers scheduled,
    /// cancelled and reset since the last call, then fires each timer whose deadline has
    /// come, as its reaper would. A timer scheduled by one of these callbacks is taken in
    /// at the next call, even if it is due at once. After shutdown it does nothing.
    ///
    /// # Errors
    ///
    /// [`AdvanceError::NotManual`] for a timer with reaper threads;
    /// [`AdvanceError::Busy`] if another `advance` runs meanwhile (a callback calling it,
    /// or another thread).
    pub fn advance(&self, by: Duration) -> Result<(), AdvanceError> {
        let (Driver::Manual(state_lock), Some(elapsed_nanos)) =
            (&self.driver, self.scheduler.manual_elapsed())
        else {
            return Err(AdvanceError::NotManual);
        };
        let mut state = match state_lock.try_lock() {
            Ok(state) => state,
            Err(TryLockError::WouldBlock) => return Err(AdvanceError::Busy),
            // A callback panicked through `pass` (it does not: panics are contained), or
            // a wheel did: the state is still consistent enough to go on.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        };
        let Some(manual) = state.as_mut() else {
            return Ok(());
        };
        // Relaxed: only `advance`, under the lock, writes it.
        let elapsed = elapsed_nanos
            .load(Ordering::Relaxed)
            .saturating_add(clock::nanos(by));
        elapsed_nanos.store(elapsed, Ordering::Relaxed);
        let now = self.scheduler.clock().tick_at(elapsed);
        let advancing = Advancing::enter(state_lock);
        for (shard, due) in self.scheduler.shards().iter().zip(&mut manual.reapers) {
            shard.pass(due, now, &|| elapsed, &*manual.handler);
        }
        drop(advancing);
        // A callback shut the timer down (see `shutdown`): wind up now, as a reaper would
        // after its pass, and drop what had not run, once the lock is let go.
        if self.scheduler.shards().iter().any(Shard::is_stopping) {
            let unfired = Self::wind_up(&self.scheduler, state.take());
            drop(state);
            drop(unfired);
        }
        Ok(())
    }

    /// Winds a manual timer's shards up, handing back what had not fired.
    fn wind_up(scheduler: &Scheduler<T>, manual: Option<Manual<T>>) -> Vec<T> {
        let Some(mut manual) = manual else {
            return Vec::new();
        };
        scheduler
            .shards()
            .iter()
            .zip(&mut manual.reapers)
            .flat_map(|(shard, due)| shard.wind_up(due))
            .collect()
    }

    /// Stops every reaper and returns the payloads (callbacks) of the timers that had not
    /// fired, unrun. Scheduling afterwards fails with [`ScheduleError::Shutdown`]. Calling
    /// it again returns nothing more. Dropping the timer shuts it down and drops them.
    ///
    /// Called on one of the timer's own reapers (a callback that shuts the timer down, or
    /// drops the last `Arc` of a service that owns it), it joins the other reapers but not
    /// that one, which is busy running the callback: that reaper winds its shard up once
    /// the callback returns (timers of its shard already due in the same pass may still
    /// fire first), drops the payloads it had left, and ends. Those payloads are not in
    /// the returned `Vec`. A manual timer shut down from a callback inside
    /// [`advance`](Self::advance) likewise winds up when `advance` has run its passes, and
    /// drops what had not run.
    ///
    /// ```
    /// use std::sync::{Arc, mpsc};
    /// use std::time::Duration;
    ///
    /// // A service owns its timer, and a timer's callback owns the service's last handle.
    /// let timer = Arc::new(shardwheel::Timer::builder().shards(2).build().unwrap());
    /// let owner = Arc::clone(&timer);
    /// let (done, finished) = mpsc::channel();
    /// timer
    ///     .schedule(Duration::from_millis(1), move || {
    ///         drop(owner); // the last handle: the timer shuts down, here
    ///         done.send(()).unwrap();
    ///     })
    ///     .unwrap();
    /// drop(timer);
    /// finished.recv().unwrap();
    /// ```
    pub fn shutdown(&self) -> Vec<T> {
        for shard in self.scheduler.shards().iter() {
            shard.stop();
        }
        match &self.driver {
            Driver::Reapers(reapers) => {
                let reapers = std::mem::take(&mut *lock(reapers));
                let me = std::thread::current().id();
                // Joining the calling reaper would wait for itself: it is detached, and
                // winds up on its own after the callback (see above).
                reapers
                    .into_iter()
                    .filter(|reaper| reaper.thread().id() != me)
                    .flat_map(|reaper| reaper.join().unwrap_or_default())
                    .collect()
            }
            // `advance` holds the lock and winds up after its passes.
            Driver::Manual(state) if Advancing::is(state) => Vec::new(),
            Driver::Manual(state) => Self::wind_up(&self.scheduler, lock(state).take()),
        }
    }
}

impl<T: Send + 'static> Drop for Timer<T> {
    fn drop(&mut self) {
        drop(self.shutdown());
    }
}

impl<T: Send + 'static> std::fmt::Debug for Timer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer")
            .field("shards", &self.scheduler.shards().len())
            .field("pending", &self.pending())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_ids_are_never_given_twice() {
        let counter = AtomicU64::new(TIMER_IDS - 2);
        assert_eq!(take_id(&counter), Some(TIMER_IDS - 2));
        assert_eq!(take_id(&counter), Some(TIMER_IDS - 1));
        assert_eq!(take_id(&counter), None, "all given: none wraps round to 0");
        assert_eq!(take_id(&counter), None);
    }
}
