//! Giving memory back after a spike: the reaper pass that frees the last timers of a chunk
//! gives the chunk back and has the epoch free it. A stale handle used meanwhile never
//! touches freed memory (loom reports an access racing the free, and one after it fails
//! the model, see `Slot::check_live`), and a timer scheduled meanwhile is one no stale
//! handle reaches.
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::loom_api::{Due, Stage};
use std::sync::Arc;
use support::Harness;

/// Three timers, cancelled: slots 0 and 1 fill the first chunk (which the shard keeps),
/// slot 2 opens the second. Returns slot 2's handle; the next pass gives its chunk back.
fn spike(h: &Harness, due: &mut Due) -> (u32, u32) {
    let handles: Vec<(u32, u32)> = (0..3)
        .map(|value| h.shard.schedule(10, h.payload(value)).unwrap())
        .collect();
    h.pass(due, 0);
    for &(slot, generation) in &handles {
        assert!(h.shard.cancel(slot, generation));
    }
    assert_eq!(handles[2].0, 2);
    handles[2]
}

#[test]
fn a_stale_handle_racing_the_give_back_touches_no_freed_memory() {
    loom::model(|| {
        let h = Harness::new();
        let mut due = Due::new();
        let (slot, generation) = spike(&h, &mut due);
        let stale = {
            let h = h.clone();
            thread::spawn(move || {
                (
                    h.shard.cancel(slot, generation),
                    h.shard.reset(slot, generation, 5),
                )
            })
        };
        // Frees the three slots and gives the second chunk back; the later passes move
        // the epoch on, so that the chunk's memory is freed as soon as no pin holds it.
        for _ in 0..3 {
            h.pass(&mut due, 0);
        }
        assert_eq!(stale.join().unwrap(), (false, false));
        assert_eq!(h.drops(), 3);
        assert_eq!(h.shard.pending(), 0);
    });
}

/// Slots 0 and 1 hold pending timers and slot 2's is cancelled: a timer scheduled
/// meanwhile pops slot 2 (recycled, then taken back by the same pass) or claims a fresh
/// one, racing the pass that gives slot 2's chunk back (a pop that lost the slot retries;
/// claims wait while the chunk goes; a claim that came first keeps it).
#[test]
fn a_timer_scheduled_during_the_give_back_is_its_own() {
    loom::model(|| {
        let h = Harness::new();
        let mut due = Due::new();
        let handles: Vec<(u32, u32)> = (0..3)
            .map(|value| h.shard.schedule(10, h.payload(value)).unwrap())
            .collect();
        h.pass(&mut due, 0);
        let (slot, generation) = handles[2];
        assert!(h.shard.cancel(slot, generation));
        let producer = {
            let h = h.clone();
            thread::spawn(move || h.shard.schedule(10, h.payload(7)).unwrap())
        };
        for _ in 0..2 {
            h.pass(&mut due, 0);
        }
        let (new_slot, new_generation) = producer.join().unwrap();
        assert!(
            new_slot != slot || new_generation != generation,
            "the new timer has a stale handle's name"
        );
        assert!(
            !h.shard.cancel(slot, generation),
            "a stale handle cancelled it"
        );
        h.pass(&mut due, 10);
        assert_eq!(h.fired(), 3);
        assert_eq!(h.fired_values.load(loom::sync::atomic::Ordering::SeqCst), 8);
        assert_eq!(h.drops(), 4);
    });
}

