//! Memory after a spike: it leaves the process whatever the global allocator (this test
//! binary runs on mimalloc, which keeps memory that one thread frees cached for the thread
//! that allocated it: chunks taken from it stayed resident after the engine gave them
//! back), cancelled timers give their slots back, and old handles stay harmless.

mod common;

use common::{timer, wait_for};
use shardwheel::{StaleHandle, Timer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Resident memory of this process, in bytes.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[test]
#[cfg(target_os = "linux")]
fn a_spike_leaves_the_process_under_mimalloc() {
    const SPIKE: u64 = 1_000_000;
    let timer = Timer::builder().shards(1).build().unwrap();
    let before = resident_bytes();
    let handles: Vec<_> = (0..SPIKE)
        .map(|_| timer.schedule(Duration::from_secs(600), || {}).unwrap())
        .collect();
    assert!(
        wait_for(Duration::from_secs(60), || timer.stats().scheduled == SPIKE),
        "taken in"
    );
    let grown = resident_bytes().saturating_sub(before);
    for handle in handles {
        assert!(timer.cancel(handle));
    }
    // The shard keeps six chunks (4,032 slots) and gives the rest back.
    assert!(
        wait_for(Duration::from_secs(60), || timer.stats().slots <= 4_032),
        "given back"
    );
    // What is left of the spike: the chunks' frees may wait a moment for the epoch; the
    // list of handles (16 MB) may stay in mimalloc's cache.
    let left = || resident_bytes().saturating_sub(before);
    assert!(
        wait_for(Duration::from_secs(60), || left() < grown / 4),
        "{} MB of the spike's {} MB still resident",
        left() >> 20,
        grown >> 20
    );
}

#[test]
fn cancelling_a_far_timer_gives_its_slot_back_at_once() {
    // Netty, STPE, KAFKA-16663: cancelled timers kept until their deadline.
    let timer = timer(1);
    let handles: Vec<_> = (0..10_000)
        .map(|_| timer.schedule(Duration::from_secs(3_600), || {}).unwrap())
        .collect();
    assert_eq!(timer.pending(), 10_000);
    for handle in handles {
        assert!(timer.cancel(handle));
    }
    assert_eq!(timer.pending(), 0);
    // The reaper frees the slots; the shutdown finds nothing left.
    assert!(timer.shutdown().is_empty());
}

#[test]
fn memory_comes_back_after_a_spike_and_old_handles_stay_harmless() {
    // No peer in Rust gives a slab's memory back after a spike (issue 7).
    let timer = timer(1);
    let ran = Arc::new(AtomicUsize::new(0));
    let spike: Vec<_> = (0..200_000)
        .map(|_| {
            let ran = Arc::clone(&ran);
            let callback = move || {
                ran.fetch_add(1, Ordering::Relaxed);
            };
            timer
                .schedule(Duration::from_secs(3_600), callback)
                .unwrap()
        })
        .collect();
    let peak = timer.stats().slots;
    assert!(peak >= 200_000, "{peak} slots for 200,000 timers");
    for &handle in &spike[1..] {
        assert!(timer.cancel(handle));
    }
    // One timer stays, in the first slot: the reaper keeps room for it and gives the rest
    // back, a share per pass.
    assert!(
        wait_for(Duration::from_secs(20), || timer.stats().slots < 10_000),
        "slots after the spike: {}",
        timer.stats().slots
    );
    for &handle in &spike[1..] {
        assert!(!timer.cancel(handle), "an old handle cancelled something");
        assert_eq!(
            timer.reset(handle, Duration::from_secs(1)),
            Err(StaleHandle)
        );
    }
    // The memory is made again as needed, and new timers work as before.
    let (fired, rx) = mpsc::channel();
    let again: Vec<_> = (0..20_000)
        .map(|i| {
            let fired = fired.clone();
            let delay = Duration::from_millis(if i % 1_000 == 0 { 5 } else { 3_600_000 });
            timer
                .schedule(delay, move || fired.send(i).unwrap())
                .unwrap()
        })
        .collect();
    for (i, &handle) in again.iter().enumerate() {
        if i % 1_000 != 0 {
            assert!(timer.cancel(handle));
        }
    }
    let mut firings: Vec<usize> = (0..20).map(|_| rx.recv().unwrap()).collect();
    firings.sort_unstable();
    assert_eq!(firings, (0..20).map(|i| i * 1_000).collect::<Vec<_>>());
    assert!(
        timer.cancel(spike[0]),
        "the timer that stayed is still pending"
    );
    assert!(timer.shutdown().is_empty());
    assert_eq!(ran.load(Ordering::Relaxed), 0);
}

// A timer held until its exact deadline, then cancelled, and its slot's chunk given back
// before the shutdown: the wind-up found the held entry and looked for a slot that was
// gone (a panic, found in review).
#[test]
fn shutdown_after_a_give_back_skips_held_timers_whose_memory_went() {
    let timer = Timer::builder().shards(1).manual().build().unwrap();
    let far: Vec<_> = (0..10_000)
        .map(|_| timer.schedule(Duration::from_secs(3_600), || {}).unwrap())
        .collect();
    let held = timer
        .schedule(Duration::from_micros(1_500), || {
            panic!("cancelled, must not run")
        })
        .unwrap();
    let slots = timer.stats().slots;
    // Its tick has come, its deadline not: the reaper holds it.
    timer.advance(Duration::from_micros(1_200)).unwrap();
    for handle in far.into_iter().chain([held]) {
        assert!(timer.cancel(handle));
    }
    // Frees them all and gives the chunks above the first few back, a share per pass,
    // before the held timer's deadline (at 1.5 ms) takes it out of the reaper's heap.
    for _ in 0..25 {
        timer.advance(Duration::from_micros(10)).unwrap();
    }
    assert!(timer.stats().slots < slots, "the chunks went");
    assert!(timer.shutdown().is_empty());
    assert_eq!(timer.panicked(), 0);
}
