//! The second half of the port in tests/tokio_util_delay_queue.rs (tokio-util's cases
//! from `insert_before_first_after_poll` on); the header there gives the origin, the
//! licence and how the port was made.
//!
//! tokio-util's own `DelayQueue` tests (tokio-util 0.7.20, `tests/time_delay_queue.rs`),
//! ported to shardwheel's queue. tokio-util is Copyright (c) Tokio Contributors, under the
//! MIT license: "Permission is hereby granted, free of charge, to any person obtaining a
//! copy of this software and associated documentation files (the "Software"), to deal in
//! the Software without restriction, including without limitation the rights to use, copy,
//! modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and
//! to permit persons to whom the Software is furnished to do so, subject to the following
//! conditions: The above copyright notice and this permission notice shall be included in
//! all copies or substantial portions of the Software. THE SOFTWARE IS PROVIDED "AS IS",
//! WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED."
//!
//! The port is mechanical: the imports change, the assertions do not. tokio's paused clock
//! (`time::pause`, `#[tokio::test(start_paused = true)]`, `sleep`, `sleep_until`,
//! `advance`, `Instant::now`) is the `time` module below, on a manual shardwheel timer that
//! each queue is made on (`DelayQueue::new()` -> `DelayQueue::with_timer(&time::timer())`);
//! `queue.next()` (futures' `StreamExt`) is `queue.next_expired()`, so that the file needs
//! no `stream` feature. Cases left out say why where they stood.
//!
//! tests/tokio_util_delay_queue_paused.rs runs the same cases as written, on tokio's paused
//! clock, where the queue runs on tokio's timer (feature `test-util`); this file runs them
//! on the engine's clock and sleep, the path of every queue outside such tests.

#![allow(clippy::disallowed_names)]

use shardwheel::delay_queue::DelayQueue;
use std::time::Duration;
use time::{Instant, sleep, sleep_until};
use tokio_test::{assert_pending, assert_ready, task};

/// tokio's paused clock on a manual shardwheel timer (see the file).
#[path = "common/manual_tokio_time.rs"]
mod time;

macro_rules! poll {
    ($queue:ident) => {
        $queue.enter(|cx, mut queue| queue.poll_expired(cx))
    };
}

macro_rules! assert_ready_some {
    ($e:expr) => {{
        match assert_ready!($e) {
            Some(v) => v,
            None => panic!("None"),
        }
    }};
}

#[tokio::test]
async fn insert_before_first_after_poll() {
    time::pause();

    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let now = Instant::now();

    let _one = queue.insert_at("one", now + ms(200));

    assert_pending!(poll!(queue));

    let _two = queue.insert_at("two", now + ms(100));

    sleep(ms(99)).await;

    assert_pending!(poll!(queue));

    sleep(ms(1)).await;

    assert!(queue.is_woken());

    let entry = assert_ready_some!(poll!(queue)).into_inner();
    assert_eq!(entry, "two");
}

#[tokio::test]
async fn insert_after_ready_poll() {
    time::pause();

    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let now = Instant::now();

    queue.insert_at("1", now + ms(100));
    queue.insert_at("2", now + ms(100));
    queue.insert_at("3", now + ms(100));

    assert_pending!(poll!(queue));

    sleep(ms(100)).await;

    assert!(queue.is_woken());

    let mut res = vec![];

    while res.len() < 3 {
        let entry = assert_ready_some!(poll!(queue));
        res.push(entry.into_inner());
        queue.insert_at("foo", now + ms(500));
    }

    res.sort_unstable();

    assert_eq!("1", res[0]);
    assert_eq!("2", res[1]);
    assert_eq!("3", res[2]);
}

#[tokio::test]
async fn reset_later_after_slot_starts() {
    time::pause();

    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let now = Instant::now();

    let foo = queue.insert_at("foo", now + ms(100));

    assert_pending!(poll!(queue));

    sleep_until(now + Duration::from_millis(80)).await;

    assert!(!queue.is_woken());

    // At this point the queue hasn't been polled, so `elapsed` on the wheel
    // for the queue is still at 0 and hence the 1ms resolution slots cover
    // [0-64).  Resetting the time on the entry to 120 causes it to get put in
    // the [64-128) slot.  As the queue knows that the first entry is within
    // that slot, but doesn't know when, it must wake immediately to advance
    // the wheel.
    queue.reset_at(&foo, now + ms(120));
    assert!(queue.is_woken());

    assert_pending!(poll!(queue));

    sleep_until(now + Duration::from_millis(119)).await;
    assert!(!queue.is_woken());

    sleep(ms(1)).await;
    assert!(queue.is_woken());

    let entry = assert_ready_some!(poll!(queue)).into_inner();
    assert_eq!(entry, "foo");
}

