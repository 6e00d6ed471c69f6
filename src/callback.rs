//! What a [`Timer`](crate::Timer) of callbacks runs when a timer fires.
//!
//! A callback is two words, as a `Box<dyn FnOnce()>` is: a word of data and a pointer to a
//! table of what to do with it (run it, drop it). A closure that fits in the word (one
//! that captures one reference, an `Arc`, a sender, or nothing) is kept in it, with no
//! allocation; a larger one is boxed, the word pointing to its box. A timer that captures
//! an `Arc` so costs no `malloc` when it is scheduled and no `free` on the reaper's core
//! when it fires or is cancelled.
//!
//! A sleep's wake-up is the task's [`Waker`] itself, which is two words too: its data
//! pointer in the data word, and its table (`RawWakerVTable`) in place of ours, told apart
//! by the table pointer's lowest bit, which both tables' alignment leaves free. So a sleep
//! allocates nothing: the waker lives in the timer's slot. Run or dropped unrun (a timer
//! shut down), a wake-up wakes its task, which then looks at its timer's slot to learn
//! whether the deadline passed (see `sleep`); discarded, as a cancelled timer's payload
//! is, it wakes nobody.
//!
//! A callback is `Send + Sync`, so that an error carrying one back
//! ([`ScheduleError<Callback>`](crate::ScheduleError)) goes into
//! `Box<dyn Error + Send + Sync>` and `anyhow::Error` with `?`. The closure is only `Send`:
//! no method that takes `&self` reaches it (the idea of std's unstable
//! `std::sync::Exclusive`), so sharing a callback shares nothing of it.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit, align_of, size_of};
use std::ptr::NonNull;
use std::task::{RawWakerVTable, Waker};

/// A timer's callback: a closure from [`Timer::schedule`](crate::Timer::schedule), or the
/// wake-up of a [`Sleep`](crate::Sleep). Run once, on a reaper thread, unless cancelled
/// first; [`Timer::shutdown`](crate::Timer::shutdown) hands back those that had not run,
/// and [`run`](Self::run) runs one.
pub struct Callback {
    /// The closure itself if it fits (`Inline`), or a pointer to its box (`Boxed`), or a
    /// waker's data pointer; only the functions of `table` read it. A pointer's type, so
    /// that it keeps the provenance of any pointer stored in it.
    data: Word,
    /// A closure's `&'static Kind`, or a waker's `&'static RawWakerVTable` with its lowest
    /// bit set (`WAKER`).
    table: NonNull<()>,
}

type Word = MaybeUninit<*mut ()>;

/// The bit of `Callback::table` that says it is a waker's table.
const WAKER: usize = 1;

// Both tables hold function pointers, so their addresses leave the lowest bit free.
const _: () = assert!(align_of::<Kind>() > WAKER && align_of::<RawWakerVTable>() > WAKER);

/// What a callback's data word holds, and how to run or drop it.
struct Kind {
    /// Runs the callback whose word this is.
    ///
    /// # Safety
    /// The word was made by this kind's constructor and is used once (run or dropped).
    run: unsafe fn(Word),
    /// Drops it unrun; the same contract. `None` for a closure kept in the word with
    /// nothing to drop (one that captures references, numbers or nothing): a cancelled
    /// timer's payload then costs no call (W1's cancel: the call through this table was 3
    /// of its instructions, beside the call that reaches `discard`).
    drop: Option<unsafe fn(Word)>,
}

impl Kind {
    /// Drops the closure in `data` unrun; a closure with nothing to drop costs no call.
    ///
    /// # Safety
    /// As `Kind::drop`: the word was made by this kind's constructor and is used once.
    #[inline]
    unsafe fn drop_unrun(&self, data: Word) {
        // Without `drop`, the word holds an `F` with no drop glue (`Inline::KIND`): letting
        // it go is its drop.
        if let Some(drop) = self.drop {
            // SAFETY: the caller's contract.
            unsafe { drop(data) }
        }
    }
}

/// A closure `F` kept in the data word itself.
struct Inline<F>(PhantomData<F>);

impl<F: FnOnce()> Inline<F> {
    /// Whether an `F` fits in a word.
    const FITS: bool = size_of::<F>() <= size_of::<Word>() && align_of::<F>() <= align_of::<Word>();

