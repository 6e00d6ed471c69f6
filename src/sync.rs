//! The synchronisation primitives the engine is built from: loom's under `cfg(loom)`, so
//! that the models in `loom-tests/` explore every interleaving of the very same code, and
//! std's otherwise. Everything concurrent imports from here, never from `std` directly.

#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(loom)]
pub(crate) use loom::thread;

#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(not(loom))]
pub(crate) use std::thread;

/// Parks the current thread until unparked or until `timeout` has passed. Loom has no
/// time: under loom it parks until unparked, so a model never relies on a timeout.
pub(crate) fn park_timeout(timeout: std::time::Duration) {
    #[cfg(loom)]
    {
        let _ = timeout;
        thread::park();
    }
    #[cfg(not(loom))]
    thread::park_timeout(timeout);
}

/// A cell for data whose exclusive access is argued by a protocol rather than by `&mut`,
/// with loom's closure API, so that loom can check each access against that protocol.
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        return UnsafeCell(loom::cell::UnsafeCell::new(value));
        #[cfg(not(loom))]
        return UnsafeCell(std::cell::UnsafeCell::new(value));
    }

    /// Calls `f` with a pointer for reading. The caller's protocol must rule out a
    /// concurrent write.
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with(f);
        #[cfg(not(loom))]
        return f(self.0.get());
    }

    /// Calls `f` with a pointer for writing. The caller's protocol must rule out any
    /// concurrent access.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with_mut(f);
        #[cfg(not(loom))]
        return f(self.0.get());
    }
}

/// A value set once and read by any thread: the reaper's `Thread` handle, which producers
/// need to unpark it. (std's `OnceLock` has no loom counterpart.)
#[derive(Debug)]
pub(crate) struct SetOnce<T> {
    /// `EMPTY`, then `WRITING` for the one caller that won it, then `READY`.
    state: AtomicU8,
    value: UnsafeCell<Option<T>>,
}

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

// SAFETY: the value is written once, by the one thread that moved `state` from EMPTY to
// WRITING, before READY is published with Release, and only read (as `&T`) after an
// Acquire load sees READY: sharing it needs `T: Sync`, handing it to another thread's drop
// needs `T: Send`.
unsafe impl<T: Send + Sync> Sync for SetOnce<T> {}

impl<T> SetOnce<T> {
    pub(crate) fn new() -> Self {
        SetOnce {
            state: AtomicU8::new(EMPTY),
            value: UnsafeCell::new(None),
        }
    }

    /// Sets the value, if no call has before; otherwise hands it back.
    pub(crate) fn set(&self, value: T) -> Result<(), T> {
        // Relaxed: winning the CAS only makes this call the one writer; `READY` below
        // publishes the value.
        if self
            .state
            .compare_exchange(EMPTY, WRITING, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return Err(value);
        }
        // SAFETY: the CAS above admits one writer, once, and no reader dereferences before
        // `state` is READY, which is stored after this write.
        self.value.with_mut(|slot| unsafe { *slot = Some(value) });
        // Release: publishes the write above to readers that Acquire-load READY.
        self.state.store(READY, Ordering::Release);
        Ok(())
    }

    pub(crate) fn get(&self) -> Option<&T> {
        // Acquire: pairs with `set`'s Release, so the value is seen written.
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        // SAFETY: READY means the value was written and is never written again; shared
        // reads are fine, and the reference lives no longer than `self`.
        self.value.with(|slot| unsafe { (*slot).as_ref() })
    }
}

/// Epoch-based reclamation for the slots' chunks: crossbeam-epoch's, or under loom and
/// miri a model of it. crossbeam checks its own epoch with loom and miri; what the
/// engine's models and miri tests check is where the engine pins and defers. Exploring
/// crossbeam's internals on top (each thread registering and leaving its collector) made
/// the loom models run for hours, and under miri its global garbage still queued at exit
/// reads as leaks. The model keeps what the engine relies on: a thread pins before it
/// reads a chunk pointer, with a SeqCst fence as crossbeam's pin has, and a deferred free
/// runs only at a flush that, after a SeqCst fence of its own, finds no other thread
/// pinned (Acquire, after their Release unpins). A reader whose fence comes first is seen
/// pinned; one whose fence comes after the flush's sees the chunk pointer already cleared.
pub(crate) mod epoch {
    #[cfg(not(any(loom, miri)))]
    pub(crate) use crossbeam_epoch::{Guard, pin};

    #[cfg(any(loom, miri))]
    pub(crate) use model::{Guard, pin};

    #[cfg(any(loom, miri))]
    mod model {
        use crate::sync::{AtomicUsize, Mutex, Ordering, fence};

        #[cfg(loom)]
        loom::lazy_static! {
            static ref PINNED: AtomicUsize = AtomicUsize::new(0);
            static ref DEFERRED: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
        }
        #[cfg(not(loom))]
        static PINNED: AtomicUsize = AtomicUsize::new(0);
        #[cfg(not(loom))]
        static DEFERRED: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());

        struct Deferred(Box<dyn FnOnce()>);

        // SAFETY: as crossbeam's `defer_unchecked`: the caller vouches for running the
        // closure on whichever thread flushes.
        unsafe impl Send for Deferred {}

        /// A pinned thread (a model of crossbeam's guard).
        pub(crate) struct Guard(());

        /// Pins the calling thread.
        pub(crate) fn pin() -> Guard {
            PINNED.fetch_add(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            Guard(())
        }

        impl Drop for Guard {
            fn drop(&mut self) {
                PINNED.fetch_sub(1, Ordering::Release);
            }
        }

        impl Guard {
            /// Defers `f` until no thread is pinned (see `flush`).
            ///
            /// # Safety
            ///
            /// As crossbeam's: `f` must be fine to run on any thread, at any later flush.
            pub(crate) unsafe fn defer_unchecked<F: FnOnce()>(&self, f: F) {
                let f: Box<dyn FnOnce() + '_> = Box::new(f);
                // SAFETY: the caller vouches for the closure outliving its borrows until
                // it runs, as crossbeam's caller does.
                let f: Box<dyn FnOnce()> = unsafe { std::mem::transmute(f) };
                DEFERRED.lock().unwrap().push(Deferred(f));
            }

            /// Runs the deferred closures if no thread but this one is pinned.
            pub(crate) fn flush(&self) {
                fence(Ordering::SeqCst);
                if PINNED.load(Ordering::Acquire) == 1 {
                    let deferred = std::mem::take(&mut *DEFERRED.lock().unwrap());
                    for Deferred(f) in deferred {
                        f();
                    }
                }
            }
        }
    }
}
