//! The public engine: `Timer` and its `Builder`.
//!
//! A `Timer` owns one shard per core, each with a reaper thread. A producer thread keeps to
//! one shard (chosen round-robin the first time it schedules), so threads on different
//! cores do not share a shard's inbox cache line; any thread may cancel any timer, since the
//! handle names its shard.
//!
//! The `Builder`, which checks a configuration and starts the reapers, is in `builder`; the
//! manual driver (`advance`, for tests) in `manual`; the graceful shutdown (`drain`) in
//! `drain`.

mod builder;
mod drain;
mod manual;
mod reaper_thread;

pub use builder::Builder;
use manual::{Advancing, Manual};

use crate::callback::Callback;
use crate::error::{ScheduleError, StaleHandle};
use crate::handle::TimerHandle;
use crate::scheduler::Scheduler;
use crate::shard::Shard;
use crate::stats::Stats;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Who runs the shards' passes.
enum Driver<T> {
    /// A reaper thread per shard; their join handles until shutdown.
    Reapers(Mutex<Vec<JoinHandle<Vec<T>>>>),
    /// The caller, through [`Timer::advance`] (which moves the scheduler's manual time);
    /// `None` once shut down.
    Manual(Mutex<Option<Manual<T>>>),
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
/// stops the reapers and hands back the callbacks that had not run; [`drain`](Self::drain)
/// first lets what comes due within a bound fire.
/// `Timer<T>`, made by [`Builder::build_with`], carries a payload `T` per timer instead and
/// runs one handler for all of them; [`insert`](Self::insert) schedules one.
///
/// Callbacks run on the shard's reaper thread, one after another (or, while that thread
/// is held up, on another shard's reaper: see "Hand-over"): a slow callback delays the
/// shard's other timers (hand long work to an executor or a channel from the callback).
/// A callback that panics is caught and counted ([`panicked`](Self::panicked)); the shard
/// goes on.
///
/// On Linux a reaper asks the OS to end its timed sleeps on time (a 1 ns timer slack) and
/// for the shortest scheduler slice (100 us; Linux 6.12 and later keep it), which gives it
/// no more CPU than its fair share but an earlier turn when it wakes, so that timers come
/// due while producers keep every core busy fire sooner. It keeps the nice value and
/// policy it was started with, and runs under a real-time policy as it is.
///
/// # Hand-over
///
/// Each thread schedules on one shard, and its new timers wait in a batch of its own (up
/// to 4,096) until the batch is full or the reaper needs them: a timer due before the
/// reaper's planned wake-up goes to it at once, and the reaper wakes for the earliest
/// timer waiting in any batch, so no timer fires late for waiting there. A reaper woken
/// so for a timer still far off (more than 10 ms) sleeps at most half that lead for the
/// next second, so that timers like it wait in their batch rather than wake it one by
/// one. Most timers are
/// cancelled soon after they are made; cancelled by their own thread while they wait,
/// they cost no work on the reaper and no cache line shared with it. A thread's cancels
/// of timers already handed over, on a shard it schedules on, wait in its batch too, for
/// the reaper to free them (it takes them with the batch, or every 10 ms when the thread
/// is not inside a schedule or cancel; a manual timer at every `advance`): such a cancel
/// writes only the timer's state word. The slots the reaper frees come back the same way: a pass's worth
/// at a time, which a thread takes whole for its next timers. A thread that exits leaves
/// its batch and its free slots to the reaper.
///
/// A reaper that has work waits for a core where producers keep every core busy, and a
/// producer holding its core would otherwise run out its time slice first. So a thread
/// that schedules looks, every 256 timers, at the reaper pinned to the core it runs on,
/// and if that reaper is awake or overdue (it planned to wake by now), yields it the rest
/// of its slice. The schedule or cancel that finds its shard's reaper awake and behind,
/// with thousands of timers or cancels waiting, yields too, wherever the reaper runs
/// (the yield returns at once if nothing else waits for the core). A reaper never yields
/// to itself. [`Counts::yielded`](crate::Counts::yielded) counts the yields.
///
/// A core can also be taken from every thread on it: the hypervisor runs another guest on
/// the virtual CPU, or a real-time task takes it. A reaper that wakes for its own work
/// looks at the other shards too, and one whose reaper is more than 2 ms past the time it
/// planned to wake, or was woken for, without starting its pass, it rescues: it makes
/// that shard's pass itself,
/// fires what is due (the callbacks run on the rescuing reaper's thread), and comes back
/// every millisecond until the held-up reaper is back. A reaper stopped in the middle of
/// its own pass cannot be rescued (the pass holds its wheel), and a timer with a single
/// shard has no other reaper to rescue it. [`Counts::rescued`](crate::Counts::rescued)
/// counts the rescues.
///
/// # Shutdown
///
/// [`shutdown`](Self::shutdown) and [`drain`](Self::drain) join the reapers and hand back
/// what had not fired. Dropping the last clone (or the last [`Sleep`](crate::Sleep), which
/// holds one) stops the reapers without waiting for them, so that a drop inside async code
/// blocks its executor thread no longer than it takes to wake each reaper: each reaper
/// finishes the callback it may be running, fires what is due, and drops the payloads it
/// had left, on its own thread, after the drop returned (a process that exits meanwhile
/// does not run those payloads' destructors). Shut down or drain first to wait for that,
/// or to have the payloads back.
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
/// Per-core shards, each a hierarchical timing wheel (the machinery of
/// [`Wheel`](crate::Wheel)) owned by one reaper thread, fed through lock-free intrusive
/// inboxes and per-thread stages from a shared slab of slots, which are also the wheel's
/// entries: one record per timer. Cancel is one compare-and-swap on the slot's state word.
/// See the `shard`, `stage`, `inbox` and `slots` module docs.
pub struct Timer<T: Send + 'static = Callback> {
    /// The engine's own, cloned here so that a schedule or cancel follows one pointer.
    scheduler: Scheduler<T>,
    engine: Arc<Engine<T>>,
}

