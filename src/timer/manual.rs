//! A manual timer's driver: no reaper threads; [`Timer::advance`] moves its time and runs
//! every shard's pass on the calling thread, with what each reaper would have kept. A
//! callback may shut the timer down from inside `advance`, which holds the driver's lock:
//! the thread-local `ADVANCING` tells `shutdown` so, and the wind-up runs once the passes
//! are done.

use super::{Driver, Timer};
use crate::clock;
use crate::due::Due;
use crate::error::AdvanceError;
use crate::scheduler::Scheduler;
use crate::shard::Shard;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, TryLockError};
use std::time::Duration;

/// What a reaper thread would own, kept by a manual timer for `advance` to use.
pub(super) struct Manual<T> {
    /// What each shard's reaper would keep.
    pub(super) reapers: Vec<Due>,
    pub(super) handler: Box<dyn Fn(T) + Send + Sync>,
}

thread_local! {
    /// The state of the manual timer whose `advance` this thread is running (its address;
    /// 0 for none): a `shutdown` from one of its callbacks must not wait for the lock that
    /// `advance` holds.
    static ADVANCING: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as advancing a manual timer until dropped.
pub(super) struct Advancing {
    outer: usize,
}

impl Advancing {
    pub(super) fn enter<T>(state: &Mutex<Option<Manual<T>>>) -> Self {
        let outer = ADVANCING.replace(state as *const _ as usize);
        Advancing { outer }
    }

    /// Whether the calling thread is advancing the manual timer whose state this is.
    pub(super) fn is<T>(state: &Mutex<Option<Manual<T>>>) -> bool {
        ADVANCING.get() == state as *const _ as usize
    }
}

impl Drop for Advancing {
    fn drop(&mut self) {
        ADVANCING.set(self.outer);
    }
}

impl<T: Send + 'static> Timer<T> {
    /// Moves a [manual](super::Builder::manual) timer's time forward by `by` and runs what
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
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// timer.schedule(Duration::from_secs(60), || {}).unwrap();
    /// timer.advance(Duration::from_secs(60)).unwrap();
    /// assert_eq!(timer.pending(), 0);
    /// let threaded = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// assert!(threaded.advance(Duration::from_secs(1)).is_err()); // not manual
    /// ```
    pub fn advance(&self, by: Duration) -> Result<(), AdvanceError> {
        let (Driver::Manual(state_lock), Some(elapsed_nanos)) =
            (&self.engine.driver, self.scheduler.manual_elapsed())
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
            due.tidy_now();
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
    pub(super) fn wind_up(scheduler: &Scheduler<T>, manual: Option<Manual<T>>) -> Vec<T> {
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
}