#[tokio::test]
async fn reset_inserted_expired() {
    time::pause();

    // Instants before the start of the test seem to break in wasm.
    time::sleep(ms(1000)).await;

    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));
    let now = Instant::now();

    let key = queue.insert_at("foo", now - ms(100));

    // this causes the panic described in #2473
    queue.reset_at(&key, now + ms(100));

    assert_eq!(1, queue.len());

    sleep(ms(200)).await;

    let entry = assert_ready_some!(poll!(queue)).into_inner();
    assert_eq!(entry, "foo");

    assert_eq!(queue.len(), 0);
}

#[tokio::test]
async fn reset_earlier_after_slot_starts() {
    time::pause();

    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let now = Instant::now();

    let foo = queue.insert_at("foo", now + ms(200));

    assert_pending!(poll!(queue));

    sleep_until(now + Duration::from_millis(80)).await;

    assert!(!queue.is_woken());

    // At this point the queue hasn't been polled, so `elapsed` on the wheel
    // for the queue is still at 0 and hence the 1ms resolution slots cover
    // [0-64).  Resetting the time on the entry to 120 causes it to get put in
    // the [64-128) slot.  As the queue knows that the first entry is within
    // that slot, but doesn't know when, it must wake immediately to advance
    // the wheel.
    queue.reset_at(&foo, now + ms(120));
    assert!(queue.is_woken());

    assert_pending!(poll!(queue));

    sleep_until(now + Duration::from_millis(119)).await;
    assert!(!queue.is_woken());

    sleep(ms(1)).await;
    assert!(queue.is_woken());

    let entry = assert_ready_some!(poll!(queue)).into_inner();
    assert_eq!(entry, "foo");
}

#[tokio::test]
async fn insert_in_past_after_poll_fires_immediately() {
    time::pause();

    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let now = Instant::now();

    queue.insert_at("foo", now + ms(200));

    assert_pending!(poll!(queue));

    sleep(ms(80)).await;

    assert!(!queue.is_woken());
    queue.insert_at("bar", now + ms(40));

    assert!(queue.is_woken());

    let entry = assert_ready_some!(poll!(queue)).into_inner();
    assert_eq!(entry, "bar");
}

#[tokio::test]
async fn delay_queue_poll_expired_when_empty() {
    let mut delay_queue = task::spawn(DelayQueue::new());
    let key = delay_queue.insert(0, std::time::Duration::from_secs(10));
    assert_pending!(poll!(delay_queue));

    delay_queue.remove(&key);
    assert!(assert_ready!(poll!(delay_queue)).is_none());
}

#[tokio::test]
async fn compact_expire_empty() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let now = Instant::now();

    queue.insert_at("foo1", now + ms(10));
    queue.insert_at("foo2", now + ms(10));

    sleep(ms(10)).await;

    let mut res = vec![];
    while res.len() < 2 {
        let entry = assert_ready_some!(poll!(queue));
        res.push(entry.into_inner());
    }

    queue.compact();

    assert_eq!(queue.len(), 0);
    assert_eq!(queue.capacity(), 0);
}

#[tokio::test]
async fn compact_remove_empty() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let now = Instant::now();

    let key1 = queue.insert_at("foo1", now + ms(10));
    let key2 = queue.insert_at("foo2", now + ms(10));

    queue.remove(&key1);
    queue.remove(&key2);

    queue.compact();

    assert_eq!(queue.len(), 0);
    assert_eq!(queue.capacity(), 0);
}

#[tokio::test]
// Trigger a re-mapping of keys in the slab due to a `compact` call and
// test removal of re-mapped keys
async fn compact_remove_remapped_keys() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let now = Instant::now();

    queue.insert_at("foo1", now + ms(10));
    queue.insert_at("foo2", now + ms(10));

    // should be assigned indices 3 and 4
    let key3 = queue.insert_at("foo3", now + ms(20));
    let key4 = queue.insert_at("foo4", now + ms(20));

    sleep(ms(10)).await;

    let mut res = vec![];
    while res.len() < 2 {
        let entry = assert_ready_some!(poll!(queue));
        res.push(entry.into_inner());
    }

    // items corresponding to `foo3` and `foo4` will be assigned
    // new indices here
    queue.compact();

    queue.insert_at("foo5", now + ms(10));

    // test removal of re-mapped keys
    let expired3 = queue.remove(&key3);
    let expired4 = queue.remove(&key4);

    assert_eq!(expired3.into_inner(), "foo3");
    assert_eq!(expired4.into_inner(), "foo4");

    queue.compact();
    assert_eq!(queue.len(), 1);
    assert_eq!(queue.capacity(), 1);
}