/// The owner's cancel looks at a slot without a pin only in a chunk its stage has a slot
/// of (see `stage::Chunks`): its stale handle into the chunk the reaper gives back
/// meanwhile goes the pinned way, and its own staged timer, in the chunk the shard keeps,
/// is cancelled either way while the reaper collects the stage for the shrink.
#[test]
fn an_owners_cancels_racing_the_give_back_touch_no_freed_memory() {
    loom::model(|| {
        let h = Harness::new();
        let mut due = Due::new();
        let stage = h.shard.register_stage().unwrap();
        // The owner's timer takes slot 0, in the first chunk, which the shard keeps.
        let own = h.shard.schedule_staged(&stage, 100, h.payload(0)).unwrap();
        let handles: Vec<(u32, u32)> = (1..3)
            .map(|value| h.shard.schedule(10, h.payload(value)).unwrap())
            .collect();
        h.pass(&mut due, 0);
        for &(slot, generation) in &handles {
            assert!(h.shard.cancel(slot, generation));
        }
        let (slot, generation) = handles[1];
        assert_eq!((own.0, slot), (0, 2));
        let owner = {
            let h = h.clone();
            thread::spawn(move || {
                let stale = h.shard.cancel_from(Some(&stage), slot, generation);
                let mine = h.shard.cancel_from(Some(&stage), own.0, own.1);
                (stale, mine)
            })
        };
        for _ in 0..3 {
            h.pass(&mut due, 0);
        }
        assert_eq!(owner.join().unwrap(), (false, true));
        h.pass(&mut due, 0);
        assert_eq!(h.drops(), 3);
        assert_eq!(h.shard.pending(), 0);
    });
}

/// A slot the reaper takes back from a stage (a free one, for the shrink, or a staged one
/// another thread cancelled, as it collects the stage) no longer counts as the stage's:
/// the owner's stale handle to it goes the pinned way once the reaper may give its chunk
/// back.
#[test]
fn an_owners_stale_cancel_of_a_slot_the_reaper_took_back_touches_no_freed_memory() {
    for by_owner in [true, false] {
        loom::model(move || stale_cancel_of_a_slot_the_reaper_took_back(by_owner));
    }
}

/// Slots 0 and 1, the first chunk (which the shard keeps), take pending timers due at 10.
fn fill_the_first_chunk(h: &Harness) {
    for value in 0..2 {
        h.shard.schedule(10, h.payload(value)).unwrap();
    }
}

/// The owner's stale cancel of its timer in slot 2, racing the three passes that give the
/// second chunk back: it finds the timer gone. Then the first chunk's two timers fire, and
/// `payloads` were dropped in all.
fn owners_cancel_racing_the_give_back(
    h: &Harness,
    stage: Arc<Stage>,
    (slot, generation): (u32, u32),
    payloads: usize,
) {
    assert_eq!(slot, 2);
    let mut due = Due::new();
    let owner = {
        let h = h.clone();
        thread::spawn(move || h.shard.cancel_from(Some(&stage), slot, generation))
    };
    for _ in 0..3 {
        h.pass(&mut due, 0);
    }
    assert!(!owner.join().unwrap());
    h.pass(&mut due, 10);
    assert_eq!((h.fired(), h.drops()), (2, payloads));
}

fn stale_cancel_of_a_slot_the_reaper_took_back(by_owner: bool) {
    let h = Harness::new();
    let stage = h.shard.register_stage().unwrap();
    // The owner's timer takes slot 2, in the second chunk, and is cancelled: by its owner,
    // which keeps the slot with its stage's free ones, or by another thread, which leaves
    // it staged. The shrink takes the slot back from the stage.
    fill_the_first_chunk(&h);
    let handle = h.shard.schedule_staged(&stage, 100, h.payload(2)).unwrap();
    let from = by_owner.then_some(&*stage);
    assert!(h.shard.cancel_from(from, handle.0, handle.1));
    owners_cancel_racing_the_give_back(&h, stage, handle, 3);
}

/// Slots the owner hands over with its stage no longer count as the stage's either.
#[test]
fn an_owners_stale_cancel_of_a_slot_it_handed_over_touches_no_freed_memory() {
    loom::model(|| {
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        // The owner's two timers take slots 2 and 3, in the second chunk, fill the stage
        // and are handed over, then cancelled; the reaper takes the batch in and frees them.
        fill_the_first_chunk(&h);
        let handles: Vec<(u32, u32)> = (2..4)
            .map(|value| {
                h.shard
                    .schedule_staged(&stage, 100, h.payload(value))
                    .unwrap()
            })
            .collect();
        for &(slot, generation) in &handles {
            assert!(h.shard.cancel(slot, generation));
        }
        owners_cancel_racing_the_give_back(&h, stage, handles[0], 4);
    });
}
