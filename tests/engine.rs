//! The `Timer` engine from the outside: firing, cancelling from other threads, shutdown,
//! bounds, panics, and a stress test that counts every timer.

mod common;

use common::{timer, wait_for};
use shardwheel::{BuildError, ScheduleError, StaleHandle, Timer};
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn every_timer_fires_once_and_never_before_its_deadline() {
    // Exact deadlines and tick-rounded ones, at the default tick and at a 10 us one, and
    // with a spin before each deadline.
    let (ms, us) = (Duration::from_millis(1), Duration::from_micros(10));
    for (exact, tick, spin) in [
        (true, ms, Duration::ZERO),
        (false, ms, Duration::ZERO),
        (true, us, Duration::ZERO),
        (false, us, Duration::ZERO),
        (true, ms, Duration::from_micros(200)),
    ] {
        let timer = Timer::builder()
            .shards(2)
            .exact_deadlines(exact)
            .tick(tick)
            .spin_before_deadline(spin)
            .build()
            .unwrap();
        fires_every_timer_once_never_early(&timer);
    }
}

fn fires_every_timer_once_never_early(timer: &Timer) {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    for i in 0..300u64 {
        let delay = Duration::from_micros(i * 97 % 40_000);
        let tx = tx.clone();
        let due = start + delay;
        timer
            .schedule_at(due, move || tx.send((i, due, Instant::now())).unwrap())
            .unwrap();
    }
    let mut seen = [false; 300];
    for _ in 0..300 {
        let (i, due, ran) = rx.recv_timeout(Duration::from_secs(10)).expect("fired");
        assert!(ran >= due, "timer {i} ran {:?} early", due - ran);
        assert!(
            !std::mem::replace(&mut seen[i as usize], true),
            "twice: {i}"
        );
    }
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
    assert_eq!(timer.pending(), 0);
}

