//! The purgatory: exactly-once completion with events from several threads racing expiry,
//! purging of completed and expired operations, and the edges (complete at once, full,
//! shutdown).

use shardwheel::ScheduleError;
use shardwheel::Timer;
use shardwheel::purgatory::{DelayedOperation, Purgatory};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// What happened to each operation, by id.
struct Ledger {
    completions: Vec<AtomicU32>,
    expirations: Vec<AtomicU32>,
    ready: Vec<AtomicBool>,
}

impl Ledger {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Ledger {
            completions: (0..n).map(|_| AtomicU32::new(0)).collect(),
            expirations: (0..n).map(|_| AtomicU32::new(0)).collect(),
            ready: (0..n).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    fn count(counters: &[AtomicU32]) -> u32 {
        counters.iter().map(|c| c.load(Ordering::SeqCst)).sum()
    }
}

struct Op {
    id: usize,
    delay: Duration,
    ledger: Arc<Ledger>,
}

impl DelayedOperation for Op {
    fn delay(&self) -> Duration {
        self.delay
    }

    fn try_complete(&self) -> bool {
        self.ledger.ready[self.id].load(Ordering::SeqCst)
    }

    fn on_complete(&self) {
        self.ledger.completions[self.id].fetch_add(1, Ordering::SeqCst);
    }

