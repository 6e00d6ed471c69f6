//! `DelayQueue` against a model on a manual timer (every value out once, never early, in
//! deadline order, removes and resets honoured, `peek` naming a value due first), then on
//! real reapers under tokio and `futures::executor`.

mod common;

use proptest::prelude::*;
use shardwheel::Timer;
use shardwheel::delay_queue::{DelayQueue, Key};
use std::collections::BTreeMap;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
enum Op {
    Insert(u64),
    /// Of the value at this position among those in the queue (modulo their number).
    Remove(usize),
    Reset(usize, u64),
    /// Advance this many ms, then take out what is due if `drain` (else leave it there, so
    /// that removes and resets meet values already due).
    Advance(u64, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..100).prop_map(Op::Insert),
        1 => any::<usize>().prop_map(Op::Remove),
        2 => (any::<usize>(), 0u64..100).prop_map(|(at, ms)| Op::Reset(at, ms)),
        3 => (0u64..40, any::<bool>()).prop_map(|(ms, drain)| Op::Advance(ms, drain)),
    ]
}

/// The model: each value's key and deadline (ms since the start), by value id.
#[derive(Default)]
struct Model {
    pending: BTreeMap<u64, (Key, u64)>,
}

impl Model {
    fn nth(&self, at: usize) -> Option<u64> {
        let n = self.pending.len();
        (n > 0).then(|| *self.pending.keys().nth(at % n).unwrap())
    }
}

/// Takes out everything the queue gives now, checking it against the model.
fn drain(queue: &mut DelayQueue<u64>, model: &mut Model, start: Instant, now_ms: u64) {
    let mut cx = Context::from_waker(Waker::noop());
    let mut last = 0;
    loop {
        match queue.poll_expired(&mut cx) {
            Poll::Ready(Some(expired)) => {
                let id = *expired.get_ref();
                let (key, due_ms) = model
                    .pending
                    .remove(&id)
                    .expect("out once, and not removed");
                assert_eq!(expired.key(), key);
                assert_eq!(expired.deadline(), start + Duration::from_millis(due_ms));
                assert!(due_ms <= now_ms, "never early: due {due_ms}, now {now_ms}");
                assert!(due_ms >= last, "in deadline order");
                last = due_ms;
            }
            Poll::Ready(None) => {
                assert!(model.pending.is_empty());
                return;
            }
            Poll::Pending => break,
        }
    }
    // Every value due by now came out (a manual timer fires within `advance`).
    assert!(
        model.pending.values().all(|&(_, due)| due > now_ms),
        "a due value was held back"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn the_queue_matches_its_model(ops in prop::collection::vec(op(), 1..80)) {
        let timer = Timer::builder().shards(2).manual().build().unwrap();
        let start = timer.now();
        let mut queue = DelayQueue::with_timer(&timer);
        let mut model = Model::default();
        let (mut now_ms, mut next_id) = (0, 0);
        for op in ops {
            match op {
                Op::Insert(ms) => {
                    let key = queue.insert(next_id, Duration::from_millis(ms));
                    model.pending.insert(next_id, (key, now_ms + ms));
                    next_id += 1;
                }
                Op::Remove(at) => {
                    if let Some(id) = model.nth(at) {
                        let (key, _) = model.pending.remove(&id).unwrap();
                        prop_assert_eq!(queue.try_remove(&key).map(|e| e.into_inner()), Some(id));
                        prop_assert!(queue.try_remove(&key).is_none(), "a used key names nothing");
                    }
                }
                Op::Reset(at, ms) => {
                    if let Some(id) = model.nth(at) {
                        let entry = model.pending.get_mut(&id).unwrap();
                        queue.reset(&entry.0, Duration::from_millis(ms));
                        entry.1 = now_ms + ms;
                    }
                }
                Op::Advance(ms, then_drain) => {
                    timer.advance(Duration::from_millis(ms)).unwrap();
                    now_ms += ms;
                    if then_drain {
                        drain(&mut queue, &mut model, start, now_ms);
                    }
                }
            }
            prop_assert_eq!(queue.len(), model.pending.len());
            let earliest = model.pending.values().map(|&(_, due)| due).min();
            match queue.peek() {
                Some(key) => prop_assert!(
                    model.pending.values().any(|&(k, due)| k == key && Some(due) == earliest),
                    "peek named a value not due first"
                ),
                None => prop_assert!(earliest.is_none(), "peek of a queue with values"),
            }
        }
        timer.advance(Duration::from_millis(200)).unwrap();
        drain(&mut queue, &mut model, start, now_ms + 200);
        prop_assert!(queue.is_empty());
        prop_assert_eq!(timer.pending(), 0, "no timer left behind");
    }
}

/// Values with random delays through a queue on real reapers, awaited: each comes out
/// once, never before its deadline.
async fn await_all(timer: Timer) {
    let mut queue = DelayQueue::with_timer(&timer);
    let mut removed = Vec::new();
    for id in 0..200u64 {
        let key = queue.insert(id, Duration::from_millis(id * 7 % 30));
        if id.is_multiple_of(10) {
            removed.push(key);
        }
    }
    for key in removed {
        assert!(queue.try_remove(&key).is_some());
    }
    let mut seen = [false; 200];
    while let Some(expired) = queue.next_expired().await {
        assert!(Instant::now() >= expired.deadline(), "never early");
        let id = expired.into_inner() as usize;
        assert!(
            !seen[id] && !id.is_multiple_of(10),
            "once, and not when removed"
        );
        seen[id] = true;
    }
    assert_eq!(seen.iter().filter(|&&s| s).count(), 180);
}

#[test]
fn on_tokio_and_on_futures_executor() {
    let timer = common::on_tokio_and_futures_executor(await_all);
    assert_eq!(timer.pending(), 0);
}

#[cfg(feature = "stream")]
#[test]
fn a_queue_is_a_stream_of_its_expired_values() {
    use futures::StreamExt;
    let timer = Timer::builder().shards(1).build().unwrap();
    let mut queue = DelayQueue::with_timer(&timer);
    for id in [3u64, 1, 2] {
        queue.insert(id, Duration::from_millis(id * 5));
    }
    let ids: Vec<u64> = futures::executor::block_on(queue.map(|e| e.into_inner()).collect());
    assert_eq!(ids, [1, 2, 3]);
}

#[test]
fn huge_delays_are_far_deadlines_not_panics() {
    let timer = Timer::builder().shards(1).manual().build().unwrap();
    let mut queue = DelayQueue::with_timer(&timer);
    let key = queue.insert(1, Duration::MAX);
    let year = Duration::from_secs(365 * 86_400);
    assert!(queue.deadline(&key) > timer.now() + year);
    queue.reset(&key, Duration::MAX);
    assert!(queue.deadline(&key) > timer.now() + year);
}