    const KIND: Kind = Kind {
        run: Self::run,
        drop: if std::mem::needs_drop::<F>() {
            Some(Self::drop)
        } else {
            None
        },
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
        drop: Some(Self::drop),
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

/// What a callback holds, taken out of it.
enum Taken {
    /// A closure: its word and the kind that made it.
    Closure(Word, &'static Kind),
    /// A sleep's wake-up.
    Waker(Waker),
}

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
        let (data, kind) = if Inline::<F>::FITS {
            (store(f), &Inline::<F>::KIND)
        } else {
            let boxed = Box::into_raw(Box::new(f));
            (Word::new(boxed.cast()), &Boxed::<F>::KIND)
        };
        Callback {
            data,
            table: NonNull::from(kind).cast(),
        }
    }

    /// The wake-up of a sleep whose task `waker` wakes.
    #[inline]
    pub(crate) fn wake(waker: Waker) -> Self {
        let waker = ManuallyDrop::new(waker);
        let table = NonNull::from(waker.vtable()).cast::<()>();
        Callback {
            data: Word::new(waker.data().cast_mut()),
            table: table.map_addr(|addr| addr | WAKER),
        }
    }

    /// Takes out what the callback holds; it is not dropped.
    #[inline]
    fn take(self) -> Taken {
        let callback = ManuallyDrop::new(self);
        // SAFETY: `callback` is forgotten, so its parts are used once, here.
        unsafe { parts(callback.data, callback.table) }
    }

    /// Drops a cancelled timer's callback: a closure as a drop does, a sleep's wake-up
    /// without waking its task (the sleep let go of its timer).
    pub(crate) fn discard(self) {
        match self.take() {
            // SAFETY: the word was made with this kind, and is used once: `take` forgot
            // the callback.
            Taken::Closure(data, kind) => unsafe { kind.drop_unrun(data) },
            Taken::Waker(waker) => drop(waker),
        }
    }

    /// Whether this is the wake-up of a [`Sleep`](crate::Sleep) (or of a
    /// [`Timeout`](crate::Timeout)'s sleep) rather than a closure of the user's. A shutdown
    /// ([`Timer::shutdown`](crate::Timer::shutdown), [`Timer::drain`](crate::Timer::drain))
    /// ends the sleeps itself, with [`SleepError::Shutdown`](crate::SleepError::Shutdown),
    /// and hands back the closures alone.
    pub(crate) fn is_wake_up(&self) -> bool {
        self.table.addr().get() & WAKER != 0
    }

    /// Runs the callback: the closure, or for a sleep's wake-up, wakes its task, as the
    /// drop of a wake-up does.
    pub fn run(self) {
        match self.take() {
            // SAFETY: the word was made with this kind, and is used once: `take` forgot
            // the callback.
            Taken::Closure(data, kind) => unsafe { (kind.run)(data) },
            Taken::Waker(waker) => waker.wake(),
        }
    }
}

impl Drop for Callback {
    fn drop(&mut self) {
        // SAFETY: a callback is dropped once, and never after `run` or `take` (which
        // forget it).
        match unsafe { parts(self.data, self.table) } {
            // SAFETY: the word was made with this kind, and is used once (above).
            Taken::Closure(data, kind) => unsafe { kind.drop_unrun(data) },
            // A wake-up dropped unrun (its timer shut down) wakes its task, which finds
            // the timer gone; a cancelled timer's is discarded instead, waking nobody.
            Taken::Waker(waker) => waker.wake(),
        }
    }
}

/// What the parts of a callback hold.
///
/// # Safety
/// They are a callback's `data` and `table`, used once: the callback is forgotten or being
/// dropped, and neither part is used again.
#[inline]
unsafe fn parts(data: Word, table: NonNull<()>) -> Taken {
    if table.addr().get() & WAKER == 0 {
        // SAFETY: without the bit, `table` came from a `&'static Kind` (see `new`).
        return Taken::Closure(data, unsafe { table.cast::<Kind>().as_ref() });
    }
    let vtable = table.as_ptr().map_addr(|addr| addr & !WAKER);
    // SAFETY: with the bit, `wake` stored a waker's data pointer and (its bit cleared
    // here) its `&'static RawWakerVTable`, taken from a waker it forgot: this rebuilds
    // that waker, once (the caller's word).
    Taken::Waker(unsafe { Waker::new(data.assume_init(), &*vtable.cast::<RawWakerVTable>()) })
}

/// What a shutdown hands back of a timer's payloads: for a timer of callbacks, the user's
/// closures alone, the wake-ups of sleeps and timeouts dropped here, which wakes their
/// tasks to find the timer shut down (rather than when the caller drops what it was
/// handed); any other payload as it is.
pub(crate) fn hand_back<T: 'static>(mut payloads: Vec<T>) -> Vec<T> {
    if let Some(callbacks) = (&mut payloads as &mut dyn Any).downcast_mut::<Vec<Callback>>() {
        callbacks.retain(|callback| !callback.is_wake_up());
    }
    payloads
}

