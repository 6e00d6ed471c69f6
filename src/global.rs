//! One engine per process: [`Timer::global`], and the handle a future keeps to its engine.
//!
//! A [`Sleep`](crate::Sleep) or [`Timeout`](crate::Timeout) must own a handle to its
//! engine to be `'static`: a reference count on the engine every clone of the timer
//! shares, which each future increments and decrements (tokio's timeouts pay the same for
//! their runtime handle; measured, it makes a timeout whose future is ready at once several
//! times dearer, W7 `mode=ready`). The process-wide timer lives in a `static` and is never
//! dropped, so its futures hold nothing and count nothing (they find it in its `static`):
//! `EngineRef::of` tells it by its address. Either way the handle is one pointer.

use crate::callback::Callback;
use crate::scheduler::Scheduler;
use crate::timer::{Engine, Timer};
use std::sync::{Arc, OnceLock};

/// The process-wide timer, built at its first use.
static GLOBAL: OnceLock<Timer> = OnceLock::new();

/// What a future holds of its engine: a reference that keeps another timer's engine
/// running, as a clone of the timer would, or nothing for the process-wide timer, which is
/// never dropped. One pointer either way, so a future stays as small as one that borrowed
/// its timer.
pub(crate) struct EngineRef(Option<Arc<Engine<Callback>>>);

impl EngineRef {
    #[inline]
    pub(crate) fn of(timer: &Timer) -> Self {
        match GLOBAL.get() {
            Some(global) if std::ptr::eq(global, timer) => EngineRef(None),
            _ => EngineRef(Some(Arc::clone(timer.engine()))),
        }
    }

    /// Whether it holds a reference count (not the process-wide timer's), or did.
    #[inline]
    pub(crate) fn is_counted(&self) -> bool {
        self.0.is_some()
    }

    /// Lets go of the reference count, once the future is done with the engine.
    pub(crate) fn release(&mut self) {
        self.0 = None;
    }

    pub(crate) fn scheduler(&self) -> &Scheduler<Callback> {
        match &self.0 {
            Some(engine) => engine.scheduler(),
            // Built: `of` found it so.
            None => Timer::global().scheduler(),
        }
    }
}

impl Timer {
    /// The process-wide timer: built with [`Timer::builder`]'s defaults (a shard and a
    /// reaper thread per core, 1 ms tick) at the first call, and kept until the process
    /// exits (it is never dropped; [`shutdown`](Self::shutdown) on it ends it for
    /// everyone). One set of reapers for a whole server: its callbacks, periodic timers,
    /// sleeps and timeouts. Its futures hold no reference count (see [`Sleep`](crate::Sleep)),
    /// so they cost less than those of a timer the program owns; the first call costs the
    /// threads' start, later calls one atomic load.
    ///
    /// # Panics
    ///
    /// If the reaper threads cannot be started at the first call (the system refused a
    /// thread), as `std::thread::spawn` would.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::global();
    /// futures::executor::block_on(timer.sleep(Duration::from_millis(1))).unwrap();
    /// assert!(std::ptr::eq(timer, shardwheel::Timer::global()));
    /// ```
    pub fn global() -> &'static Timer {
        GLOBAL.get_or_init(|| match Timer::builder().build() {
            Ok(timer) => timer,
            Err(error) => panic!("shardwheel: cannot start the process-wide timer: {error}"),
        })
    }
}
