//! Periodic timers: a closure run every period until cancelled, built on one-shot timers.
//!
//! Each run is a one-shot timer whose callback runs the closure and then schedules the next
//! run, from the reaper thread, carrying the closure along. The [`Periodic`] handle names
//! the series rather than one run: the current run's [`TimerHandle`] sits in a small lock
//! that only the series' own rescheduling and its `cancel` take, never another timer, and
//! never while the closure runs.

use crate::callback::Callback;
use crate::clock;
use crate::error::{PeriodicError, ScheduleError};
use crate::handle::TimerHandle;
use crate::scheduler::Scheduler;
use crate::timer::Timer;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How the runs of a periodic timer are spaced, as `ScheduledThreadPoolExecutor`'s
/// `scheduleAtFixedRate` and `scheduleWithFixedDelay` space theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// Run `k` is due at the first run's deadline plus `k` periods, however long the runs
    /// take. Runs missed because the series fell behind by whole periods (a slow closure, a
    /// busy reaper, a stalled machine) are skipped: the next run is the first one still
    /// ahead, on the same grid.
    FixedRate(Duration),
    /// As `FixedRate`, but missed runs are made up at once, one after another, until the
    /// series is back on its grid (tokio's `MissedTickBehavior::Burst`).
    FixedRateBurst(Duration),
    /// Each run is due a period after the previous run ended.
    FixedDelay(Duration),
}

impl Period {
    fn length(self) -> Duration {
        match self {
            Period::FixedRate(period)
            | Period::FixedRateBurst(period)
            | Period::FixedDelay(period) => period,
        }
    }

    /// The deadline of the run after the one due at `due`, as of `now` (nanoseconds since
    /// the timer's start).
    fn next(self, due: u64, now: u64) -> u64 {
        let period = clock::nanos(self.length());
        match self {
            Period::FixedRateBurst(_) => due.saturating_add(period),
            Period::FixedRate(_) => {
                let behind = now.saturating_sub(due) / period;
                due.saturating_add(behind.saturating_add(1).saturating_mul(period))
            }
            Period::FixedDelay(_) => now.saturating_add(period),
        }
    }
}

/// Where a series stands.
enum State {
    /// Its next run is this timer.
    Scheduled(TimerHandle),
    /// Cancelled through its handle.
    Cancelled,
    /// Ended otherwise: its next run could not be scheduled, or was dropped unrun by a
    /// shutdown.
    Ended,
}

struct Series {
    scheduler: Scheduler<Callback>,
    period: Period,
    state: Mutex<State>,
    runs: AtomicU64,
}

impl Series {
    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned lock still holds a valid state.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Schedules the run due at `due`, while the caller holds the series' lock. A refused
    /// run is handed back, for the caller to drop once it has let go of the lock (dropping
    /// it locks, and drops the user's closure).
    fn schedule(
        self: &Arc<Self>,
        state: &mut State,
        due: u64,
        closure: Box<dyn FnMut() + Send>,
    ) -> Result<(), (PeriodicError, Callback)> {
        let run = Run {
            series: Arc::clone(self),
            closure: Some(closure),
            due,
        };
        match self
            .scheduler
            .insert_due(due, Callback::new(move || run.run()))
        {
            Ok(handle) => {
                *state = State::Scheduled(handle);
                Ok(())
            }
            Err(refused) => {
                *state = State::Ended;
                let error = match refused {
                    ScheduleError::Full(_) => PeriodicError::Full,
                    ScheduleError::Shutdown(_) => PeriodicError::Shutdown,
                };
                Err((error, refused.into_inner()))
            }
        }
    }
}

/// One scheduled run of a series.
struct Run {
    series: Arc<Series>,
    /// Taken when the run runs; still here if the run is dropped unrun.
    closure: Option<Box<dyn FnMut() + Send>>,
    due: u64,
}