/// What every clone of a timer shares: its shards and who drives them. The last clone's
/// drop (or the last sleep's, which hold one too) shuts the engine down.
pub(crate) struct Engine<T: Send + 'static> {
    scheduler: Scheduler<T>,
    driver: Driver<T>,
}

impl<T: Send + 'static> Engine<T> {
    fn start(scheduler: Scheduler<T>, driver: Driver<T>) -> Timer<T> {
        Timer {
            scheduler: scheduler.clone(),
            engine: Arc::new(Engine { scheduler, driver }),
        }
    }

    pub(crate) fn scheduler(&self) -> &Scheduler<T> {
        &self.scheduler
    }
}

/// A clone is another handle to the same engine (two reference counts, no thread): its
/// timers, reapers and statistics are the ones every clone sees. Share one timer over a
/// process by cloning it into each service, connection and task.
///
/// ```
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
/// let clone = timer.clone();
/// let handle = clone.schedule(Duration::from_secs(1), || {}).unwrap();
/// assert_eq!(timer.pending(), 1);
/// assert!(timer.cancel(handle));
/// ```
impl<T: Send + 'static> Clone for Timer<T> {
    fn clone(&self) -> Self {
        Timer {
            scheduler: self.scheduler.clone(),
            engine: Arc::clone(&self.engine),
        }
    }
}

impl Timer {
    /// A [`Builder`] with the defaults: a shard per core, 1 ms tick, pinned threads.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// assert_eq!(timer.shards(), 1);
    /// ```
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
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let (done, fired) = mpsc::channel();
    /// timer.schedule(Duration::from_millis(1), move || done.send(()).unwrap()).unwrap();
    /// fired.recv().unwrap();
    /// ```
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
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let fired = Arc::new(AtomicBool::new(false));
    /// let flag = Arc::clone(&fired);
    /// let at = timer.now() + Duration::from_secs(2);
    /// timer.schedule_at(at, move || flag.store(true, Ordering::Relaxed)).unwrap();
    /// timer.advance(Duration::from_secs(2)).unwrap();
    /// assert!(fired.load(Ordering::Relaxed));
    /// ```
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
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let builder = shardwheel::Timer::builder().shards(1).manual();
    /// let timer = builder.build_with(|id: u64| println!("{id} expired")).unwrap();
    /// timer.insert(Duration::from_secs(30), 7).unwrap();
    /// assert_eq!(timer.pending(), 1);
    /// ```
    #[inline]
    pub fn insert(&self, delay: Duration, payload: T) -> Result<TimerHandle, ScheduleError<T>> {
        self.scheduler
            .insert_due(self.scheduler.deadline_after(delay), payload)
    }

