//! What a [`Timer`](crate::Timer) of callbacks runs when a timer fires.
//!
//! A callback is two words, as a `Box<dyn FnOnce()>` is: a word of data and a pointer to a
//! table of what to do with it (run it, drop it). A closure that fits in the word (one
//! that captures one reference, an `Arc`, a sender, or nothing) is kept in it, with no
//! allocation; a larger one is boxed, the word pointing to its box; a sleep's wake-up
//! keeps its alarm there. A timer that captures an `Arc` so costs no `malloc` when it is
//! scheduled and no `free` on the reaper's core when it fires or is cancelled.
//!
//! A callback is `Send + Sync`, so that an error carrying one back
//! ([`ScheduleError<Callback>`](crate::ScheduleError)) goes into
//! `Box<dyn Error + Send + Sync>` and `anyhow::Error` with `?`. The closure is only `Send`:
//! no method that takes `&self` reaches it (the idea of std's unstable
//! `std::sync::Exclusive`), so sharing a callback shares nothing of it.

use crate::alarm::Alarm;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit, align_of, size_of};

/// A timer's callback: a closure from [`Timer::schedule`](crate::Timer::schedule), or the
/// wake-up of a [`Sleep`](crate::Sleep). Run once, on a reaper thread, unless cancelled
/// first; [`Timer::shutdown`](crate::Timer::shutdown) hands back those that had not run,
/// and [`run`](Self::run) runs one.
pub struct Callback {
    /// The closure itself if it fits (`Inline`), or a pointer to its box (`Boxed`), or a
    /// sleep's alarm (`Wake`); only `kind`'s functions read it. A pointer's type, so that
    /// it keeps the provenance of any pointer stored in it.
    data: Word,
    kind: &'static Kind,
}

type Word = MaybeUninit<*mut ()>;

/// What a callback's data word holds, and how to run or drop it.
struct Kind {
    /// Runs the callback whose word this is.
    ///
    /// # Safety
    /// The word was made by this kind's constructor and is used once (run or dropped).
    run: unsafe fn(Word),
    /// Drops it unrun; the same contract.
    drop: unsafe fn(Word),
    /// Whether it is a sleep's wake-up.
    wake_up: bool,
}

/// A closure `F` kept in the data word itself.
struct Inline<F>(PhantomData<F>);

impl<F: FnOnce()> Inline<F> {
    /// Whether an `F` fits in a word.
    const FITS: bool = size_of::<F>() <= size_of::<Word>() && align_of::<F>() <= align_of::<Word>();

    const KIND: Kind = Kind {
        run: Self::run,
        drop: Self::drop,
        wake_up: false,
    };

    unsafe fn run(data: Word) {
        // SAFETY: `Kind::run`'s contract: the word holds an `F` (`new` chose this kind).
        let f = unsafe { take::<F>(data) };
        f()
    }

    unsafe fn drop(data: Word) {
        // SAFETY: `Kind::drop`'s contract.
        drop(unsafe { take::<F>(data) });
    }
}

/// A word holding `value`, which must fit in it (size and alignment).
fn store<T>(value: T) -> Word {
    assert!(size_of::<T>() <= size_of::<Word>() && align_of::<T>() <= align_of::<Word>());
    let mut data = Word::uninit();
    // SAFETY: a `T` fits in the word's size and alignment (asserted, which the compiler
    // decides for each `T`). The word owns the value until `take`.
    unsafe { data.as_mut_ptr().cast::<T>().write(value) };
    data
}

/// The value a word holds.
///
/// # Safety
/// `data` holds a `T` from `store`, not yet taken back.
unsafe fn take<T>(data: Word) -> T {
    // SAFETY: the caller's word: the bytes `store` wrote, moved here whole (a
    // `MaybeUninit` copies every byte, with any pointer's provenance).
    unsafe { data.as_ptr().cast::<T>().read() }
}

/// A closure `F` too large for the word: boxed, the word pointing to the box.
struct Boxed<F>(PhantomData<F>);

impl<F: FnOnce()> Boxed<F> {
    const KIND: Kind = Kind {
        run: Self::run,
        drop: Self::drop,
        wake_up: false,
    };

    /// # Safety
    /// `data` holds a pointer from `Box::into_raw` of a `Box<F>`, not yet taken back.
    unsafe fn take(data: Word) -> Box<F> {
        // SAFETY: the caller's word.
        unsafe { Box::from_raw(data.assume_init().cast::<F>()) }
    }

    unsafe fn run(data: Word) {
        // SAFETY: `Kind::run`'s contract.
        let f = unsafe { Self::take(data) };
        f()
    }

    unsafe fn drop(data: Word) {
        // SAFETY: `Kind::drop`'s contract.
        drop(unsafe { Self::take(data) });
    }
}

/// A sleep's wake-up: the alarm, kept in the word.
const WAKE: Kind = Kind {
    run: |data| {
        // SAFETY: `Kind::run`'s contract: the word holds an `Alarm`.
        unsafe { take::<Alarm>(data) }.ring()
    },
    drop: |data| {
        // SAFETY: `Kind::drop`'s contract.
        drop(unsafe { take::<Alarm>(data) });
    },
    wake_up: true,
};

