//! `thread-wheel`, for W7 only: a timeout on a [`Wheel`] of the worker thread's own, what a
//! timer costs at the wheel's own price with the least a timer shared by threads needs.
//!
//! At its first `Pending` a timeout keeps a clone of the task's waker in its thread's wheel,
//! at a deadline read from the cheapest clock (as `waker-and-clock`); its end cancels it
//! there: one insert, one cancel, no atomic but the waker's counts. tokio moves a task
//! to the other worker between two polls now and then (some 12-20 % of W7's operations at
//! 64 tasks), and no other thread may touch a thread's wheel: a timeout that ends on
//! another thread hands its key back to the wheel's thread, through that thread's
//! mailbox (a lock and a push), which the thread empties every `DRAIN_EVERY` inserts, as a
//! timer with a wheel per worker must (tokio's alternative timer sends such cancels to the
//! owning worker too). No thread drives the wheels, so it never fires.
//!
//! Its time over the floor is what a timer built on a wheel per worker costs a task's thread
//! in W7, and shardwheel's over it (`over_wheel_ns`) what the rest of a timer costs: any
//! thread scheduling on it and cancelling on it at once, reapers that fire it on time.

use super::timeouts::{Timeouts, poll_keeping};
use crate::common::clock::deadline;
use shardwheel::{Key, Wheel};
use std::cell::{Cell, RefCell};
use std::future::{Future, poll_fn};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::Waker;
use std::time::Duration;

/// Threads that can hold a wheel (a thread past these panics): the runtime's two workers,
/// or the one of `FUTURES_COUNT`'s, and room for more.
const THREADS: usize = 8;
/// A thread takes in the keys handed back to it once every this many inserts.
const DRAIN_EVERY: u32 = 64;

/// Each wheel thread's mailbox: keys of its timers that ended on another thread.
static MAILBOXES: [Mutex<Vec<Key>>; THREADS] = [const { Mutex::new(Vec::new()) }; THREADS];
/// Wheel threads numbered so far.
static THREADS_SEEN: AtomicUsize = AtomicUsize::new(0);
/// Timeouts that ended on another thread than their wheel's (see `Timeouts::moved`).
static MOVED: AtomicU64 = AtomicU64::new(0);

/// A thread's wheel, its number (its mailbox's), and its inserts modulo `DRAIN_EVERY`.
struct Own {
    wheel: RefCell<Wheel<Waker>>,
    number: usize,
    inserts: Cell<u32>,
}

thread_local! {
    static OWN: Own = Own {
        wheel: RefCell::new(Wheel::new()),
        number: THREADS_SEEN.fetch_add(1, Ordering::Relaxed),
        inserts: Cell::new(0),
    };
}

impl Own {
    /// Inserts the task's waker, due `limit` from now; takes in the keys handed back every
    /// `DRAIN_EVERY` inserts.
    fn insert(&self, limit: Duration, waker: &Waker) -> InWheel {
        let inserts = self.inserts.get().wrapping_add(1);
        self.inserts.set(inserts);
        let mut wheel = self.wheel.borrow_mut();
        if inserts.is_multiple_of(DRAIN_EVERY) {
            let returned = std::mem::take(&mut *self.mailbox().lock().expect("mailbox"));
            for key in returned {
                drop(wheel.cancel(key));
            }
        }
        // Ticks of 2^20 counts (about a third of a millisecond at 3 GHz).
        let key = wheel.insert(deadline(limit) >> 20, waker.clone());
        InWheel {
            thread: self.number,
            key,
        }
    }

    fn mailbox(&self) -> &'static Mutex<Vec<Key>> {
        &MAILBOXES[self.number]
    }
}

/// A timer in the wheel of thread `thread`.
struct InWheel {
    thread: usize,
    key: Key,
}

impl Drop for InWheel {
    fn drop(&mut self) {
        OWN.with(|own| {
            if own.number == self.thread {
                drop(own.wheel.borrow_mut().cancel(self.key));
            } else {
                MOVED.fetch_add(1, Ordering::Relaxed);
                MAILBOXES[self.thread]
                    .lock()
                    .expect("mailbox")
                    .push(self.key);
            }
        });
    }
}

/// `thread-wheel` (see the module doc).
pub(super) struct ThreadWheel;

impl Timeouts for ThreadWheel {
    const NAME: &'static str = "thread-wheel";

    fn new() -> Self {
        ThreadWheel
    }

    async fn timeout<F: Future + Send>(&self, limit: Duration, work: F) -> Option<F::Output> {
        let mut work = std::pin::pin!(work);
        let mut armed = None;
        let output = poll_fn(|cx| {
            poll_keeping(work.as_mut(), cx, &mut armed, |waker| {
                OWN.with(|own| own.insert(limit, waker))
            })
        })
        .await;
        drop(armed);
        Some(output)
    }

    fn moved(&self) -> Option<u64> {
        Some(MOVED.swap(0, Ordering::Relaxed))
    }
}