    /// Schedules a timer carrying `payload`, due at `instant` (at once if it has passed).
    ///
    /// # Errors
    ///
    /// As [`insert`](Self::insert).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let builder = shardwheel::Timer::builder().shards(1).manual();
    /// let timer = builder.build_with(|_: &str| {}).unwrap();
    /// timer.insert_at(timer.now() + Duration::from_secs(1), "session 9").unwrap();
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// assert_eq!(timer.pending(), 0); // fired
    /// ```
    pub fn insert_at(&self, instant: Instant, payload: T) -> Result<TimerHandle, ScheduleError<T>> {
        self.scheduler
            .insert_due(self.scheduler.deadline_at(instant), payload)
    }

    /// What schedules, cancels and resets this timer's timers.
    pub(crate) fn scheduler(&self) -> &Scheduler<T> {
        &self.scheduler
    }

    /// What every clone shares, for a future to keep (a pointer: a future stays small).
    pub(crate) fn engine(&self) -> &Arc<Engine<T>> {
        &self.engine
    }

    /// Cancels a timer: true if it was pending and now will never run; false if it already
    /// ran or is running, was cancelled, or the handle is not this timer's (another
    /// `Timer`'s handle is rejected but for a chance of at most about one in 2^27, see
    /// [`TimerHandle`]). O(1), lock-free, from any thread.
    ///
    /// A timer cancelled by the thread that scheduled it, while it still waits in that
    /// thread's batch for the reaper (see "Hand-over" in the type's docs), never reaches
    /// the reaper: its payload is dropped on the calling thread before `cancel` returns,
    /// and its slot is that thread's next. Otherwise the payload is dropped on the reaper,
    /// which frees the slot on its next pass (while cancels keep coming, it takes them in
    /// batches: every 10 ms, or once 4,096 wait; the cancels of a thread that schedules on
    /// the timer's shard wait in its batch, and go over with it); except during a
    /// shutdown: a cancel that
    /// comes after the reaper stopped taking cancels drops the payload itself, on the
    /// calling thread, before it returns.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let handle = timer.schedule(Duration::from_secs(1), || unreachable!()).unwrap();
    /// assert!(timer.cancel(handle));
    /// assert!(!timer.cancel(handle)); // already cancelled
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// ```
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
    /// is not this timer's (as for [`cancel`](Self::cancel)); nothing changes then.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let idle = timer.schedule(Duration::from_secs(30), || {}).unwrap();
    /// timer.advance(Duration::from_secs(20)).unwrap();
    /// timer.reset(idle, Duration::from_secs(30)).unwrap(); // a message: 30 s again
    /// timer.advance(Duration::from_secs(20)).unwrap();
    /// assert_eq!(timer.pending(), 1); // not at the old deadline
    /// ```
    pub fn reset(&self, handle: TimerHandle, delay: Duration) -> Result<(), StaleHandle> {
        self.scheduler
            .reset_due(handle, self.scheduler.deadline_after(delay))
    }

    /// Moves a pending timer to `instant`, as [`reset`](Self::reset) does.
    ///
    /// # Errors
    ///
    /// As [`reset`](Self::reset).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let retry = timer.schedule(Duration::from_secs(5), || {}).unwrap();
    /// timer.reset_at(retry, timer.now() + Duration::from_secs(1)).unwrap();
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// assert_eq!(timer.pending(), 0);
    /// ```
    pub fn reset_at(&self, handle: TimerHandle, instant: Instant) -> Result<(), StaleHandle> {
        self.scheduler
            .reset_due(handle, self.scheduler.deadline_at(instant))
    }

    /// Timers scheduled and not yet fired or cancelled.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// timer.schedule(Duration::from_secs(1), || {}).unwrap();
    /// assert_eq!(timer.pending(), 1);
    /// ```
    pub fn pending(&self) -> usize {
        self.scheduler.shards().iter().map(Shard::pending).sum()
    }

    /// Callbacks (or handler calls, or payload drops) that panicked; each was caught and
    /// its shard went on.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// timer.schedule(Duration::ZERO, || panic!("a bug in a callback")).unwrap();
    /// timer.advance(Duration::ZERO).unwrap();
    /// assert_eq!(timer.panicked(), 1);
    /// ```
    pub fn panicked(&self) -> u64 {
        self.scheduler.shards().iter().map(Shard::panicked).sum()
    }

