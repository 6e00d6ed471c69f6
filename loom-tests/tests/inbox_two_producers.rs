//! The inbox with two producers and the reaper: both timers arrive exactly once, each with
//! the payload its producer wrote (loom checks the payload cell's accesses against the
//! push's Release and the reaper's Acquire).
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::loom_api::Due;
use support::Harness;

#[test]
fn two_producers_and_the_reaper() {
    loom::model(|| {
        let h = Harness::new();
        let producers: Vec<_> = [1usize, 10]
            .into_iter()
            .map(|value| {
                let h = h.clone();
                thread::spawn(move || {
                    h.shard.schedule(0, h.payload(value)).unwrap();
                })
            })
            .collect();
        // One pass races both pushes; the last pass, after them, takes whatever is left.
        let mut due = Due::new();
        h.pass(&mut due, 0);
        for producer in producers {
            producer.join().unwrap();
        }
        h.pass(&mut due, 0);
        assert_eq!(h.fired(), 2);
        assert_eq!(
            h.fired_values.load(loom::sync::atomic::Ordering::SeqCst),
            11
        );
        assert_eq!(h.drops(), 2);
        assert_eq!(h.shard.pending(), 0);
    });
}
