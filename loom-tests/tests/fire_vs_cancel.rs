//! The race on one state word: a cancel from another thread against the reaper firing the
//! same timer. Exactly one wins: the timer runs once or is cancelled, never both, never
//! neither; its payload is dropped exactly once; the pending count ends at zero.
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::Wheel;
use support::Harness;

#[test]
fn cancel_racing_fire_has_exactly_one_winner() {
    loom::model(|| {
        let h = Harness::new();
        let (slot, generation) = h.shard.schedule(0, h.payload(1)).unwrap();
        let canceller = {
            let h = h.clone();
            thread::spawn(move || h.shard.cancel(slot, generation))
        };
        let mut wheel = Wheel::new();
        h.pass(&mut wheel, 0);
        let cancelled = canceller.join().unwrap();
        // A second pass frees a slot whose cancel arrived after the first.
        h.pass(&mut wheel, 0);
        assert_eq!(
            cancelled,
            h.fired() == 0,
            "cancelled {cancelled}, fired {}",
            h.fired()
        );
        assert_eq!(h.fired() + usize::from(cancelled), 1);
        assert_eq!(h.drops(), 1, "payload dropped once");
        assert_eq!(h.shard.pending(), 0);
        assert!(
            !h.shard.cancel(slot, generation),
            "a second cancel finds nothing"
        );
    });
}
