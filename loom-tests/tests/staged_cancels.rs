//! Cancels kept in the owner's stage (see `stage`): the owner cancels a timer already
//! handed over, marks its slot and keeps its number in the stage, and the reaper takes the
//! number with the stage (or from the registry, once the owner hands the stage over) and
//! frees the slot. A cancel taken so may be of a timer still on the inbox, and the slot
//! must not be freed before the timer arrives: freed, it would be taken again while still
//! linked on the inbox. Stages hold two cancels under loom, so a second one makes the
//! owner hand them over.
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::loom_api::{Due, Refused};
use support::Harness;

/// The reaper's tidy interval (`TIDY_INTERVAL`, 10 ms), in nanoseconds.
const TIDY_INTERVAL_NANOS: u64 = 10_000_000;

/// The owner schedules two timers due at 50 straight onto the inbox, stages one due at
/// 100 (so its stage has a slot in the chunk of the next: it may look at the slots there
/// without a pin, and keeps its cancel), then puts a fourth on the inbox and cancels it,
/// while the reaper makes a pass at 10. Had the pass freed the cancelled timer's slot
/// before taking it off the inbox, the slot's link (its place on the inbox, then on the
/// free stack) would have dropped the two timers pushed before it from the inbox: lost,
/// never fired nor handed back.
#[test]
fn a_cancel_taken_from_a_stage_waits_for_its_timer_on_the_inbox() {
    loom::model(|| {
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        let owner = {
            let (h, stage) = (h.clone(), stage.clone());
            thread::spawn(move || {
                for value in [1, 2] {
                    h.shard.schedule(50, h.payload(value)).unwrap();
                }
                h.shard.schedule_staged(&stage, 100, h.payload(3)).unwrap();
                let (slot, generation) = h.shard.schedule(50, h.payload(4)).unwrap();
                assert!(h.shard.cancel_from(Some(&stage), slot, generation));
            })
        };
        let mut due = Due::new();
        h.pass(&mut due, 10);
        owner.join().unwrap();
        h.pass(&mut due, 10);
        assert_eq!(h.fired(), 0, "nothing due by 10");
        assert_eq!(h.shard.pending(), 3);
        let unfired = h.shard.wind_up(&mut due);
        let values: usize = unfired.iter().map(|payload| payload.value).sum();
        assert_eq!(values, 1 + 2 + 3, "all but the cancelled one handed back");
        drop(unfired);
        assert_eq!(h.drops(), 4, "each payload dropped once");
        assert_eq!(h.shard.pending(), 0);
    });
}

/// The owner cancels two timers already handed over (the second fills its stage's
/// cancels, and it hands them over) while the shard shuts down: each timer is either
/// cancelled or handed back by the wind-up, and each payload is dropped once (by the
/// wind-up's cancels, by the canceller whose change came too late, or with what was
/// handed back).
#[test]
fn shutdown_with_cancels_in_a_stage_drops_each_payload_once() {
    loom::model(|| {
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        // Two staged timers, handed over by the second (a full stage) and taken in.
        let timers = [1, 2].map(|value| h.shard.schedule_staged(&stage, 100, h.payload(value)));
        let timers = timers.map(|timer| timer.unwrap());
        let mut due = Due::new();
        h.pass(&mut due, 10);
        let owner = {
            let (h, stage) = (h.clone(), stage.clone());
            thread::spawn(move || {
                timers
                    .into_iter()
                    .filter(|&(slot, generation)| {
                        h.shard.cancel_from(Some(&stage), slot, generation)
                    })
                    .count()
            })
        };
        let unfired = h.shard.wind_up(&mut due);
        let cancelled = owner.join().unwrap();
        assert_eq!(
            unfired.len() + cancelled,
            2,
            "each handed back or cancelled, once"
        );
        drop(unfired);
        assert_eq!(h.drops(), 2, "each dropped once");
        assert_eq!(h.shard.pending(), 0);
        // Nothing is refused after the wind-up but new timers.
        assert!(matches!(
            h.shard.schedule(5, h.payload(3)),
            Err(Refused::Closed(_))
        ));
    });
}

/// The owner cancels a timer already taken in, which keeps the cancel in its stage, and
/// exits (lets the stage go) while the reaper makes passes: the reaper collects the
/// stage of an owner gone, cancels and all, and drops the payload once.
#[test]
fn a_thread_exiting_with_cancels_in_its_stage_leaves_them_to_the_reaper() {
    loom::model(|| {
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        let (slot, generation) = h.shard.schedule(50, h.payload(1)).unwrap();
        let mut due = Due::new();
        h.pass(&mut due, 10);
        let owner = {
            let h = h.clone();
            thread::spawn(move || {
                assert!(h.shard.cancel_from(Some(&stage), slot, generation));
                stage.let_go();
            })
        };
        h.pass(&mut due, 10);
        owner.join().unwrap();
        h.pass(&mut due, 10);
        assert_eq!(h.drops(), 1, "dropped once, by the reaper");
        assert_eq!(h.shard.pending(), 0);
        assert!(h.shard.wind_up(&mut due).is_empty());
        assert_eq!(h.drops(), 1);
    });
}

/// The owner's first cancel into its stage as the reaper, with nothing else to do, plans
/// to sleep until 100: the reaper is woken, or sees the cancel waiting before it parks,
/// and drops the payload. The reaper loops as `Shard::run` does: a pass that leaves it
/// tidying has it sleep for the tidy interval (here: the clock moves on by it), any other
/// sleep lasts until it is woken (a park with no timeout: a cancel slept on parks it for
/// ever, which loom reports).
#[test]
fn a_cancel_staged_as_the_reaper_plans_to_sleep_is_not_slept_on() {
    loom::model(|| {
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        let (slot, generation) = h.shard.schedule(50, h.payload(1)).unwrap();
        let reaper = {
            let h = h.clone();
            thread::spawn(move || {
                h.shard.register_reaper();
                let mut due = Due::new();
                let mut elapsed = 0;
                loop {
                    let time = elapsed;
                    let tidying = h.shard.pass(&mut due, 0, &|| time, &|_| {});
                    if h.drops() == 1 {
                        break;
                    }
                    if h.shard.may_sleep(&due, 100, tidying) {
                        if tidying {
                            // The others run meanwhile.
                            elapsed += TIDY_INTERVAL_NANOS;
                            thread::yield_now();
                        } else {
                            thread::park();
                        }
                    }
                }
            })
        };
        assert!(h.shard.cancel_from(Some(&stage), slot, generation));
        reaper.join().unwrap();
        assert_eq!(h.shard.pending(), 0);
    });
}
