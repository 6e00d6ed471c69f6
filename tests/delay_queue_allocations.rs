//! The queue allocates nothing per value once it has room: inserts, removes, resets and
//! expiries in steady state, with a task waiting on it, count no allocation. This binary
//! counts the allocations of the thread that drives the queue (its own global allocator).

mod common;

use shardwheel::delay_queue::DelayQueue;
use std::cell::Cell;
use std::task::{Context, Poll};
use std::time::Duration;

#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::allocations;

thread_local! {
    /// Those made within the manual timer's `advance`.
    static ADVANCING: Cell<u64> = const { Cell::new(0) };
}

/// A SplitMix64 step: the workloads' random stream.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn churn_resets_and_expiries_in_steady_state_allocate_nothing() {
    let timer = shardwheel::Timer::builder()
        .shards(1)
        .manual()
        .build()
        .unwrap();
    let (_, waker) = common::counting();
    let mut cx = Context::from_waker(&waker);
    let mut queue = DelayQueue::with_timer(&timer);
    let mut rng = 42;
    let ms = |rng: &mut u64| Duration::from_millis(1_000 + next(rng) % 9_000);
    let mut keys: Vec<_> = (0..1_000).map(|i| queue.insert(i, ms(&mut rng))).collect();
    let mut expired = 0;
    let mut round = |queue: &mut DelayQueue<u64>, keys: &mut Vec<_>, rng: &mut u64| {
        for i in 0..2_000u64 {
            let at = (next(rng) % keys.len() as u64) as usize;
            match queue.try_remove(&keys[at]) {
                Some(_) => keys[at] = queue.insert(i, ms(rng)),
                None => keys[at] = queue.insert(i, ms(rng)), // it had come out
            }
            let other = (next(rng) % keys.len() as u64) as usize;
            let _ = queue.try_reset(&keys[other], ms(rng));
        }
        // The manual timer's own bookkeeping (what it fires) is not the queue's.
        let advancing = allocations();
        timer.advance(Duration::from_millis(500)).unwrap();
        ADVANCING.set(ADVANCING.get() + allocations() - advancing);
        while let Poll::Ready(Some(_)) = queue.poll_expired(&mut cx) {
            expired += 1;
        }
    };
    // Warm up: the slab, the wheel's levels and the engine's stage reach their size.
    for _ in 0..40 {
        round(&mut queue, &mut keys, &mut rng);
    }
    let before = allocations() - ADVANCING.get();
    for _ in 0..40 {
        round(&mut queue, &mut keys, &mut rng);
    }
    let made = allocations() - ADVANCING.get() - before;
    assert_eq!(made, 0, "the queue allocated in steady state");
    assert!(
        expired > 0 && queue.len() > 500,
        "values came out, and the queue stayed full"
    );
}

#[test]
fn reserve_makes_room_so_that_inserts_allocate_nothing() {
    let mut queue = DelayQueue::new();
    // The wheel makes its levels (a few kilobytes) once, at their first use.
    let keys: Vec<_> = (1..=60)
        .map(|secs| queue.insert(0, Duration::from_secs(secs)))
        .collect();
    for key in &keys {
        queue.remove(key);
    }
    queue.reserve(10_000);
    assert!(queue.capacity() >= 10_000);
    let before = allocations();
    for i in 0..10_000 {
        queue.insert(i, Duration::from_secs(1 + i % 60));
    }
    assert_eq!(
        allocations() - before,
        0,
        "an insert allocated after reserve"
    );
}
