//! What users of tokio-util's `DelayQueue` rely on and could break here: keys of values
//! that are gone name nothing (slots are reused), the task waiting on the queue is woken
//! when its last value goes, a deadline already passed comes out at the next poll (on real
//! reapers too), and a timer that cannot wake the queue is an error, not a hang.

mod common;

use shardwheel::delay_queue::DelayQueue;
use shardwheel::{SleepError, Timer};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::{Context, Poll};
use std::time::Duration;

fn manual() -> Timer {
    Timer::builder().shards(1).manual().build().unwrap()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn a_key_of_a_value_gone_names_nothing_even_once_its_slot_is_reused() {
    let timer = manual();
    let mut queue = DelayQueue::with_timer(&timer);
    let removed = queue.insert("removed", secs(5));
    queue.remove(&removed);
    let expired = queue.insert("expired", secs(1));
    timer.advance(secs(1)).unwrap();
    let out = futures::executor::block_on(queue.next_expired()).unwrap();
    assert_eq!(out.key(), expired);
    // Their slots now hold these (the slab reuses the slot freed last first).
    let new = [queue.insert("new", secs(9)), queue.insert("newer", secs(9))];
    for stale in [removed, expired] {
        assert!(!new.contains(&stale));
        assert!(queue.try_remove(&stale).is_none());
        assert!(queue.try_reset(&stale, secs(1)).is_err());
        assert_eq!(queue.try_deadline(&stale), None);
        let mut unwind = AssertUnwindSafe(&mut queue);
        assert!(catch_unwind(move || unwind.remove(&stale)).is_err());
    }
    let mut unwind = AssertUnwindSafe(&mut queue);
    assert!(catch_unwind(move || unwind.reset(&removed, secs(1))).is_err());
    assert_eq!(queue.len(), 2, "the new values are untouched");
    assert_eq!(queue.remove(&new[1]).into_inner(), "newer");
}

#[test]
fn removing_or_clearing_the_last_value_wakes_the_waiting_task_which_sees_none() {
    let timer = manual();
    let (count, waker) = common::counting();
    let mut cx = Context::from_waker(&waker);
    let mut queue = DelayQueue::with_timer(&timer);
    let first = queue.insert(1, secs(10));
    let second = queue.insert(2, secs(10));
    assert!(queue.poll_expired(&mut cx).is_pending());
    queue.remove(&first);
    assert_eq!(
        common::wakes(&count),
        0,
        "a value is left, due when the sleep is set"
    );
    queue.remove(&second);
    assert_eq!(common::wakes(&count), 1);
    assert!(matches!(queue.poll_expired(&mut cx), Poll::Ready(None)));
    assert_eq!(timer.pending(), 0, "the queue's sleep was cancelled");

    queue.insert(3, secs(10));
    assert_eq!(
        common::wakes(&count),
        2,
        "a value in an empty queue: look again"
    );
    assert!(queue.poll_expired(&mut cx).is_pending());
    queue.clear();
    assert_eq!(common::wakes(&count), 3);
    assert!(matches!(queue.poll_expired(&mut cx), Poll::Ready(None)));
    timer.advance(secs(10)).unwrap();
    assert_eq!(common::wakes(&count), 3, "nothing left to wake it");
}

#[test]
fn a_passed_deadline_comes_out_at_the_next_poll_inserted_or_reset() {
    let timer = manual();
    let (count, waker) = common::counting();
    let mut cx = Context::from_waker(&waker);
    let mut queue = DelayQueue::with_timer(&timer);
    timer.advance(secs(5)).unwrap();
    let later = queue.insert("later", secs(60));
    assert!(queue.poll_expired(&mut cx).is_pending());
    queue.insert_at("past", timer.now() - secs(3));
    assert_eq!(common::wakes(&count), 1, "woken to take it out");
    let Poll::Ready(Some(out)) = queue.poll_expired(&mut cx) else {
        panic!("not out at the next poll")
    };
    assert_eq!(
        (*out.get_ref(), out.deadline()),
        ("past", timer.now() - secs(3))
    );
    assert!(queue.poll_expired(&mut cx).is_pending());
    queue.reset_at(&later, timer.now());
    assert_eq!(common::wakes(&count), 2);
    let Poll::Ready(Some(out)) = queue.poll_expired(&mut cx) else {
        panic!("not out at the next poll")
    };
    assert_eq!(out.key(), later);
}

/// The first poll after an insert at a passed deadline (or with no delay) gives it, on real
/// reapers (the queue this replaced gave `Pending` for 191 of 200).
#[test]
fn on_real_reapers_too() {
    let timer = common::timer(2);
    let mut queue = DelayQueue::with_timer(&timer);
    let (_, waker) = common::counting();
    let mut cx = Context::from_waker(&waker);
    queue.insert(-1, secs(60));
    for round in 0..200 {
        if round % 2 == 0 {
            queue.insert_at(round, timer.now());
        } else {
            queue.insert(round, Duration::ZERO);
        }
        let Poll::Ready(Some(out)) = queue.poll_expired(&mut cx) else {
            panic!("round {round}: not out at the first poll")
        };
        assert_eq!(out.into_inner(), round);
    }
}

#[test]
fn values_due_come_out_first_and_a_shut_down_timer_is_an_error_not_a_hang() {
    let timer = manual();
    let mut queue = DelayQueue::with_timer(&timer);
    queue.insert("due", secs(1));
    queue.insert("never", secs(9));
    timer.advance(secs(1)).unwrap();
    timer.shutdown();
    let (_, waker) = common::counting();
    let mut cx = Context::from_waker(&waker);
    let Poll::Ready(Ok(Some(out))) = queue.try_poll_expired(&mut cx) else {
        panic!("the due value did not come out")
    };
    assert_eq!(out.into_inner(), "due");
    assert!(matches!(
        queue.try_poll_expired(&mut cx),
        Poll::Ready(Err(SleepError::Shutdown))
    ));
    let mut queue = AssertUnwindSafe(&mut queue);
    assert!(catch_unwind(move || queue.poll_expired(&mut cx)).is_err());
}

#[test]
fn peek_names_the_value_due_first_across_the_wheels_buckets() {
    let timer = manual();
    let mut queue = DelayQueue::with_timer(&timer);
    // 1_000 ms lies in a coarser bucket than 130 ms, which is due before it
    // (a bucket is due a block ahead of its values): the earliest is not in the first.
    let far = queue.insert("far", Duration::from_millis(1_010));
    let near = queue.insert("near", Duration::from_millis(1_000));
    assert_eq!(queue.peek(), Some(near));
    timer.advance(Duration::from_millis(900)).unwrap();
    let nearest = queue.insert("nearest", Duration::from_millis(50));
    assert_eq!(queue.peek(), Some(nearest));
    queue.remove(&nearest);
    queue.remove(&near);
    assert_eq!(queue.peek(), Some(far));
}

/// A queue moves between threads and tasks with its values, as tokio-util's does.
#[test]
fn a_queue_is_send_and_sync_when_its_values_are() {
    fn send_and_sync<T: Send + Sync>(_: &T) {}
    let queue = DelayQueue::<String>::new();
    send_and_sync(&queue);
    let moved = std::thread::spawn(move || queue.len()).join().unwrap();
    assert_eq!(moved, 0);
}
