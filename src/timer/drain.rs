//! A graceful shutdown: [`Timer::drain`] lets the timers due within a bound fire, then
//! shuts the timer down through [`Timer::shutdown`]'s own path, which hands back the rest.
//!
//! Nothing new happens in the reapers: they go on as before while the drain waits, and a
//! reaper asked to stop makes one more pass before it winds up, which fires every timer
//! due by then. So a drain that stops the reapers once the bound has passed fires every
//! timer due within it; the wind-up hands back the others, each exactly once.

use super::{Driver, Timer};
use std::time::Duration;

/// How often a drain looks whether any timer is still pending (it stops early then).
const LOOK_INTERVAL: Duration = Duration::from_millis(1);

impl<T: Send + 'static> Timer<T> {
    /// Shuts the timer down gracefully: the timers due within `bound` from now fire first,
    /// then the reapers stop, as [`shutdown`](Self::shutdown) stops them, and the payloads
    /// of the timers that had not fired are handed back, unrun. No timer both fires and is
    /// handed back. It returns once the bound has passed and the reapers have ended, or
    /// sooner if no timer is pending; timers scheduled meanwhile count too. Scheduling
    /// afterwards fails with [`ScheduleError::Shutdown`](crate::ScheduleError::Shutdown).
    ///
    /// It blocks the calling thread for up to `bound`: in async code, call it where
    /// blocking is allowed (`tokio::task::spawn_blocking`, say). Called from one of the
    /// timer's own callbacks, it cannot wait (its reaper would not fire meanwhile) and
    /// shuts down at once, as `shutdown` does there. On a [manual](super::Builder::manual)
    /// timer it [advances](Self::advance) the time by `bound`, then shuts down.
    ///
    /// A [`Timer`] of callbacks hands back the user's closures alone: the sleeps and
    /// timeouts not due within the bound end with
    /// [`SleepError::Shutdown`](crate::SleepError::Shutdown), as at a shutdown.
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let (fired, rx) = mpsc::channel();
    /// let timer = shardwheel::Timer::builder()
    ///     .shards(1)
    ///     .build_with(move |id: u32| fired.send(id).unwrap())
    ///     .unwrap();
    /// timer.insert(Duration::from_millis(5), 1).unwrap();
    /// timer.insert(Duration::from_secs(60), 2).unwrap();
    /// assert_eq!(timer.drain(Duration::from_millis(50)), [2]); // handed back
    /// assert_eq!(rx.try_iter().collect::<Vec<_>>(), [1]); // fired within the bound
    /// ```
    pub fn drain(&self, bound: Duration) -> Vec<T> {
        match &self.engine.driver {
            // Busy if called from a callback inside `advance`: then `shutdown` leaves the
            // wind-up to `advance`, as it does there.
            Driver::Manual(_) => drop(self.advance(bound)),
            Driver::Reapers(_) if self.engine.on_own_reaper() => {}
            Driver::Reapers(_) => {
                let end = self.scheduler.deadline_after(bound);
                loop {
                    let now = self.scheduler.now();
                    if now >= end || self.pending() == 0 {
                        break;
                    }
                    std::thread::sleep(LOOK_INTERVAL.min(Duration::from_nanos(end - now)));
                }
            }
        }
        self.shutdown()
    }
}
