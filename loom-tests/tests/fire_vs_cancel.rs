//! The race on one state word: a cancel and a reset from other threads against the reaper
//! firing the same timer. Exactly one of cancel and fire wins: the timer runs once or is
//! cancelled, never both, never neither, and never at a deadline a reset replaced; its
//! payload is dropped exactly once; the pending count ends at zero.
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::loom_api::Due;
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
        let mut due = Due::new();
        h.pass(&mut due, 0);
        let cancelled = canceller.join().unwrap();
        // A second pass frees a slot whose cancel arrived after the first.
        h.pass(&mut due, 0);
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

#[test]
fn cancel_reset_and_fire_race_and_a_reset_timer_never_fires_at_its_old_deadline() {
    loom::model(|| {
        let h = Harness::new();
        let (slot, generation) = h.shard.schedule(0, h.payload(1)).unwrap();
        let canceller = {
            let h = h.clone();
            thread::spawn(move || h.shard.cancel(slot, generation))
        };
        let resetter = {
            let h = h.clone();
            thread::spawn(move || h.shard.reset(slot, generation, 5))
        };
        let mut due = Due::new();
        h.pass(&mut due, 0);
        let cancelled = canceller.join().unwrap();
        let reset = resetter.join().unwrap();
        // Everything has landed: a pass at the old deadline, then one at the new.
        h.pass(&mut due, 0);
        let fired_at_zero = h.fired();
        h.pass(&mut due, 5);
        assert_eq!(
            h.fired() + usize::from(cancelled),
            1,
            "run once or cancelled"
        );
        if reset && !cancelled {
            assert_eq!(fired_at_zero, 0, "a reset timer fired at its old deadline");
        }
        if fired_at_zero == 1 {
            assert!(!reset, "reset succeeded on a timer that had already run");
        }
        assert_eq!(h.drops(), 1, "payload dropped once");
        assert_eq!(h.shard.pending(), 0);
        assert!(
            !h.shard.reset(slot, generation, 9),
            "the handle is stale now"
        );
    });
}

#[test]
fn a_second_reset_that_finds_the_first_still_queued_lands_too() {
    loom::model(|| {
        let h = Harness::new();
        let (slot, generation) = h.shard.schedule(3, h.payload(1)).unwrap();
        let resetter = {
            let h = h.clone();
            thread::spawn(move || {
                assert!(h.shard.reset(slot, generation, 5));
                assert!(h.shard.reset(slot, generation, 7));
            })
        };
        let mut due = Due::new();
        h.pass(&mut due, 0);
        resetter.join().unwrap();
        h.pass(&mut due, 0);
        h.pass(&mut due, 6);
        assert_eq!(h.fired(), 0, "fired before the last reset's deadline");
        h.pass(&mut due, 7);
        assert_eq!(h.fired(), 1);
        assert_eq!(h.shard.pending(), 0);
    });
}

/// The owner's cancel of its own timer, handed over to the reaper, goes without a pin
/// while its stage holds a slot of the same chunk (see `Shard::cancel_owned`), and races
/// the pass that takes the timer in and fires it: still exactly one winner.
#[test]
fn an_owners_cancel_without_a_pin_racing_fire_has_exactly_one_winner() {
    loom::model(|| {
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        // Two timers fill the stage (two under loom): the owner hands them over. A third
        // stays staged, so the stage has a slot in the first chunk.
        let (slot, generation) = h.shard.schedule_staged(&stage, 0, h.payload(1)).unwrap();
        let later = h.shard.schedule_staged(&stage, 100, h.payload(2)).unwrap();
        let staged = h.shard.schedule_staged(&stage, 100, h.payload(3)).unwrap();
        let owner = {
            let h = h.clone();
            thread::spawn(move || {
                let cancelled = h.shard.cancel_from(Some(&stage), slot, generation);
                (stage, cancelled)
            })
        };
        let mut due = Due::new();
        h.pass(&mut due, 0);
        let (stage, cancelled) = owner.join().unwrap();
        h.pass(&mut due, 0);
        assert_eq!(h.fired() + usize::from(cancelled), 1, "one winner");
        assert_eq!(h.drops(), 1, "payload dropped once");
        for (slot, generation) in [later, staged] {
            assert!(h.shard.cancel_from(Some(&stage), slot, generation));
        }
        h.pass(&mut due, 0);
        assert_eq!(h.drops(), 3);
        assert_eq!(h.shard.pending(), 0);
    });
}
