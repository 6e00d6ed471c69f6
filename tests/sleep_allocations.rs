//! A sleep allocates nothing: its timer's callback is the task's waker itself, kept in the
//! timer's slot. This binary counts the allocations of the thread that polls and drops
//! sleeps and timeouts (its own global allocator; other tests' threads are not counted).

mod common;

use std::future::{Future, pending};
use std::pin::pin;
use std::task::Context;
use std::time::Duration;

#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::allocations;

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