    fn on_expiration(&self) {
        self.ledger.expirations[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

fn purgatory(purge_interval: usize) -> Purgatory<u32, Op> {
    Purgatory::with_purge_interval(Timer::builder().shards(2), purge_interval).unwrap()
}

fn wait_until(done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn events_from_several_threads_race_expiry_and_each_operation_completes_once() {
    const OPS: usize = 20_000;
    const KEYS: u32 = 64;
    let ledger = Ledger::new(OPS);
    let purgatory = Arc::new(purgatory(500));
    let key_of = |id: usize| [id as u32 % KEYS, KEYS + id as u32 % 7];
    // Two threads watch operations, half with delays of 0 to 19 ms and half that only an
    // event can complete in time (10 minutes); two others make them ready and announce it
    // under one of their keys, racing their watching and their expiry.
    let watchers: Vec<_> = (0..2)
        .map(|half| {
            let (purgatory, ledger) = (Arc::clone(&purgatory), Arc::clone(&ledger));
            thread::spawn(move || {
                for id in (half..OPS).step_by(2) {
                    let delay = match id % 4 {
                        0 | 1 => Duration::from_millis(id as u64 % 20),
                        _ => Duration::from_secs(600),
                    };
                    let op = Op {
                        id,
                        delay,
                        ledger: Arc::clone(&ledger),
                    };
                    purgatory.try_complete_else_watch(op, key_of(id)).unwrap();
                }
            })
        })
        .collect();
    // Each event thread announces every operation, under its own one of the two keys, so
    // that the two race each other too.
    let events: Vec<_> = (0..2)
        .map(|side| {
            let (purgatory, ledger) = (Arc::clone(&purgatory), Arc::clone(&ledger));
            thread::spawn(move || {
                for id in 0..OPS {
                    ledger.ready[id].store(true, Ordering::SeqCst);
                    purgatory.check_and_complete(&key_of(id)[side]);
                }
            })
        })
        .collect();
    for thread in watchers.into_iter().chain(events) {
        thread.join().unwrap();
    }
    wait_until(|| purgatory.delayed() == 0);
    for id in 0..OPS {
        assert_eq!(
            ledger.completions[id].load(Ordering::SeqCst),
            1,
            "operation {id}"
        );
        assert!(ledger.expirations[id].load(Ordering::SeqCst) <= 1);
    }
    for id in (0..OPS).filter(|id| id % 4 >= 2) {
        assert_eq!(
            ledger.expirations[id].load(Ordering::SeqCst),
            0,
            "operation {id}"
        );
    }
    purgatory.purge();
    assert_eq!(purgatory.watched(), 0, "nothing left in the watcher lists");
}

#[test]
fn an_operation_completed_under_one_key_is_purged_from_the_others() {
    let ledger = Ledger::new(100);
    let purgatory = purgatory(10);
    for id in 0..100 {
        let op = Op {
            id,
            delay: Duration::from_secs(600),
            ledger: Arc::clone(&ledger),
        };
        assert!(!purgatory.try_complete_else_watch(op, [1, 2, 3]).unwrap());
    }
    assert_eq!(purgatory.watched(), 300);
    for ready in &ledger.ready {
        ready.store(true, Ordering::SeqCst);
    }
    assert_eq!(purgatory.check_and_complete(&1), 100);
    assert_eq!(purgatory.delayed(), 0, "their timers are cancelled");
    assert_eq!(
        purgatory.watched(),
        0,
        "lists 2 and 3 were purged, list 1 emptied"
    );
    assert_eq!(purgatory.check_and_complete(&2), 0);
    assert_eq!(Ledger::count(&ledger.expirations), 0);
}

#[test]
fn expired_operations_do_not_pile_up_in_watcher_lists() {
    let purgatory = purgatory(100);
    let ledger = Ledger::new(10_000);
    let mut peak = 0;
    for round in 0..10 {
        for id in round * 1_000..(round + 1) * 1_000 {
            let op = Op {
                id,
                delay: Duration::from_millis(1),
                ledger: Arc::clone(&ledger),
            };
            purgatory.try_complete_else_watch(op, [id as u32]).unwrap();
        }
        peak = peak.max(purgatory.watched());
        wait_until(|| purgatory.delayed() == 0);
    }
    // Each round's keys are new and never checked: only purges take their lists away.
    assert!(peak <= 1_000 + 100 + 1_000, "watched peaked at {peak}");
    assert_eq!(Ledger::count(&ledger.completions), 10_000);
    assert_eq!(Ledger::count(&ledger.expirations), 10_000);
}

#[test]
fn an_operation_that_can_complete_at_once_needs_no_timer_nor_watch() {
    let ledger = Ledger::new(1);
    ledger.ready[0].store(true, Ordering::SeqCst);
    let purgatory = purgatory(10);
    let op = Op {
        id: 0,
        delay: Duration::from_secs(1),
        ledger: Arc::clone(&ledger),
    };
    assert!(purgatory.try_complete_else_watch(op, [7]).unwrap());
    assert_eq!((purgatory.delayed(), purgatory.watched()), (0, 0));
    assert_eq!(ledger.completions[0].load(Ordering::SeqCst), 1);
}

#[test]
fn a_full_timer_hands_the_operation_back_unwatched() {
    let ledger = Ledger::new(2);
    let purgatory: Purgatory<u32, Op> =
        Purgatory::new(Timer::builder().shards(1).max_pending(1)).unwrap();
    let op = |id| Op {
        id,
        delay: Duration::from_secs(60),
        ledger: Arc::clone(&ledger),
    };
    assert!(!purgatory.try_complete_else_watch(op(0), [1]).unwrap());
    let Err(ScheduleError::Full(back)) = purgatory.try_complete_else_watch(op(1), [1]) else {
        panic!("expected Full");
    };
    assert_eq!(back.id, 1);
    assert_eq!(purgatory.watched(), 1);
    let waiting = purgatory.shutdown();
    assert_eq!(waiting.iter().map(|op| op.id).collect::<Vec<_>>(), [0]);
    assert_eq!(
        Ledger::count(&ledger.completions),
        0,
        "handed back, not completed"
    );
}

/// Its condition comes true just after its first check, before it is watched: the event
/// that made it true found no one to complete.
struct ReadyJustTooLate {
    ready: AtomicBool,
    completions: Arc<AtomicU32>,
}

impl DelayedOperation for ReadyJustTooLate {
    fn delay(&self) -> Duration {
        Duration::from_secs(600)
    }

    fn try_complete(&self) -> bool {
        self.ready.swap(true, Ordering::SeqCst)
    }

    fn on_complete(&self) {
        self.completions.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn an_event_between_the_first_check_and_the_watching_is_not_missed() {
    let purgatory: Purgatory<u32, ReadyJustTooLate> =
        Purgatory::new(Timer::builder().shards(1)).unwrap();
    let completions = Arc::new(AtomicU32::new(0));
    let op = ReadyJustTooLate {
        ready: AtomicBool::new(false),
        completions: Arc::clone(&completions),
    };
    assert!(purgatory.try_complete_else_watch(op, [1]).unwrap());
    assert_eq!(completions.load(Ordering::SeqCst), 1);
    assert_eq!(purgatory.delayed(), 0, "its timer is cancelled");
}

// A manual timer drives expiry: with real time passing (100 ms) and none advanced,
// nothing expires; each operation expires when the advanced time reaches its delay.
#[test]
fn a_purgatory_runs_on_a_manual_timer() {
    let ledger = Ledger::new(2);
    let purgatory: Purgatory<u32, Op> =
        Purgatory::new(Timer::builder().shards(1).manual()).unwrap();
    for (id, delay) in [(0, 30), (1, 60)] {
        let op = Op {
            id,
            delay: Duration::from_millis(delay),
            ledger: Arc::clone(&ledger),
        };
        assert!(!purgatory.try_complete_else_watch(op, [7]).unwrap());
    }
    thread::sleep(Duration::from_millis(100));
    purgatory.advance(Duration::from_millis(29)).unwrap();
    assert_eq!(Ledger::count(&ledger.expirations), 0);
    purgatory.advance(Duration::from_millis(1)).unwrap();
    assert_eq!(ledger.expirations[0].load(Ordering::SeqCst), 1);
    assert_eq!(purgatory.delayed(), 1);
    purgatory.advance(Duration::from_millis(30)).unwrap();
    assert_eq!(Ledger::count(&ledger.expirations), 2);
    assert_eq!(purgatory.delayed(), 0);
}

/// Op `id` of `ledger`, due to expire in `delay_ms`, ready to complete if `ready`.
fn op(ledger: &Arc<Ledger>, id: usize, delay_ms: u64, ready: bool) -> Op {
    ledger.ready[id].store(ready, Ordering::SeqCst);
    Op {
        id,
        delay: Duration::from_millis(delay_ms),
        ledger: Arc::clone(ledger),
    }
}

#[test]
fn the_counts_tell_completions_expiries_purges_and_what_is_held() {
    let ledger = Ledger::new(6);
    let purgatory: Purgatory<u32, Op> =
        Purgatory::with_purge_interval(Timer::builder().shards(1).manual(), 1_000).unwrap();
    assert!(
        purgatory
            .try_complete_else_watch(op(&ledger, 0, 10, true), [1])
            .unwrap()
    );
    for id in 1..6 {
        let watched =
            purgatory.try_complete_else_watch(op(&ledger, id, 10 * id as u64, false), [1, 2]);
        assert!(!watched.unwrap());
    }
    let counts = purgatory.counts();
    assert_eq!((counts.delayed, counts.watched), (5, 10));
    assert_eq!((counts.completed, counts.expired, counts.purges), (1, 0, 0));

    for id in [1, 2] {
        ledger.ready[id].store(true, Ordering::SeqCst);
    }
    assert_eq!(purgatory.check_and_complete(&1), 2);
    purgatory.advance(Duration::from_millis(40)).unwrap(); // 3 and 4 expire
    let counts = purgatory.counts();
    assert_eq!(
        (counts.completed, counts.expired, counts.delayed),
        (3, 2, 1)
    );
    // Key 1's list lost the two completed; key 2's holds them all until a purge.
    assert_eq!(counts.watched, 3 + 5);
    purgatory.purge();
    let counts = purgatory.counts();
    assert_eq!((counts.watched, counts.purges), (2, 1));
    assert_eq!(Ledger::count(&ledger.completions), 5);
}