impl Run {
    fn run(mut self) {
        let Some(mut closure) = self.closure.take() else {
            return;
        };
        let series = Arc::clone(&self.series);
        if !matches!(*series.state(), State::Scheduled(_)) {
            return; // cancelled while this run was being fired
        }
        // A panicking closure must not end the series (Java's executors stop a periodic
        // task at its first exception): catch it, reschedule, then let the engine see it,
        // which counts it.
        let outcome = panic::catch_unwind(AssertUnwindSafe(&mut closure));
        series.runs.fetch_add(1, Ordering::Relaxed);
        // What is dropped after the lock is let go: the closure if the series was cancelled
        // meanwhile, or the next run if it was refused (which ends the series, as
        // `Periodic::is_active` then tells).
        let (mut unused, mut refused) = (None, None);
        {
            let mut state = series.state();
            if matches!(*state, State::Scheduled(_)) {
                let next = series.period.next(self.due, series.scheduler.now());
                refused = series.schedule(&mut state, next, closure).err();
            } else {
                unused = Some(closure);
            }
        }
        drop((unused.take(), refused.take()));
        if let Err(panic) = outcome {
            panic::resume_unwind(panic);
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // Dropped unrun by a shutdown (or by a cancel that got there first): the series
        // will not run again.
        if self.closure.is_some() {
            let mut state = self.series.state();
            if matches!(*state, State::Scheduled(_)) {
                *state = State::Ended;
            }
        }
    }
}

/// A periodic timer: names a series of runs, from [`Timer::schedule_periodic`].
///
/// Cloning it gives another name for the same series. Dropping it does not cancel the
/// series (as dropping a [`TimerHandle`] does not cancel a timer).
#[derive(Clone)]
pub struct Periodic(Arc<Series>);

impl Periodic {
    /// Stops the series: true if it was active, and then the closure will not start again
    /// (a run already under way finishes). False if it had already stopped. O(1): the
    /// pending run's timer is cancelled at once.
    ///
    /// ```
    /// use shardwheel::Period;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let poll = timer.schedule_periodic(Duration::from_secs(1), Period::FixedRate(Duration::from_secs(1)), || {}).unwrap();
    /// assert!(poll.cancel());
    /// assert!(!poll.cancel()); // already stopped
    /// assert_eq!(timer.pending(), 0);
    /// ```
    pub fn cancel(&self) -> bool {
        let before = std::mem::replace(&mut *self.0.state(), State::Cancelled);
        match before {
            State::Scheduled(handle) => {
                // After the lock is let go: during a shutdown the cancel may drop the run
                // itself, and dropping a run locks the series. A run fired meanwhile finds
                // the series cancelled and does not start.
                self.0.scheduler.cancel(handle);
                true
            }
            State::Cancelled | State::Ended => false,
        }
    }

    /// Whether the series will run again: it has not been cancelled, its timer has not
    /// shut down, and no reschedule found the timer full (`max_pending`, or the shard's
    /// slots).
    ///
    /// ```
    /// use shardwheel::Period;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let flush = timer.schedule_periodic(Duration::ZERO, Period::FixedDelay(Duration::from_secs(5)), || {}).unwrap();
    /// assert!(flush.is_active());
    /// drop(timer.shutdown());
    /// assert!(!flush.is_active());
    /// ```
    pub fn is_active(&self) -> bool {
        matches!(*self.0.state(), State::Scheduled(_))
    }

    /// How many times the closure has run (or started and panicked).
    ///
    /// ```
    /// use shardwheel::Period;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let tick = timer.schedule_periodic(Duration::from_secs(1), Period::FixedRate(Duration::from_secs(1)), || {}).unwrap();
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// assert_eq!(tick.runs(), 2);
    /// ```
    pub fn runs(&self) -> u64 {
        self.0.runs.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Periodic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Periodic")
            .field("period", &self.0.period)
            .field("active", &self.is_active())
            .field("runs", &self.runs())
            .finish()
    }
}

impl Timer {
    /// Runs `closure` every period, the first time `first` from now, on a reaper thread,
    /// until cancelled through the returned [`Periodic`] (see [`Period`] for the spacing
    /// and for runs missed while the series fell behind). A run that panics is caught and
    /// counted ([`Timer::panicked`]); the series goes on.
    ///
    /// ```
    /// use shardwheel::Period;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let heartbeat = timer
    ///     .schedule_periodic(Duration::from_secs(1), Period::FixedRate(Duration::from_secs(1)), || {
    ///         // send a heartbeat
    ///     })
    ///     .unwrap();
    /// for _ in 0..10 {
    ///     timer.advance(Duration::from_secs(1)).unwrap();
    /// }
    /// assert_eq!(heartbeat.runs(), 10);
    /// assert!(heartbeat.cancel());
    /// assert_eq!(timer.pending(), 0);
    /// ```
    ///
    /// # Errors
    ///
    /// [`PeriodicError::ZeroPeriod`] for a zero period (it would run without end);
    /// [`PeriodicError::Full`] and [`PeriodicError::Shutdown`] as
    /// [`schedule`](Timer::schedule) fails.
    pub fn schedule_periodic(
        &self,
        first: Duration,
        period: Period,
        closure: impl FnMut() + Send + 'static,
    ) -> Result<Periodic, PeriodicError> {
        if period.length().is_zero() {
            return Err(PeriodicError::ZeroPeriod);
        }
        let scheduler = self.scheduler().clone();
        let due = scheduler.deadline_after(first);
        let series = Arc::new(Series {
            scheduler,
            period,
            state: Mutex::new(State::Ended),
            runs: AtomicU64::new(0),
        });
        // Held while the first run is scheduled, so that a run due at once waits for its
        // handle to be recorded.
        let mut state = series.state();
        let scheduled = series.schedule(&mut state, due, Box::new(closure));
        drop(state);
        match scheduled {
            Ok(()) => Ok(Periodic(series)),
            Err((error, refused)) => {
                drop(refused);
                Err(error)
            }
        }
    }
}