#[test]
fn a_deadline_already_passed_fires_at_once() {
    let timer = timer(1);
    let (tx, rx) = mpsc::channel();
    let past = Instant::now();
    thread::sleep(Duration::from_millis(2));
    timer
        .schedule_at(past, move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(Duration::from_secs(5)).expect("fired");
}

#[test]
fn a_cancelled_timer_never_runs_and_its_handle_goes_stale() {
    let timer = timer(1);
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    let handle = timer
        .schedule(Duration::from_millis(20), move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    assert_eq!(timer.pending(), 1);
    // Cancelled from another thread.
    let cancelled = thread::scope(|s| s.spawn(|| timer.cancel(handle)).join().unwrap());
    assert!(cancelled);
    assert!(!timer.cancel(handle), "second cancel");
    assert_eq!(timer.pending(), 0);
    thread::sleep(Duration::from_millis(60));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[test]
fn handles_of_fired_timers_and_of_other_timers_are_rejected() {
    let first = timer(1);
    let second = timer(1);
    let (tx, rx) = mpsc::channel();
    let fired = first
        .schedule(Duration::ZERO, move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(!first.cancel(fired));
    // The slot is reused by the next timer; the old handle must not cancel it.
    let next = first.schedule(Duration::from_secs(60), || {}).unwrap();
    assert!(!first.cancel(fired));
    let foreign = second.schedule(Duration::from_secs(60), || {}).unwrap();
    assert!(!first.cancel(foreign));
    assert!(first.cancel(next));
    assert!(second.cancel(foreign));
}

#[test]
fn a_panicking_callback_is_counted_and_the_shard_goes_on() {
    let timer = timer(1);
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(Duration::ZERO, || panic!("callback panics"))
        .unwrap();
    timer
        .schedule(Duration::from_millis(5), move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(Duration::from_secs(5))
        .expect("later timer fired");
    assert_eq!(timer.panicked(), 1);
}

#[test]
fn shutdown_hands_back_unfired_callbacks_and_refuses_new_ones() {
    let timer = timer(2);
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..50 {
        let ran = Arc::clone(&ran);
        timer
            .schedule(Duration::from_secs(600), move || {
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
    }
    let unfired = timer.shutdown();
    assert_eq!(unfired.len(), 50);
    for callback in unfired {
        callback.run();
    }
    assert_eq!(ran.load(Ordering::SeqCst), 50);
    let refused = timer.schedule(Duration::ZERO, || {});
    assert!(matches!(refused, Err(ScheduleError::Shutdown(_))));
    assert!(timer.shutdown().is_empty());
}

#[test]
fn max_pending_is_an_error_not_a_drop() {
    let timer = Timer::builder().shards(1).max_pending(3).build().unwrap();
    let handles: Vec<_> = (0..3)
        .map(|_| timer.schedule(Duration::from_secs(60), || {}).unwrap())
        .collect();
    let (tx, rx) = mpsc::channel();
    let refused = timer.schedule(Duration::ZERO, move || tx.send(()).unwrap());
    let Err(ScheduleError::Full(callback)) = refused else {
        panic!("expected Full");
    };
    callback.run(); // handed back intact
    rx.recv().unwrap();
    assert!(timer.cancel(handles[0]));
    assert!(timer.schedule(Duration::from_secs(60), || {}).is_ok());
}

#[test]
fn bad_configurations_are_errors() {
    assert!(matches!(
        Timer::builder().shards(0).build(),
        Err(BuildError::Shards(0))
    ));
    assert!(matches!(
        Timer::builder().tick(Duration::ZERO).build(),
        Err(BuildError::ZeroTick)
    ));
    // A handle names its shard in 16 bits: more shards than that would alias.
    assert!(matches!(
        Timer::builder().manual().shards(65_537).build(),
        Err(BuildError::Shards(65_537))
    ));
    // Huge delays are clamped, not a panic.
    let timer = timer(1);
    let handle = timer.schedule(Duration::MAX, || {}).unwrap();
    assert!(timer.cancel(handle));
}

#[test]
fn producers_and_cancellers_race_and_every_timer_is_counted_once() {
    const PER_PRODUCER: usize = 100_000;
    const PRODUCERS: usize = 2;
    let timer = Arc::new(timer(2));
    let runs: Arc<Vec<AtomicU8>> = Arc::new(
        (0..PER_PRODUCER * PRODUCERS)
            .map(|_| AtomicU8::new(0))
            .collect(),
    );
    let cancelled = Arc::new(Mutex::new(Vec::new()));
    thread::scope(|s| {
        for producer in 0..PRODUCERS {
            let (timer, runs, cancelled) = (&timer, &runs, &cancelled);
            s.spawn(move || {
                let mut seed = producer as u64 + 1;
                let mut mine = Vec::new();
                for i in 0..PER_PRODUCER {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let id = producer * PER_PRODUCER + i;
                    let runs = Arc::clone(runs);
                    let delay = Duration::from_micros(seed % 20_000);
                    let handle = timer
                        .schedule(delay, move || {
                            runs[id].fetch_add(1, Ordering::Relaxed);
                        })
                        .unwrap();
                    // Cancel about half, some at once, some a little later: these race
                    // with the reaper firing them.
                    if seed.is_multiple_of(2) && timer.cancel(handle) {
                        mine.push(id);
                    }
                }
                cancelled.lock().unwrap().extend(mine);
            });
        }
    });
    let cancelled = cancelled.lock().unwrap().clone();
    let expected_fired = PER_PRODUCER * PRODUCERS - cancelled.len();
    let fired = || {
        runs.iter()
            .filter(|r| r.load(Ordering::Relaxed) > 0)
            .count()
    };
    assert!(
        wait_for(Duration::from_secs(20), || fired() == expected_fired),
        "fired {} of {expected_fired}",
        fired()
    );
    for id in &cancelled {
        assert_eq!(runs[*id].load(Ordering::Relaxed), 0, "cancelled {id} ran");
    }
    assert!(
        runs.iter().all(|r| r.load(Ordering::Relaxed) <= 1),
        "a timer ran twice"
    );
    assert_eq!(timer.pending(), 0);
    assert!(timer.shutdown().is_empty());
}

/// Panics when dropped: a callback that captures it panics when the reaper drops it unrun.
struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("payload drop panics");
    }
}

#[test]
fn a_cancelled_callback_whose_drop_panics_is_dropped_once_and_the_shard_goes_on() {
    let timer = timer(1);
    let guard = PanicOnDrop;
    let handle = timer
        .schedule(Duration::from_secs(60), move || drop(guard))
        .unwrap();
    assert!(timer.cancel(handle));
    assert!(wait_for(Duration::from_secs(5), || timer.panicked() == 1));
    let (tx, rx) = mpsc::channel();
    timer
        .schedule(Duration::ZERO, move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the reaper survived the panicking drop");
    assert!(timer.shutdown().is_empty());
    assert_eq!(timer.panicked(), 1);
}

#[test]
fn a_reset_timer_fires_at_its_new_deadline_not_its_old_one() {
    let timer = timer(1);
    let (tx, rx) = mpsc::channel();
    let later = Instant::now() + Duration::from_millis(150);
    let handle = timer
        .schedule(Duration::from_millis(5), move || {
            tx.send(Instant::now()).unwrap()
        })
        .unwrap();
    timer.reset_at(handle, later).unwrap();
    let ran = rx.recv_timeout(Duration::from_secs(5)).expect("fired");
    assert!(
        ran >= later,
        "fired {:?} before its new deadline",
        later - ran
    );

    // And earlier: a timer a minute away, reset to now, runs now.
    let (tx, rx) = mpsc::channel();
    let handle = timer
        .schedule(Duration::from_secs(60), move || tx.send(()).unwrap())
        .unwrap();
    timer.reset(handle, Duration::ZERO).unwrap();
    rx.recv_timeout(Duration::from_secs(5))
        .expect("fired early");
    assert_eq!(timer.pending(), 0);
}

#[test]
fn resetting_a_fired_cancelled_or_foreign_timer_is_an_error() {
    let timer = timer(1);
    let other = self::timer(1);
    let (tx, rx) = mpsc::channel();
    let fired = timer
        .schedule(Duration::ZERO, move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(wait_for(Duration::from_secs(5), || timer.pending() == 0));
    assert_eq!(timer.reset(fired, Duration::ZERO), Err(StaleHandle));
    let cancelled = timer.schedule(Duration::from_secs(60), || {}).unwrap();
    assert!(timer.cancel(cancelled));
    assert_eq!(timer.reset(cancelled, Duration::ZERO), Err(StaleHandle));
    let foreign = other.schedule(Duration::from_secs(60), || {}).unwrap();
    assert_eq!(timer.reset(foreign, Duration::ZERO), Err(StaleHandle));
    assert_eq!(other.pending(), 1, "the other timer's timer was left alone");
    // Reset keeps the handle: it still cancels.
    let kept = timer.schedule(Duration::from_secs(60), || {}).unwrap();
    timer.reset(kept, Duration::from_secs(30)).unwrap();
    assert!(timer.cancel(kept));
}

#[test]
fn a_payload_timer_hands_unfired_payloads_back_at_shutdown() {
    let fired = Arc::new(AtomicU64::new(0));
    let sum = Arc::clone(&fired);
    let timer = Timer::builder()
        .shards(2)
        .build_with(move |value: u64| {
            sum.fetch_add(value, Ordering::Relaxed);
        })
        .unwrap();
    timer.insert(Duration::ZERO, 1).unwrap();
    let moved = timer.insert(Duration::from_secs(60), 10).unwrap();
    timer.insert(Duration::from_secs(60), 100).unwrap();
    timer.reset(moved, Duration::ZERO).unwrap();
    assert!(wait_for(Duration::from_secs(5), || timer.pending() == 1));
    let mut unfired = timer.shutdown();
    unfired.sort_unstable();
    assert_eq!(unfired, [100]);
    assert_eq!(fired.load(Ordering::Relaxed), 11);
    assert!(matches!(
        timer.insert(Duration::ZERO, 5),
        Err(ScheduleError::Shutdown(5))
    ));
}

/// What the reset stress test knows of one timer.
#[derive(Default)]
struct Record {
    runs: AtomicU8,
    /// Nanoseconds from the test's start: when it ran, and the deadline it must not beat.
    ran_at: AtomicU64,
    not_before: AtomicU64,
    cancelled: AtomicU8,
}

#[test]
fn schedules_resets_and_cancels_from_two_threads_keep_every_timer_exactly_once() {
    const PER_PRODUCER: usize = 500_000;
    const PRODUCERS: usize = 2;
    let start = Instant::now();
    let records: Arc<Vec<Record>> = Arc::new(
        (0..PER_PRODUCER * PRODUCERS)
            .map(|_| Record::default())
            .collect(),
    );
    let seen = Arc::clone(&records);
    let timer = Timer::builder()
        .shards(2)
        .build_with(move |id: u32| {
            let record = &seen[id as usize];
            record.runs.fetch_add(1, Ordering::Relaxed);
            let ran_at = start.elapsed().as_nanos() as u64;
            record.ran_at.store(ran_at, Ordering::Relaxed);
        })
        .unwrap();
    let resets = AtomicU64::new(0);
    thread::scope(|s| {
        for producer in 0..PRODUCERS {
            let (timer, records, resets) = (&timer, &records, &resets);
            s.spawn(move || {
                let mut seed = 0x9e37_79b9 + producer as u64;
                let mut random = move |bound: u64| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed % bound
                };
                let mut recent = std::collections::VecDeque::new();
                for i in 0..PER_PRODUCER {
                    let id = producer * PER_PRODUCER + i;
                    let deadline = Duration::from_micros(random(20_000));
                    records[id]
                        .not_before
                        .store(deadline.as_nanos() as u64, Ordering::Relaxed);
                    let handle = timer.insert_at(start + deadline, id as u32).unwrap();
                    recent.push_back((id, handle));
                    if recent.len() > 64 {
                        recent.pop_front();
                    }
                    // Act on a recent timer, racing the reaper that may be firing it.
                    let (other, handle) = recent[random(recent.len() as u64) as usize];
                    let action = random(4);
                    if action == 0 && timer.cancel(handle) {
                        records[other].cancelled.store(1, Ordering::Relaxed);
                    } else if action < 3 {
                        let deadline = start.elapsed() + Duration::from_micros(random(20_000));
                        if timer.reset_at(handle, start + deadline).is_ok() {
                            resets.fetch_add(1, Ordering::Relaxed);
                            records[other]
                                .not_before
                                .store(deadline.as_nanos() as u64, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    assert!(
        wait_for(Duration::from_secs(30), || timer.pending() == 0),
        "{} timers still pending",
        timer.pending()
    );
    assert!(timer.shutdown().is_empty());
    // The counters add up: every timer was taken in, and fired or was cancelled.
    let stats = timer.stats();
    let cancelled = records
        .iter()
        .filter(|r| r.cancelled.load(Ordering::Relaxed) == 1)
        .count() as u64;
    let total = (PER_PRODUCER * PRODUCERS) as u64;
    assert_eq!(stats.scheduled, total);
    assert_eq!(
        (stats.fired, stats.cancelled),
        (total - cancelled, cancelled)
    );
    assert_eq!(stats.reset, resets.load(Ordering::Relaxed));
    assert_eq!(stats.pending, 0);
    for (id, record) in records.iter().enumerate() {
        let runs = record.runs.load(Ordering::Relaxed);
        if record.cancelled.load(Ordering::Relaxed) == 1 {
            assert_eq!(runs, 0, "cancelled timer {id} ran");
        } else {
            assert_eq!(runs, 1, "timer {id} ran {runs} times");
            let (ran, due) = (
                record.ran_at.load(Ordering::Relaxed),
                record.not_before.load(Ordering::Relaxed),
            );
            assert!(ran >= due, "timer {id} ran {} ns early", due - ran);
        }
    }
}

#[test]
fn timers_cancelled_long_before_their_deadline_are_always_still_pending() {
    // Request timeouts from two threads for a second and a half: nine in ten are cancelled
    // a random thousand operations after they were scheduled, seconds before their
    // deadline, and the rest fire meanwhile. Every cancel must find its timer, and nothing may fire
    // early, whatever backlog the reapers work through meanwhile.
    let early = Arc::new(AtomicUsize::new(0));
    let fired = Arc::new(AtomicUsize::new(0));
    let (seen_early, seen_fired) = (Arc::clone(&early), Arc::clone(&fired));
    let timer = Timer::builder()
        .shards(2)
        .build_with(move |deadline: Instant| {
            if Instant::now() < deadline {
                seen_early.fetch_add(1, Ordering::Relaxed);
            }
            seen_fired.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    let start = Instant::now();
    let to_fire = AtomicUsize::new(0);
    thread::scope(|s| {
        for producer in 0..2u64 {
            let (timer, to_fire) = (&timer, &to_fire);
            s.spawn(move || {
                let mut seed = 0x2545_f491_4f6c_dd1d ^ producer;
                let mut ring = vec![None; 1024];
                while start.elapsed() < Duration::from_millis(1_500) {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Those left to fire are due within 200 ms; those to be cancelled in 3 to
                    // 5 s, beyond any stall of this thread while the test runs.
                    let fires = seed % 10 == 0;
                    let delay = if fires {
                        20 + seed % 200
                    } else {
                        3_000 + seed % 2_000
                    };
                    let deadline = Instant::now() + Duration::from_millis(delay);
                    let handle = timer.insert_at(deadline, deadline).unwrap();
                    if fires {
                        to_fire.fetch_add(1, Ordering::Relaxed);
                    } else if let Some(old) = ring[(seed >> 20) as usize % 1024].replace(handle) {
                        assert!(timer.cancel(old), "a pending timer was not found");
                    }
                }
                for handle in ring.into_iter().flatten() {
                    assert!(timer.cancel(handle), "a pending timer was not found");
                }
            });
        }
    });
    let expected = to_fire.load(Ordering::Relaxed);
    assert!(wait_for(Duration::from_secs(10), || fired
        .load(Ordering::Relaxed)
        == expected));
    assert_eq!(timer.pending(), 0);
    assert!(timer.shutdown().is_empty());
    assert_eq!(early.load(Ordering::Relaxed), 0, "timers fired early");
}

// A thread that schedules a timer due in ten seconds and cancels it, again and again (a
// request timeout that is never needed), used to wake the reaper some 300 times in
// 100,000: each time its wheel was empty, the next timer's deadline was before its plan
// (sleep until woken). The reaper now plans to wake within a second in any case, so the
// timers wait in the thread's batch without waking it, and none of them reaches it.
#[test]
fn short_lived_timers_due_far_ahead_do_not_wake_the_reaper() {
    let timer = timer(1);
    for _ in 0..100_000 {
        let handle = timer.schedule(Duration::from_secs(10), || {}).unwrap();
        assert!(timer.cancel(handle));
    }
    let stats = timer.stats();
    assert_eq!((stats.scheduled, stats.cancelled), (100_000, 100_000));
    assert!(
        stats.passes < 50,
        "{} reaper passes for 100,000 timers never due",
        stats.passes
    );
    assert!(
        stats.slots <= 64,
        "{} slots for one timer at a time",
        stats.slots
    );
}

/// Counts its drops: a callback that captures it counts when it is dropped, run or not.
struct CountDrop(Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A manual timer's `advance` takes in every cancel made since the last one, whether or
/// not time moved: those of timers already handed to the reaper, which wait in the
/// cancelling thread's batch (the 10 ms tidy interval of a running timer's reaper does
/// not hold them there).
#[test]
fn a_manual_timers_advance_drops_every_payload_cancelled_since_the_last() {
    let timer = Timer::builder().shards(1).manual().build().unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let guarded = |delay_ms| {
        let guard = CountDrop(Arc::clone(&dropped));
        timer
            .schedule(Duration::from_millis(delay_ms), move || drop(guard))
            .unwrap()
    };
    guarded(5);
    let (second, third) = (guarded(100), guarded(100));
    // The first is due: the reaper takes the thread's batch in, all three.
    timer.advance(Duration::from_millis(5)).unwrap();
    assert_eq!(dropped.load(Ordering::SeqCst), 1, "the first ran");
    for (handle, drops) in [(second, 2), (third, 3)] {
        assert!(timer.cancel(handle));
        timer.advance(Duration::ZERO).unwrap();
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            drops,
            "dropped at the advance"
        );
    }
    assert_eq!(timer.pending(), 0);
}
