//! [`HyperTimer`]: hyper 1.x's `rt::Timer` on a shardwheel engine (feature `hyper`).
//!
//! A thin adapter, as hyper-util's `TokioTimer` is for tokio: each of hyper's sleeps is a
//! [`Sleep`] boxed behind hyper's trait object; `reset` moves it in place (hyper resets its
//! header-read timer at every request on a connection), and `now` is the engine's clock,
//! so a server on a [manual](crate::Builder::manual) timer runs its timeouts on the manual
//! time.

use crate::clock;
use crate::sleep::Sleep;
use crate::timer::Timer;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// hyper's timer (`hyper::rt::Timer`) on a shardwheel [`Timer`]: give it to a hyper
/// server's or client's builder (`.timer(HyperTimer::global())`) and its header-read,
/// keep-alive and other timeouts run on the engine's reapers.
///
/// A sleep that cannot be scheduled (the timer is full or shut down) ends at once: hyper
/// then takes its timeout as expired and closes the connection, rather than keeping it
/// without a timeout.
///
/// ```
/// use hyper::rt::Timer as _;
/// use std::time::Duration;
///
/// let timer = shardwheel::HyperTimer::new(shardwheel::Timer::builder().shards(1).build().unwrap());
/// let start = timer.now();
/// futures::executor::block_on(timer.sleep(Duration::from_millis(5)));
/// assert!(timer.now() >= start + Duration::from_millis(5));
/// ```
#[derive(Debug, Clone)]
pub struct HyperTimer {
    timer: Timer,
}

impl HyperTimer {
    /// hyper's timer on `timer` (a clone shares its engine).
    ///
    /// ```
    /// let engine = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let for_hyper = shardwheel::HyperTimer::new(engine.clone());
    /// # drop(for_hyper);
    /// ```
    pub fn new(timer: Timer) -> Self {
        HyperTimer { timer }
    }

    /// hyper's timer on the process-wide [`Timer::global`].
    ///
    /// # Panics
    ///
    /// As [`Timer::global`].
    ///
    /// ```
    /// let for_hyper = shardwheel::HyperTimer::global();
    /// # drop(for_hyper);
    /// ```
    pub fn global() -> Self {
        HyperTimer::new(Timer::global().clone())
    }
}

/// [`HyperTimer::global`], as hyper-util's `TokioTimer::default()` is tokio's timer: code
/// that builds its timer with `Default` switches between the two by its import alone.
///
/// ```
/// let for_hyper = shardwheel::HyperTimer::default();
/// # drop(for_hyper);
/// ```
impl Default for HyperTimer {
    fn default() -> Self {
        HyperTimer::global()
    }
}

/// A [`Sleep`] as hyper's sleeps are: `()` when it ends, for whatever reason.
struct HyperSleep(Sleep);

impl Future for HyperSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // An error (full, shut down) ends the sleep too: see `HyperTimer`.
        Pin::new(&mut self.0).poll(cx).map(drop)
    }
}

impl hyper::rt::Sleep for HyperSleep {}

impl hyper::rt::Timer for HyperTimer {
    /// The deadline is fixed now (`now() + duration`), as hyper expects of its timers.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(clock::instant_after(self.timer.now(), duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(self.timer.sleep_until(deadline)))
    }

    fn now(&self) -> Instant {
        self.timer.now()
    }

    /// Moves one of this timer's sleeps in place (O(1), same timer); another kind of sleep
    /// is replaced.
    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<HyperSleep>() {
            Some(ours) => ours.get_mut().0.reset(new_deadline),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}
