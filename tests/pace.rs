//! Keeping a reaper in pace under load: a producer yields to a reaper that is awake and
//! behind by a backlog, or that waits for the core the producer runs on, and counts it
//! (`Counts::yielded`), and a reaper never yields to itself; a reaper whose deadlines come
//! in a dense stream wakes once a nap rather than for each, and one woken early for a
//! timer due far ahead is not woken again for each like it.

use shardwheel::Timer;
use std::sync::mpsc;
use std::time::Duration;

/// Timers a stage holds before its thread hands them over as one batch, which makes a
/// backlog (the crate's `STAGE_LEN`, documented on `Timer`).
const BATCH: usize = 4096;
const WAIT: Duration = Duration::from_secs(10);

#[test]
fn a_producer_yields_to_its_reaper_while_it_is_behind() {
    // Unpinned: a producer looks for a reaper waiting for its core only where reapers
    // are pinned, so the backlog's yields are the only ones.
    let timer = Timer::builder()
        .shards(1)
        .pin_threads(false)
        .build()
        .unwrap();
    let release = hold_reaper(&timer);
    for _ in 0..2 * BATCH {
        timer.schedule(Duration::from_secs(60), || {}).unwrap();
    }
    assert_eq!(
        timer.counts().yielded,
        2,
        "one yield per batch handed over to the busy reaper"
    );
    release.send(()).unwrap();
    assert_eq!(timer.shutdown().len(), 2 * BATCH);
}

#[test]
fn a_reaper_scheduling_from_a_callback_does_not_yield_to_itself() {
    let timer = Timer::builder().shards(1).build().unwrap();
    let (done, done_rx) = mpsc::channel();
    let inner = timer.clone();
    timer
        .schedule(Duration::ZERO, move || {
            for _ in 0..2 * BATCH {
                inner.schedule(Duration::from_secs(60), || {}).unwrap();
            }
            done.send(inner.counts().yielded).unwrap();
        })
        .unwrap();
    assert_eq!(done_rx.recv_timeout(WAIT).unwrap(), 0);
    assert_eq!(timer.shutdown().len(), 2 * BATCH);
}

/// Keeps a 1-shard timer's reaper awake in a callback (so that it counts as waiting for
/// the core it started its pass on), and returns the channel that releases it.
fn hold_reaper(timer: &Timer) -> mpsc::Sender<()> {
    let (started, started_rx) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    timer
        .schedule(Duration::ZERO, move || {
            started.send(()).unwrap();
            release_rx.recv().unwrap();
        })
        .unwrap();
    started_rx.recv_timeout(WAIT).unwrap();
    release
}

#[test]
fn a_producer_on_the_core_of_an_awake_reaper_yields_to_it_and_one_elsewhere_does_not() {
    let cores = core_affinity::get_core_ids().unwrap();
    // A pinned 1-shard timer's reaper runs on the first core.
    let timer = Timer::builder().shards(1).build().unwrap();
    let release = hold_reaper(&timer);
    // Fewer timers than make a backlog, so the yields are the look's.
    let mut scheduled = 0;
    let mut schedule = || {
        for _ in 0..BATCH / 4 {
            timer.schedule(Duration::from_secs(60), || {}).unwrap();
        }
        scheduled += BATCH / 4;
        timer.counts().yielded
    };
    assert!(core_affinity::set_for_current(cores[0]));
    let yielded = schedule();
    assert!(yielded > 0, "a producer on the reaper's core yields to it");
    if let Some(&other) = cores.get(1) {
        assert!(core_affinity::set_for_current(other));
        assert_eq!(schedule(), yielded, "a producer on another core does not");
    }
    release.send(()).unwrap();
    assert_eq!(timer.shutdown().len(), scheduled);
}

#[test]
fn a_dense_stream_of_deadlines_fires_in_naps_not_a_wake_up_each() {
    const TIMERS: u32 = 2_000;
    let timer = Timer::builder().shards(1).build().unwrap();
    let (fired, fired_rx) = mpsc::channel();
    let start = std::time::Instant::now() + Duration::from_millis(50);
    // One timer due every 20 us for 40 ms.
    for i in 0..TIMERS {
        let fired = fired.clone();
        let at = start + Duration::from_micros(20 * u64::from(i));
        timer
            .schedule_at(at, move || fired.send(()).unwrap())
            .unwrap();
    }
    let passes = timer.counts().passes;
    for _ in 0..TIMERS {
        fired_rx.recv_timeout(WAIT).unwrap();
    }
    // A nap is 200 us: some 200 passes, where a wake-up for every timer or two made
    // over a thousand.
    let passes = timer.counts().passes - passes;
    assert!(
        passes < 500,
        "{passes} passes for 40 ms of timers due 20 us apart"
    );
}

#[test]
fn timers_due_far_ahead_and_cancelled_soon_wake_the_reaper_once_not_one_each() {
    const TIMERS: u32 = 15;
    let timer = Timer::builder().shards(1).build().unwrap();
    // Idle, the reaper plans to sleep a second.
    std::thread::sleep(Duration::from_millis(20));
    let passes = timer.counts().passes;
    // Request timeouts of 400 ms, each cancelled soon (the request answered in time),
    // one every 20 ms. The first, due before the reaper's plan, wakes it; without a cap
    // on its sleeps the reaper, once it has tidied the cancel away, would plan its second
    // again, and each next timeout would wake it again.
    for _ in 0..TIMERS {
        let handle = timer.schedule(Duration::from_millis(400), || {}).unwrap();
        assert!(timer.cancel(handle));
        std::thread::sleep(Duration::from_millis(20));
    }
    // One wake-up for the first, and its cancel; then sleeps of 200 ms at most, for
    // which the others are staged and cancelled without a word to the reaper.
    let passes = timer.counts().passes - passes;
    assert!(passes <= 10, "{passes} passes for {TIMERS} timers");
    assert_eq!(timer.shutdown().len(), 0);
}
