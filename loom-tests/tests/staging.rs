//! Staging (see `stage`): a producer's timers wait in its stage until it hands them over or
//! the reaper collects them. Whichever thread gets to a staged timer first (a canceller on
//! another thread, a resetter, the owner handing its stage over, the reaper collecting
//! it, the shutdown), the timer is never lost, never both fired and cancelled, and its
//! payload is dropped once. Stages hold two timers under loom, so a second one fills a
//! stage and makes its owner hand it over.
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::loom_api::{Due, Refused};
use support::Harness;

#[test]
fn a_staged_timer_cancelled_from_another_thread_is_dropped_once() {
    loom::model(|| {
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        let (slot, generation) = h.shard.schedule_staged(&stage, 5, h.payload(1)).unwrap();
        let canceller = {
            let h = h.clone();
            thread::spawn(move || h.shard.cancel(slot, generation))
        };
        // The owner's second timer fills the stage: it hands both over.
        let owner = {
            let (h, stage) = (h.clone(), stage.clone());
            thread::spawn(move || drop(h.shard.schedule_staged(&stage, 7, h.payload(2))))
        };
        let mut due = Due::new();
        h.pass(&mut due, 10);
        owner.join().unwrap();
        let cancelled = canceller.join().unwrap();
        h.pass(&mut due, 10);
        assert_eq!(
            h.fired() + usize::from(cancelled),
            2,
            "each fired or cancelled"
        );
        assert_eq!(
            h.drops(),
            2,
            "each dropped once, by the time both sides are done"
        );
        assert_eq!(h.shard.pending(), 0);
    });
}

#[test]
fn the_reapers_collection_racing_the_owner_takes_each_timer_in_once() {
    loom::model(|| {
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        let owner = {
            let (h, stage) = (h.clone(), stage.clone());
            thread::spawn(move || {
                for value in [1, 2] {
                    h.shard
                        .schedule_staged(&stage, 5, h.payload(value))
                        .unwrap();
                }
            })
        };
        let mut due = Due::new();
        h.pass(&mut due, 10);
        owner.join().unwrap();
        h.pass(&mut due, 10);
        assert_eq!(h.fired(), 2, "both fired, once each");
        assert_eq!(h.fired_values.load(loom::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(h.drops(), 2);
    });
}

#[test]
fn a_staged_timer_reset_from_another_thread_fires_at_its_new_deadline() {
    loom::model(|| {
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        let (slot, generation) = h.shard.schedule_staged(&stage, 100, h.payload(1)).unwrap();
        let resetter = {
            let h = h.clone();
            thread::spawn(move || h.shard.reset(slot, generation, 5))
        };
        let mut due = Due::new();
        h.pass(&mut due, 10);
        assert!(resetter.join().unwrap(), "the timer was pending");
        h.pass(&mut due, 10);
        assert_eq!(h.fired(), 1, "due at 5 since the reset");
        assert_eq!(h.drops(), 1);
    });
}

#[test]
fn shutdown_with_staged_timers_hands_each_back_once() {
    loom::model(|| {
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        let owner = {
            let (h, stage) = (h.clone(), stage.clone());
            thread::spawn(move || {
                [1, 2]
                    .map(
                        |value| match h.shard.schedule_staged(&stage, 5, h.payload(value)) {
                            Ok(_) => None,
                            Err(Refused::Closed(payload)) => Some(payload),
                            Err(Refused::Full(_)) => panic!("no bound was set"),
                        },
                    )
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
            })
        };
        let mut due = Due::new();
        let unfired = h.shard.wind_up(&mut due);
        let refused = owner.join().unwrap();
        assert_eq!(
            unfired.len() + refused.len(),
            2,
            "handed back or refused, once"
        );
        drop((unfired, refused));
        assert_eq!(h.drops(), 2);
        assert_eq!(h.shard.pending(), 0);
    });
}

/// The reaper plans to sleep until 100 (its next work elsewhere) as a thread stages a
/// timer due at 5 and exits: the reaper is woken, or sees the stage before it parks.
#[test]
fn a_timer_staged_as_the_reaper_plans_to_sleep_is_not_slept_past() {
    loom::model(|| {
        let h = Harness::new();
        let reaper = {
            let h = h.clone();
            thread::spawn(move || {
                h.shard.register_reaper();
                let mut due = Due::new();
                loop {
                    h.pass(&mut due, 10);
                    if h.fired() == 1 {
                        break;
                    }
                    if h.shard.may_sleep(&due, 100, false) {
                        thread::park();
                    }
                }
            })
        };
        let stage = h.shard.register_stage().unwrap();
        h.shard.schedule_staged(&stage, 5, h.payload(1)).unwrap();
        reaper.join().unwrap();
        assert_eq!(h.drops(), 1);
    });
}
