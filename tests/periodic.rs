//! Periodic timers: their spacing over many cycles on a manual timer, missed runs, cancel
//! (also from inside a run), panics, shutdown; and never early on the real clock.

use shardwheel::{Period, PeriodicError, Timer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

fn manual() -> Timer {
    Timer::builder().shards(1).manual().build().unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A closure that counts its runs, and the count.
fn counter() -> (Arc<AtomicU64>, impl FnMut() + Send + 'static) {
    let count = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&count);
    (count, move || {
        counted.fetch_add(1, Ordering::Relaxed);
    })
}

#[test]
fn a_fixed_rate_series_keeps_its_period_over_many_cycles() {
    let timer = manual();
    let (count, closure) = counter();
    let series = timer
        .schedule_periodic(ms(10), Period::FixedRate(ms(10)), closure)
        .unwrap();
    for elapsed in 1..=10_000u64 {
        timer.advance(ms(1)).unwrap();
        assert_eq!(
            count.load(Ordering::Relaxed),
            elapsed / 10,
            "at {elapsed} ms"
        );
    }
    assert_eq!(series.runs(), 1_000);
    assert_eq!(timer.pending(), 1, "one run pending at any time");
}

#[test]
fn fixed_rate_skips_missed_runs_and_stays_on_its_grid() {
    let timer = manual();
    let (count, closure) = counter();
    timer
        .schedule_periodic(ms(10), Period::FixedRate(ms(10)), closure)
        .unwrap();
    timer.advance(ms(55)).unwrap(); // due at 10; 20 to 50 are missed
    assert_eq!(count.load(Ordering::Relaxed), 1);
    timer.advance(ms(4)).unwrap(); // 59
    assert_eq!(count.load(Ordering::Relaxed), 1);
    timer.advance(ms(1)).unwrap(); // 60: on the grid
    assert_eq!(count.load(Ordering::Relaxed), 2);
}

#[test]
fn fixed_rate_burst_makes_missed_runs_up() {
    let timer = manual();
    let (count, closure) = counter();
    timer
        .schedule_periodic(ms(10), Period::FixedRateBurst(ms(10)), closure)
        .unwrap();
    timer.advance(ms(55)).unwrap();
    for _ in 0..10 {
        timer.advance(Duration::ZERO).unwrap();
    }
    assert_eq!(count.load(Ordering::Relaxed), 5, "10, 20, 30, 40 and 50");
    timer.advance(ms(5)).unwrap();
    assert_eq!(count.load(Ordering::Relaxed), 6, "then 60, on the grid");
}

#[test]
fn fixed_delay_counts_from_the_end_of_each_run() {
    let timer = manual();
    let (count, closure) = counter();
    timer
        .schedule_periodic(ms(10), Period::FixedDelay(ms(10)), closure)
        .unwrap();
    timer.advance(ms(15)).unwrap(); // runs late, at 15: the next is due at 25, not 20
    assert_eq!(count.load(Ordering::Relaxed), 1);
    timer.advance(ms(9)).unwrap();
    assert_eq!(count.load(Ordering::Relaxed), 1);
    timer.advance(ms(1)).unwrap();
    assert_eq!(count.load(Ordering::Relaxed), 2);
}

#[test]
fn cancel_stops_the_series_and_frees_its_timer_at_once() {
    let timer = manual();
    let (count, closure) = counter();
    let series = timer
        .schedule_periodic(ms(10), Period::FixedRate(ms(10)), closure)
        .unwrap();
    timer.advance(ms(30)).unwrap();
    let runs = count.load(Ordering::Relaxed);
    assert!(series.is_active());
    assert!(series.clone().cancel());
    assert!(!series.cancel(), "already stopped");
    assert!(!series.is_active());
    assert_eq!(timer.pending(), 0);
    timer.advance(ms(100)).unwrap();
    assert_eq!(count.load(Ordering::Relaxed), runs);
}

#[test]
fn a_series_cancelled_from_its_own_run_does_not_run_again() {
    let timer = manual();
    let handle: Arc<OnceLock<shardwheel::Periodic>> = Arc::default();
    let inner = Arc::clone(&handle);
    let runs = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&runs);
    let series = timer
        .schedule_periodic(ms(1), Period::FixedRate(ms(1)), move || {
            if counted.fetch_add(1, Ordering::Relaxed) == 2 {
                assert!(inner.get().unwrap().cancel());
            }
        })
        .unwrap();
    handle.set(series.clone()).unwrap();
    for _ in 0..20 {
        timer.advance(ms(1)).unwrap();
    }
    assert_eq!(runs.load(Ordering::Relaxed), 3);
    assert!(!series.is_active());
    assert_eq!(timer.pending(), 0);
}

#[test]
fn a_panicking_run_is_counted_and_the_series_goes_on() {
    let timer = manual();
    let runs = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&runs);
    let series = timer
        .schedule_periodic(ms(1), Period::FixedDelay(ms(1)), move || {
            if counted.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
                panic!("a failing heartbeat");
            }
        })
        .unwrap();
    for _ in 0..10 {
        timer.advance(ms(1)).unwrap();
    }
    assert_eq!(runs.load(Ordering::Relaxed), 10);
    assert_eq!(series.runs(), 10);
    assert_eq!(timer.panicked(), 5);
    assert!(series.is_active());
}

#[test]
fn shutdown_ends_a_series_and_nothing_is_left_behind() {
    let timer = manual();
    let (count, closure) = counter();
    let series = timer
        .schedule_periodic(ms(10), Period::FixedRate(ms(10)), closure)
        .unwrap();
    timer.advance(ms(10)).unwrap();
    drop(timer.shutdown());
    assert!(!series.is_active());
    assert_eq!(
        Arc::strong_count(&count),
        1,
        "the closure went with its unrun run"
    );
    let refused = timer.schedule_periodic(ms(1), Period::FixedRate(ms(1)), || {});
    assert_eq!(refused.unwrap_err(), PeriodicError::Shutdown);
}

#[test]
fn bad_periods_and_a_full_timer_are_errors() {
    let timer = Timer::builder()
        .shards(1)
        .manual()
        .max_pending(1)
        .build()
        .unwrap();
    let zero = timer.schedule_periodic(ms(1), Period::FixedDelay(Duration::ZERO), || {});
    assert_eq!(zero.unwrap_err(), PeriodicError::ZeroPeriod);
    timer.schedule(ms(100), || {}).unwrap();
    let full = timer.schedule_periodic(ms(1), Period::FixedRate(ms(1)), || {});
    assert_eq!(full.unwrap_err(), PeriodicError::Full);
}

#[test]
fn runs_on_the_real_clock_never_come_early() {
    let timer = Timer::builder().shards(2).build().unwrap();
    let start = Instant::now();
    let times = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&times);
    let series = timer
        .schedule_periodic(ms(2), Period::FixedRate(ms(3)), move || {
            recorded.lock().unwrap().push(start.elapsed());
        })
        .unwrap();
    while series.runs() < 30 {
        std::thread::sleep(ms(1));
    }
    assert!(series.cancel());
    let times = times.lock().unwrap();
    // Run k is due at 2 + 3k ms at the earliest; skipped runs only push it later.
    for (k, at) in times.iter().enumerate() {
        assert!(*at >= ms(2 + 3 * k as u64), "run {k} at {at:?}");
    }
    assert_eq!(timer.pending(), 0);
}
