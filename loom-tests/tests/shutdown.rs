//! Shutdown racing the producers: a timer scheduled, reset or cancelled while the reaper
//! winds up is either refused (and handed back to its producer) or handed back by the
//! wind-up; never lost, never both, its payload dropped exactly once, and a cancelled one
//! dropped by the time both sides are done.
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::loom_api::Due;
use shardwheel::loom_api::Refused;
use support::Harness;

#[test]
fn a_timer_scheduled_during_wind_up_is_refused_or_handed_back() {
    loom::model(|| {
        let h = Harness::new();
        let producer = {
            let h = h.clone();
            thread::spawn(move || match h.shard.schedule(5, h.payload(1)) {
                Ok(_) => None,
                Err(Refused::Closed(payload)) => Some(payload),
                Err(Refused::Full(_)) => panic!("no bound was set"),
            })
        };
        let mut due = Due::new();
        let unfired = h.shard.wind_up(&mut due);
        let refused = producer.join().unwrap();
        assert_eq!(
            unfired.len() + usize::from(refused.is_some()),
            1,
            "handed back exactly once"
        );
        drop((unfired, refused));
        assert_eq!(h.drops(), 1);
        assert_eq!(h.shard.pending(), 0);
    });
}

#[test]
fn a_reset_or_cancel_during_wind_up_never_loses_the_timer() {
    loom::model(|| {
        let h = Harness::new();
        let (slot, generation) = h.shard.schedule(5, h.payload(1)).unwrap();
        let mut due = Due::new();
        h.pass(&mut due, 0);
        let resetter = {
            let h = h.clone();
            thread::spawn(move || h.shard.reset(slot, generation, 9))
        };
        let canceller = {
            let h = h.clone();
            thread::spawn(move || h.shard.cancel(slot, generation))
        };
        let unfired = h.shard.wind_up(&mut due);
        resetter.join().unwrap();
        let cancelled = canceller.join().unwrap();
        assert_eq!(
            unfired.len() + usize::from(cancelled),
            1,
            "handed back or cancelled, exactly one"
        );
        assert_eq!(h.fired(), 0);
        assert_eq!(h.shard.pending(), 0);
        drop(unfired);
        // A payload cancelled after the wind-up stopped taking changes is dropped by the
        // canceller or the resetter whose push was refused, not left in the shard.
        assert_eq!(h.drops(), 1, "dropped once by the time both sides are done");
    });
}

/// With exact deadlines: a held timer is cancelled and its slot freed, so the heap still
/// names the slot when a producer takes it again, racing the wind-up. The new timer is
/// handed back by the wind-up or refused to its producer, once; the wind-up never takes
/// it by the old timer's name.
#[test]
fn a_held_slot_taken_again_during_wind_up_is_handed_back_once() {
    loom::model(|| {
        let h = Harness::exact();
        let mut due = Due::new();
        let (slot, generation) = h.shard.schedule(1_500, h.payload(1)).unwrap();
        h.pass_at(&mut due, 1, 1_000); // its tick has come, its deadline not: held
        assert!(h.shard.cancel(slot, generation));
        h.pass_at(&mut due, 1, 1_000); // freed; the heap still names it
        let producer = {
            let h = h.clone();
            thread::spawn(move || match h.shard.schedule(1_800, h.payload(2)) {
                Ok((again, _)) => {
                    assert_eq!(again, slot, "the freed slot is taken again");
                    None
                }
                Err(Refused::Closed(payload)) => Some(payload),
                Err(Refused::Full(_)) => panic!("no bound was set"),
            })
        };
        let unfired = h.shard.wind_up(&mut due);
        let refused = producer.join().unwrap();
        assert_eq!(
            unfired.len() + usize::from(refused.is_some()),
            1,
            "the new timer handed back exactly once"
        );
        drop((unfired, refused));
        assert_eq!(h.drops(), 2);
        assert_eq!(h.fired(), 0);
        assert_eq!(h.shard.pending(), 0);
    });
}

/// A cancel whose change the closed list refuses: the canceller drops the payload itself
/// (no reaper pass will), while the wind-up may still be walking the slot in the inbox
/// behind another arrival, which it must still find and hand back.
#[test]
fn a_cancel_refused_by_the_closed_list_drops_its_payload() {
    loom::model(|| {
        let h = Harness::new();
        h.shard.schedule(5, h.payload(1)).unwrap();
        let (slot, generation) = h.shard.schedule(6, h.payload(2)).unwrap();
        let canceller = {
            let h = h.clone();
            thread::spawn(move || h.shard.cancel(slot, generation))
        };
        let mut due = Due::new();
        let unfired = h.shard.wind_up(&mut due);
        let cancelled = canceller.join().unwrap();
        let mut values: Vec<usize> = unfired.iter().map(|payload| payload.value).collect();
        values.sort_unstable();
        let expected: &[usize] = if cancelled { &[1] } else { &[1, 2] };
        assert_eq!(values, expected, "handed back unless cancelled first");
        drop(unfired);
        assert_eq!(h.drops(), 2, "both dropped once, the shard still alive");
        assert_eq!(h.shard.pending(), 0);
    });
}