/// Drops the payload of a cancelled timer: for a timer of callbacks
/// (`discard_of::<Callback>`), a sleep's wake-up without waking its task; any other
/// payload as a drop does.
pub(crate) fn discard_of<T: 'static>() -> fn(T) {
    let discard: &dyn Any = &(Callback::discard as fn(Callback));
    discard.downcast_ref::<fn(T)>().copied().unwrap_or(drop)
}

// SAFETY: `new` takes only `Send` closures, and a waker is `Send`: the callback owns its
// closure (in the word or in its box) or waker and may take it to any thread.
unsafe impl Send for Callback {}
// SAFETY: through `&Callback` nothing reaches the closure: the only `&self` methods read
// `table`'s address, not what it points to. So no two threads can ever touch the closure
// at once, whatever it is (the idea of std's unstable `Exclusive`).
unsafe impl Sync for Callback {}

impl fmt::Debug for Callback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_wake_up() {
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
            assert_eq!(
                Arc::strong_count(&runs),
                1,
                "the capture was dropped by the run"
            );
            drop(make());
            assert_eq!(Arc::strong_count(&runs), 1, "the capture was dropped unrun");
            make().discard();
            assert_eq!(
                Arc::strong_count(&runs),
                1,
                "the capture was discarded unrun"
            );
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
    fn only_a_closure_with_something_to_drop_has_a_drop_to_call() {
        fn drops<F: FnOnce()>(_: &F) -> bool {
            Inline::<F>::KIND.drop.is_some()
        }
        let word = 0x5eed_u64;
        let copied = move || assert_eq!(std::hint::black_box(word), 0x5eed);
        let runs = Arc::new(AtomicUsize::new(0));
        let shared = move || {
            runs.fetch_add(1, Ordering::Relaxed);
        };
        assert!(!drops(&|| {}));
        assert!(!drops(&copied));
        assert!(
            drops(&shared),
            "an `Arc` captured is released when discarded"
        );
        assert!(Boxed::<fn()>::KIND.drop.is_some(), "a box is always freed");
    }

    /// A waker that counts its wake-ups; its `Arc`'s count tells how many copies live.
    struct Count(AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counting_waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (Arc::clone(&count), Waker::from(count))
    }

    #[test]
    fn a_wake_up_run_or_dropped_wakes_once_and_discarded_wakes_nobody() {
        // Each on another thread, as a reaper would (miri checks the waker is rebuilt
        // whole and dropped once).
        let ends: [fn(Callback); 3] = [Callback::run, drop, Callback::discard];
        for (end, wakes) in ends.into_iter().zip([1, 1, 0]) {
            let (count, waker) = counting_waker();
            let callback = Callback::wake(waker);
            assert!(callback.is_wake_up());
            assert_eq!(format!("{callback:?}"), "Callback::Wake(..)");
            std::thread::spawn(move || end(callback)).join().unwrap();
            assert_eq!(count.0.load(Ordering::Relaxed), wakes);
            assert_eq!(Arc::strong_count(&count), 1, "the waker is dropped once");
        }
    }

    #[test]
    fn a_timer_of_callbacks_discards_and_any_other_drops() {
        let (count, waker) = counting_waker();
        discard_of::<Callback>()(Callback::wake(waker));
        assert_eq!(count.0.load(Ordering::Relaxed), 0, "discarded unwoken");
        assert_eq!(Arc::strong_count(&count), 1);
        let (count, waker) = counting_waker();
        discard_of::<Option<Callback>>()(Some(Callback::wake(waker)));
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "dropped, so woken");
        assert_eq!(Arc::strong_count(&count), 1);
    }

    #[test]
    fn a_callback_is_send_and_sync() {
        fn send_sync<T: Send + Sync + 'static>() {}
        send_sync::<Callback>();
        send_sync::<crate::ScheduleError<Callback>>();
    }
}
