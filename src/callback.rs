//! What a [`Timer`](crate::Timer) of callbacks runs when a timer fires.
//!
//! A callback is `Send + Sync`, so that an error carrying one back
//! ([`ScheduleError<Callback>`](crate::ScheduleError)) goes into
//! `Box<dyn Error + Send + Sync>` and `anyhow::Error` with `?`. The closure is only `Send`:
//! it is kept in an `Exclusive`, which no shared reference can reach into (the idea of
//! std's unstable `std::sync::Exclusive`), so sharing a callback shares nothing of it.

use crate::alarm::Alarm;
use exclusive::Exclusive;
use std::fmt;

/// A timer's callback: a boxed closure from [`Timer::schedule`](crate::Timer::schedule),
/// or the wake-up of a [`Sleep`](crate::Sleep). Run once, on a reaper thread, unless
/// cancelled first; [`Timer::shutdown`](crate::Timer::shutdown) hands back those that had
/// not run, and [`run`](Self::run) runs one.
pub struct Callback(Job);

enum Job {
    Closure(Exclusive<Box<dyn FnOnce() + Send + 'static>>),
    /// A sleep's own kind, so that a sleep costs one allocation (its shared state), not two.
    Wake(Alarm),
}

impl Callback {
    /// A callback that runs `f`.
    pub fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Callback(Job::Closure(Exclusive::new(Box::new(f))))
    }

    pub(crate) fn wake(alarm: Alarm) -> Self {
        Callback(Job::Wake(alarm))
    }

    /// Whether this is the wake-up of a [`Sleep`](crate::Sleep) (or of a
    /// [`Timeout`](crate::Timeout)'s sleep) rather than a closure of the user's: what
    /// tells the two apart among the callbacks that [`Timer::shutdown`](crate::Timer::shutdown)
    /// and [`Timer::drain`](crate::Timer::drain) hand back. Dropping a wake-up ends its
    /// sleep with [`SleepError::Shutdown`](crate::SleepError::Shutdown); running it ends
    /// the sleep as if its deadline had passed.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::task::{Context, Waker};
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// timer.schedule(Duration::from_secs(60), || println!("retry")).unwrap();
    /// let mut sleep = Box::pin(timer.sleep(Duration::from_secs(60)));
    /// assert!(sleep.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
    /// let (wake_ups, closures): (Vec<_>, Vec<_>) =
    ///     timer.shutdown().into_iter().partition(|callback| callback.is_wake_up());
    /// assert_eq!((wake_ups.len(), closures.len()), (1, 1));
    /// drop(wake_ups); // the sleep ends with an error: the timer shut down
    /// assert!(futures::executor::block_on(sleep).is_err());
    /// ```
    pub fn is_wake_up(&self) -> bool {
        matches!(self.0, Job::Wake(_))
    }

    /// Runs the callback: the closure, or for a sleep, ends it as if its deadline had
    /// passed. (Dropping a sleep's callback unrun ends the sleep with
    /// [`SleepError::Shutdown`](crate::SleepError::Shutdown) instead.)
    pub fn run(self) {
        match self.0 {
            Job::Closure(f) => f.into_inner()(),
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

mod exclusive {
    /// A value that only its owner can reach: no method takes `&self`, and the field is
    /// private to this module, so a `&Exclusive` gives access to nothing.
    pub(super) struct Exclusive<T>(T);

    impl<T> Exclusive<T> {
        pub(super) fn new(value: T) -> Self {
            Exclusive(value)
        }

        pub(super) fn into_inner(self) -> T {
            self.0
        }
    }

    // SAFETY: `Sync` lets threads share `&Exclusive<T>`. Through a shared reference
    // nothing reaches the `T`: the field is private to this module, whose only access is
    // `into_inner(self)`, which takes the value whole, by value, on the one thread that
    // owns it. So no two threads can ever touch the `T` at once, whatever `T` is; moving
    // it between threads is `Send`'s business, which stays `T`'s (the auto trait).
    unsafe impl<T> Sync for Exclusive<T> {}
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

    #[test]
    fn a_callback_is_send_and_sync() {
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<Callback>();
        send_sync::<crate::ScheduleError<Callback>>();
    }
}
