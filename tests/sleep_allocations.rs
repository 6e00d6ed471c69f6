//! A sleep allocates nothing: its timer's callback is the task's waker itself, kept in the
//! timer's slot. This binary counts the allocations of the thread that polls and drops
//! sleeps and timeouts (its own global allocator; other tests' threads are not counted).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::{Future, pending};
use std::pin::pin;
use std::task::Context;
use std::time::Duration;

/// The system allocator, counting this thread's allocations.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call goes to the system allocator unchanged; the count is a thread-local
// without a destructor, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn sleeps_and_timeouts_polled_and_dropped_allocate_nothing() {
    let timer = shardwheel::Timer::builder()
        .shards(1)
        .manual()
        .build()
        .unwrap();
    let (count, waker) = common::counting();
    let mut context = Context::from_waker(&waker);
    // The first timers set up this thread's stage.
    for _ in 0..2 {
        let mut sleep = timer.sleep(Duration::from_secs(1));
        assert!(pin!(&mut sleep).poll(&mut context).is_pending());
    }
    let before = allocations();
    for round in 0..1_000 {
        let mut sleep = timer.sleep(Duration::from_secs(1));
        assert!(pin!(&mut sleep).poll(&mut context).is_pending());
        if round % 2 == 0 {
            drop(sleep);
        } else {
            let mut timeout = pin!(timer.timeout(Duration::from_secs(1), pending::<()>()));
            assert!(timeout.as_mut().poll(&mut context).is_pending());
        }
    }
    assert_eq!(allocations() - before, 0, "a sleep or a timeout allocated");
    assert_eq!(timer.pending(), 0, "every timer was cancelled");
    assert_eq!(common::wakes(&count), 0);
}
