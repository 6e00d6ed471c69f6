//! What a [`Timer`](crate::Timer) of callbacks runs when a timer fires.

use crate::sleep::Alarm;
use std::fmt;

/// A timer's callback: a boxed closure from [`Timer::schedule`](crate::Timer::schedule),
/// or the wake-up of a [`Sleep`](crate::Sleep). Run once, on a reaper thread, unless
/// cancelled first; [`Timer::shutdown`](crate::Timer::shutdown) hands back those that had
/// not run, and [`run`](Self::run) runs one.
pub struct Callback(Job);

enum Job {
    Closure(Box<dyn FnOnce() + Send + 'static>),
    /// A sleep's own kind, so that a sleep costs one allocation (its shared state), not two.
    Wake(Alarm),
}

impl Callback {
    /// A callback that runs `f`.
    pub fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Callback(Job::Closure(Box::new(f)))
    }

    pub(crate) fn wake(alarm: Alarm) -> Self {
        Callback(Job::Wake(alarm))
    }

    /// Runs the callback: the closure, or for a sleep, ends it as if its deadline had
    /// passed. (Dropping a sleep's callback unrun ends the sleep with
    /// [`SleepError::Shutdown`](crate::SleepError::Shutdown) instead.)
    pub fn run(self) {
        match self.0 {
            Job::Closure(f) => f(),
            Job::Wake(alarm) => alarm.ring(),
        }
    }
}

impl fmt::Debug for Callback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Job::Closure(_) => "Callback::Closure(..)",
            Job::Wake(_) => "Callback::Wake(..)",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callback_is_as_small_as_a_boxed_closure() {
        // It lives in every slot of a timer of callbacks.
        assert_eq!(
            std::mem::size_of::<Callback>(),
            std::mem::size_of::<Box<dyn FnOnce()>>()
        );
    }
}