#[tokio::test]
async fn compact_change_deadline() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let mut now = Instant::now();

    queue.insert_at("foo1", now + ms(10));
    queue.insert_at("foo2", now + ms(10));

    // should be assigned indices 3 and 4
    queue.insert_at("foo3", now + ms(20));
    let key4 = queue.insert_at("foo4", now + ms(20));

    sleep(ms(10)).await;

    let mut res = vec![];
    while res.len() < 2 {
        let entry = assert_ready_some!(poll!(queue));
        res.push(entry.into_inner());
    }

    // items corresponding to `foo3` and `foo4` should be assigned
    // new indices
    queue.compact();

    now = Instant::now();

    queue.insert_at("foo5", now + ms(10));
    let key6 = queue.insert_at("foo6", now + ms(10));

    queue.reset_at(&key4, now + ms(20));
    queue.reset_at(&key6, now + ms(20));

    // foo3 and foo5 will expire
    sleep(ms(10)).await;

    while res.len() < 4 {
        let entry = assert_ready_some!(poll!(queue));
        res.push(entry.into_inner());
    }

    sleep(ms(10)).await;

    while res.len() < 6 {
        let entry = assert_ready_some!(poll!(queue));
        res.push(entry.into_inner());
    }

    let entry = assert_ready!(poll!(queue));
    assert!(entry.is_none());
}

#[tokio::test]
async fn item_expiry_greater_than_wheel() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    // This function tests that a delay queue that has existed for at least 2^36 milliseconds won't panic when a new item is inserted.
    let mut queue = DelayQueue::with_timer(&time::timer());
    for _ in 0..2 {
        time::advance(Duration::from_millis(1 << 35)).await;
        queue.insert(0, Duration::from_millis(0));
        queue.next_expired().await;
    }
    // This should not panic
    let no_panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        queue.insert(1, Duration::from_millis(1));
    }));
    assert!(no_panic.is_ok());
}

#[tokio::test]
#[cfg(panic = "unwind")]
async fn remove_after_compact() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    let now = Instant::now();
    let mut queue = DelayQueue::with_timer(&time::timer());

    let foo_key = queue.insert_at("foo", now + ms(10));
    queue.insert_at("bar", now + ms(20));
    queue.remove(&foo_key);
    queue.compact();

    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        queue.remove(&foo_key);
    }));
    assert!(panic.is_err());
}

#[tokio::test]
#[cfg(panic = "unwind")]
async fn remove_after_compact_poll() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    let now = Instant::now();
    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let foo_key = queue.insert_at("foo", now + ms(10));
    queue.insert_at("bar", now + ms(20));

    sleep(ms(10)).await;
    assert_eq!(assert_ready_some!(poll!(queue)).key(), foo_key);

    queue.compact();

    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        queue.remove(&foo_key);
    }));
    assert!(panic.is_err());
}

#[tokio::test]
async fn peek() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let now = Instant::now();

    let key = queue.insert_at("foo", now + ms(5));
    let key2 = queue.insert_at("bar", now);
    let key3 = queue.insert_at("baz", now + ms(10));

    assert_eq!(queue.peek(), Some(key2));

    sleep(ms(6)).await;

    assert_eq!(queue.peek(), Some(key2));

    let entry = assert_ready_some!(poll!(queue));
    assert_eq!(entry.get_ref(), &"bar");

    assert_eq!(queue.peek(), Some(key));

    let entry = assert_ready_some!(poll!(queue));
    assert_eq!(entry.get_ref(), &"foo");

    assert_eq!(queue.peek(), Some(key3));

    assert_pending!(poll!(queue));

    sleep(ms(5)).await;

    assert_eq!(queue.peek(), Some(key3));

    let entry = assert_ready_some!(poll!(queue));
    assert_eq!(entry.get_ref(), &"baz");

    assert!(queue.peek().is_none());
}

#[tokio::test]
async fn peek_entries_sharing_a_wheel_slot() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    // Only the lowest level of the timer wheel has one deadline per slot. A
    // level-one slot spans 64ms, so entries with different deadlines share it
    // and are only ordered once the slot cascades down.
    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));

    let now = Instant::now();

    // 64ms..=127ms all fall in the same level-one slot. Entries are pushed onto
    // the front of a slot, so inserting the later deadline second puts it at the
    // head.
    let early = queue.insert_at("early", now + ms(100));
    let late = queue.insert_at("late", now + ms(120));

    assert_eq!(queue.peek(), Some(early));

    sleep(ms(105)).await;

    assert_eq!(queue.peek(), Some(early));

    let entry = assert_ready_some!(poll!(queue));
    assert_eq!(entry.key(), early);
    assert_eq!(entry.get_ref(), &"early");

    assert_eq!(queue.peek(), Some(late));

    sleep(ms(20)).await;

    let entry = assert_ready_some!(poll!(queue));
    assert_eq!(entry.key(), late);

    assert!(queue.peek().is_none());
}

#[tokio::test]
async fn wake_after_remove_last() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));
    let key = queue.insert("foo", ms(1000));

    assert_pending!(poll!(queue));

    queue.remove(&key);

    assert!(queue.is_woken());
    assert!(assert_ready!(poll!(queue)).is_none());
}

#[tokio::test]
async fn wake_after_clear() {
    time::pause(); // was #[tokio::test(start_paused = true)]
    let mut queue = task::spawn(DelayQueue::with_timer(&time::timer()));
    queue.insert("foo", ms(1000));

    assert_pending!(poll!(queue));
    assert!(!queue.is_woken());

    queue.clear();

    assert!(queue.is_woken());
    assert!(assert_ready!(poll!(queue)).is_none());
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