    /// A snapshot of the counts and the lateness histogram, merged over the shards (see
    /// [`Stats`]). Takes each shard's statistics lock briefly; reapers record into it
    /// without contention otherwise.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// timer.schedule(Duration::from_millis(1), || {}).unwrap();
    /// timer.advance(Duration::from_millis(1)).unwrap();
    /// assert_eq!(timer.stats().fired, 1);
    /// ```
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::new();
        for shard in self.scheduler.shards().iter() {
            stats.merge(&shard.stats());
        }
        stats
    }

    /// Now, by this timer's clock: the real time, or on a [manual](Builder::manual) timer
    /// the time [`advance`](Self::advance) has moved it to (the build's instant plus what
    /// was advanced, whatever real time passed). Every `Instant` given to the timer
    /// ([`schedule_at`](Timer::schedule_at), [`insert_at`](Self::insert_at),
    /// [`reset_at`](Self::reset_at), [`sleep_until`](Timer::sleep_until)) is read against
    /// this clock: on a manual timer, build deadlines from `now()`, not `Instant::now()`.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let start = timer.now();
    /// std::thread::sleep(Duration::from_millis(2)); // real time: not this timer's
    /// assert_eq!(timer.now(), start);
    /// timer.advance(Duration::from_secs(5)).unwrap();
    /// assert_eq!(timer.now(), start + Duration::from_secs(5));
    /// ```
    pub fn now(&self) -> Instant {
        self.scheduler.clock().instant_of(self.scheduler.now())
    }

    /// The number of shards (and reaper threads).
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(3).manual().build().unwrap();
    /// assert_eq!(timer.shards(), 3);
    /// ```
    pub fn shards(&self) -> usize {
        self.scheduler.shards().len()
    }

    /// Stops every reaper and returns the payloads (callbacks) of the timers that had not
    /// fired, unrun. The sleeps and timeouts of a timer of callbacks end here, with
    /// [`SleepError::Shutdown`](crate::SleepError::Shutdown) (their tasks are woken before
    /// this returns): what comes back is the user's closures alone. Scheduling afterwards fails with [`ScheduleError::Shutdown`]. Calling
    /// it again returns nothing more. It shuts down the engine every clone of this timer
    /// shares; dropping the last clone shuts it down too, without waiting (see
    /// "Shutdown" in the type's docs). Each reaper fires what is due when it stops first;
    /// [`drain`](Self::drain) waits for what comes due within a bound.
    ///
    /// Called on one of the timer's own reapers (a callback that shuts the timer down, or
    /// drops the last `Arc` of a service that owns it), it joins the other reapers but not
    /// that one, which is busy running the callback: that reaper winds its shard up once
    /// the callback returns (timers of its shard due by then may still fire first), drops
    /// the payloads it had left, and ends. Those payloads are not in
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
        self.engine.shutdown()
    }
}

impl<T: Send + 'static> Engine<T> {
    /// Asks every reaper to stop: each makes one more pass, which fires what is due by
    /// then, and winds its shard up.
    fn stop(&self) {
        for shard in self.scheduler.shards().iter() {
            shard.stop();
        }
    }

    /// See [`Timer::shutdown`].
    fn shutdown(&self) -> Vec<T> {
        self.stop();
        crate::callback::hand_back(match &self.driver {
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
            Driver::Manual(state) => Timer::wind_up(&self.scheduler, lock(state).take()),
        })
    }

    /// Whether the calling thread is one of this engine's reapers (in a callback).
    fn on_own_reaper(&self) -> bool {
        let me = std::thread::current().id();
        match &self.driver {
            Driver::Reapers(reapers) => lock(reapers).iter().any(|r| r.thread().id() == me),
            Driver::Manual(_) => false,
        }
    }
}

/// The last clone's drop stops the reapers without waiting for them: each winds its shard
/// up on its own thread and drops the payloads it had left there (see [`Timer`]'s
/// "Shutdown"). A manual timer's are dropped on the calling thread.
impl<T: Send + 'static> Drop for Engine<T> {
    fn drop(&mut self) {
        match &self.driver {
            Driver::Reapers(reapers) => {
                self.stop();
                // Detached: the threads end on their own once wound up.
                drop(std::mem::take(&mut *lock(reapers)));
            }
            Driver::Manual(_) => drop(self.shutdown()),
        }
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
