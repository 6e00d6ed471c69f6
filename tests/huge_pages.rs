//! Huge pages for the slots: by default a shard's big chunks of slots are advised onto
//! transparent huge pages, and `Builder::huge_pages(false)` leaves them on small pages.
//! The advice shows in `/proc/self/smaps` as the mapping's `hg` flag. Its own process, as
//! the flags of every mapping in it are read.

#![cfg(target_os = "linux")]

use shardwheel::Timer;
use std::time::Duration;

/// Enough pending timers on one shard for chunks of slots well over 2 MiB each.
const PENDING: usize = 300_000;
const HUGE_PAGE: u64 = 2 << 20;

/// How many mappings of 2 MiB or more this process has advised onto huge pages.
fn advised_mappings() -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut advised = 0;
    let mut size_kib = 0;
    for line in smaps.lines() {
        if let Some(size) = line.strip_prefix("Size:") {
            size_kib = size
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap();
        } else if let Some(flags) = line.strip_prefix("VmFlags:")
            && size_kib * 1024 >= HUGE_PAGE
            && flags.split_whitespace().any(|f| f == "hg")
        {
            advised += 1;
        }
    }
    advised
}

/// Schedules `PENDING` timers on a one-shard timer built with `huge_pages`, then counts
/// the advised mappings while they are pending.
fn advised_with(huge_pages: bool) -> usize {
    let timer = Timer::builder()
        .shards(1)
        .huge_pages(huge_pages)
        .build()
        .unwrap();
    let handles: Vec<_> = (0..PENDING)
        .map(|_| timer.schedule(Duration::from_secs(600), || {}).unwrap())
        .collect();
    let advised = advised_mappings();
    for handle in handles {
        assert!(timer.cancel(handle));
    }
    advised
}

#[test]
fn slots_go_on_huge_pages_unless_asked_not_to() {
    // First, while nothing in the process has advised any memory.
    assert_eq!(
        advised_with(false),
        0,
        "huge_pages(false) advises no chunk onto huge pages"
    );
    // A kernel built without transparent huge pages refuses the advice.
    if std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
        assert!(
            advised_with(true) > 0,
            "by default the big chunks are advised onto huge pages"
        );
    }
}
