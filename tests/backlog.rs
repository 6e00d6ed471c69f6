//! A producer that finds its shard's reaper awake and behind by a backlog yields to it,
//! and the count of such yields (`Counts::yielded`); the reaper never yields to itself.

use shardwheel::Timer;
use std::sync::mpsc;
use std::time::Duration;

/// Timers a stage holds before its thread hands them over as one batch, which makes a
/// backlog (the crate's `STAGE_LEN`, documented on `Timer`).
const BATCH: usize = 4096;
const WAIT: Duration = Duration::from_secs(10);

#[test]
fn a_producer_yields_to_its_reaper_while_it_is_behind() {
    let timer = Timer::builder().shards(1).build().unwrap();
    let (started, started_rx) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    // Keeps the reaper awake, in a pass, until released.
    timer
        .schedule(Duration::ZERO, move || {
            started.send(()).unwrap();
            release_rx.recv().unwrap();
        })
        .unwrap();
    started_rx.recv_timeout(WAIT).unwrap();
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