impl Callback {
    /// A callback that runs `f`. A closure of at most one word (8 bytes on 64-bit targets:
    /// one reference, `Arc`, `Box` or sender captured, or nothing) is kept in the callback
    /// itself, with no allocation; a larger one is boxed.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// let fired = Arc::new(AtomicUsize::new(0));
    /// let counter = Arc::clone(&fired);
    /// // One `Arc` captured: kept in the callback, no allocation.
    /// let callback = shardwheel::Callback::new(move || {
    ///     counter.fetch_add(1, Ordering::Relaxed);
    /// });
    /// callback.run();
    /// assert_eq!(fired.load(Ordering::Relaxed), 1);
    /// ```
    #[inline]
    pub fn new<F: FnOnce() + Send + 'static>(f: F) -> Self {
        if Inline::<F>::FITS {
            Callback {
                data: store(f),
                kind: &Inline::<F>::KIND,
            }
        } else {
            Callback {
                data: Word::new(Box::into_raw(Box::new(f)).cast()),
                kind: &Boxed::<F>::KIND,
            }
        }
    }

    pub(crate) fn wake(alarm: Alarm) -> Self {
        Callback {
            data: store(alarm),
            kind: &WAKE,
        }
    }

    /// The alarm of a sleep's wake-up, unrun; `None` for a closure (which is dropped).
    pub(crate) fn into_alarm(self) -> Option<Alarm> {
        if !self.kind.wake_up {
            return None;
        }
        let callback = ManuallyDrop::new(self);
        // SAFETY: only `WAKE` says `wake_up`, and its word holds an `Alarm` (see `wake`),
        // taken once here: `callback` is not dropped.
        Some(unsafe { take::<Alarm>(callback.data) })
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
        self.kind.wake_up
    }

    /// Runs the callback: the closure, or for a sleep, ends it as if its deadline had
    /// passed. (Dropping a sleep's callback unrun ends the sleep with
    /// [`SleepError::Shutdown`](crate::SleepError::Shutdown) instead.)
    pub fn run(self) {
        let callback = ManuallyDrop::new(self);
        // SAFETY: the word was made with this kind, and is used once: `callback` is not
        // dropped.
        unsafe { (callback.kind.run)(callback.data) }
    }
}

impl Drop for Callback {
    fn drop(&mut self) {
        // SAFETY: the word was made with this kind; a callback is dropped once, and never
        // after `run` (which forgets it).
        unsafe { (self.kind.drop)(self.data) }
    }
}

// SAFETY: `new` takes only `Send` closures, and an alarm is `Send`: the callback owns its
// closure (in the word or in its box) and may take it to any thread.
unsafe impl Send for Callback {}
// SAFETY: through `&Callback` nothing reaches the closure: the only `&self` methods read
// `kind`, a `'static` table of functions and a flag. So no two threads can ever touch the
// closure at once, whatever it is (the idea of std's unstable `Exclusive`).
unsafe impl Sync for Callback {}

impl fmt::Debug for Callback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.kind.wake_up {
            "Callback::Wake(..)"
        } else {
            "Callback::Closure(..)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_callback_is_as_small_as_a_boxed_closure() {
        // It lives in every slot of a timer of callbacks.
        assert_eq!(
            std::mem::size_of::<Callback>(),
            std::mem::size_of::<Box<dyn FnOnce()>>()
        );
    }

    /// A callback that counts its runs into `runs` and captures `extra` beside; the `Arc`'s
    /// count tells whether the capture was dropped.
    fn counting<const N: usize>(runs: &Arc<AtomicUsize>, extra: [u8; N]) -> Callback {
        let runs = Arc::clone(runs);
        Callback::new(move || {
            std::hint::black_box(extra);
            runs.fetch_add(1, Ordering::Relaxed);
        })
    }

    #[test]
    fn small_and_large_closures_run_once_and_drop_what_they_capture_once() {
        // One word (an `Arc`: kept inline) and more (boxed).
        let runs = Arc::new(AtomicUsize::new(0));
        let small = || counting(&runs, []);
        let large = || counting(&runs, [7; 24]);
        for make in [&small as &dyn Fn() -> Callback, &large] {
            let callback = make();
            assert!(!callback.is_wake_up());
            assert_eq!(Arc::strong_count(&runs), 2);
            callback.run();
            assert_eq!(Arc::strong_count(&runs), 1, "the capture was dropped by the run");
            drop(make());
            assert_eq!(Arc::strong_count(&runs), 1, "the capture was dropped unrun");
        }
        assert_eq!(runs.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_closure_capturing_nothing_or_an_aligned_word_runs() {
        let fired = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&fired);
        Callback::new(|| {}).run();
        let word = 0x5eed_u64;
        Callback::new(move || assert_eq!(std::hint::black_box(word), 0x5eed)).run();
        Callback::new(move || {
            counter.fetch_add(1, Ordering::Relaxed);
        })
        .run();
        assert_eq!(fired.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_closure_that_panics_drops_its_capture_once() {
        let runs = Arc::new(AtomicUsize::new(0));
        for extra in [0, 1] {
            let held = Arc::clone(&runs);
            let callback = if extra == 0 {
                Callback::new(move || panic!("{}", Arc::strong_count(&held)))
            } else {
                let big = [1u64; 4];
                Callback::new(move || panic!("{} {big:?}", Arc::strong_count(&held)))
            };
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| callback.run()));
            assert!(outcome.is_err());
            assert_eq!(Arc::strong_count(&runs), 1);
        }
    }

    #[test]
    fn a_callback_is_send_and_sync() {
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<Callback>();
        send_sync::<crate::ScheduleError<Callback>>();
    }
}
