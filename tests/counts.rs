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
