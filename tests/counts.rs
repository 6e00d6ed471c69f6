//! `Timer::counts` and `Timer::shard_counts`: the counts of a stats snapshot, per shard and
//! summed, read without its histograms.

use shardwheel::{Counts, Timer};
use std::time::Duration;

#[test]
fn counts_are_the_stats_counts_and_the_shards_add_up_to_them() {
    let timer = Timer::builder()
        .manual()
        .shards(3)
        .build_with(|fail: bool| assert!(!fail, "a failing handler"))
        .unwrap();
    let handles: Vec<_> = (0..30)
        .map(|i| timer.insert(Duration::from_millis(i), i == 7).unwrap())
        .collect();
    assert!(timer.cancel(handles[20]));
    assert!(timer.cancel(handles[21]));
    timer.reset(handles[22], Duration::from_secs(60)).unwrap();
    timer.advance(Duration::from_millis(25)).unwrap();

    let counts = timer.counts();
    let stats = timer.stats();
    assert_eq!(
        (
            counts.scheduled,
            counts.fired,
            counts.cancelled,
            counts.reset,
            counts.panicked
        ),
        (30, 23, 2, 1, 1),
    );
    assert_eq!(counts.pending, 30 - 23 - 2);
    assert_eq!(
        (
            counts.scheduled,
            counts.fired,
            counts.cancelled,
            counts.reset
        ),
        (stats.scheduled, stats.fired, stats.cancelled, stats.reset),
    );
    assert_eq!(
        (
            counts.panicked,
            counts.pending,
            counts.cascaded,
            counts.passes,
            counts.slots
        ),
        (
            stats.panicked,
            stats.pending,
            stats.cascaded,
            stats.passes,
            stats.slots
        ),
    );

    let shards: Vec<Counts> = (0..timer.shards())
        .map(|shard| timer.shard_counts(shard).unwrap())
        .collect();
    assert_eq!(shards.into_iter().sum::<Counts>(), counts);
    assert_eq!(timer.shard_counts(timer.shards()), None);
}

/// How long the stress tests below run (20 s by default; `SHARDWHEEL_STRESS_SECS` sets it).
fn stress_time() -> Duration {
    let secs = std::env::var("SHARDWHEEL_STRESS_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(secs)
}

/// Threads that stage timers and exit leave their stages to the reaper, which folds their
/// counts into the shard's and forgets them: `pending` read meanwhile, with nothing in
/// flight (every thread joined), still counts each timer once.
#[test]
fn pending_is_exact_while_the_reaper_retires_the_stages_of_exited_threads() {
    const THREADS: usize = 2;
    const EACH: usize = 64;
    let timer = Timer::builder().shards(1).build().unwrap();
    let started = std::time::Instant::now();
    let (mut expected, mut reads) = (0, 0u64);
    while started.elapsed() < stress_time() {
        let producers: Vec<_> = (0..THREADS)
            .map(|_| {
                let timer = timer.clone();
                std::thread::spawn(move || {
                    for _ in 0..EACH {
                        timer.schedule(Duration::from_secs(3_600), || {}).unwrap();
                    }
                })
            })
            .collect();
        for producer in producers {
            producer.join().unwrap();
        }
        expected += THREADS * EACH;
        // The reaper retires the stages at its next pass, which the threads' hand-overs
        // or its idle horizon bring: read the count many times around it.
        let reading = std::time::Instant::now();
        while reading.elapsed() < Duration::from_millis(2) {
            let pending = timer.pending();
            assert_eq!(
                pending, expected,
                "pending() said {pending} with {expected} timers pending (read {reads})"
            );
            reads += 1;
        }
    }
    assert_eq!(timer.counts().scheduled, expected as u64);
}
