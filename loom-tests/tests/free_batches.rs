//! The free stacks hold batches (see `slots::free`): the reaper pushes the slots a pass
//! freed as one batch, a producer with a stage takes a whole batch into it, and a producer
//! without one takes a batch, keeps its first slot and pushes the rest back. Whichever
//! comes first, every slot goes to one timer at a time (no two timers get the same
//! handle), a slot the reaper freed is reused only after the reaper is done with it (loom
//! reports a payload written racing the reaper's take), and every payload is dropped once.
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::loom_api::{Due, Shard};
use support::{Harness, Payload};

/// Two timers, filed and then cancelled: the next pass frees both slots as one batch.
fn two_cancelled(h: &Harness, due: &mut Due) -> [(u32, u32); 2] {
    let handles = [0, 1].map(|value| h.shard.schedule(10, h.payload(value)).unwrap());
    h.pass(due, 0);
    for (slot, generation) in handles {
        assert!(h.shard.cancel(slot, generation));
    }
    handles
}

/// Cancels `handle`, which must name a live timer of its own.
fn cancel_own(shard: &Shard<Payload>, (slot, generation): (u32, u32)) {
    assert!(
        shard.cancel(slot, generation),
        "another timer took its slot"
    );
}

#[test]
fn a_batch_taken_by_a_stage_racing_a_single_take_and_the_push_gives_each_slot_once() {
    loom::model(|| {
        let h = Harness::new();
        let mut due = Due::new();
        let old = two_cancelled(&h, &mut due);
        let staging = {
            let h = h.clone();
            thread::spawn(move || {
                let stage = h.shard.register_stage().unwrap();
                let own = h.shard.schedule_staged(&stage, 10, h.payload(2)).unwrap();
                (stage, own)
            })
        };
        let single = {
            let h = h.clone();
            thread::spawn(move || h.shard.schedule(10, h.payload(3)).unwrap())
        };
        // Frees the two slots and pushes them as one batch.
        h.pass(&mut due, 0);
        let (stage, staged) = staging.join().unwrap();
        let unstaged = single.join().unwrap();
        let handles = [old[0], old[1], staged, unstaged];
        for (at, a) in handles.iter().enumerate() {
            assert!(
                !handles[at + 1..].contains(a),
                "two timers got the same handle"
            );
        }
        // Both new timers are live and their own: a cancel of each takes its payload.
        assert!(h.shard.cancel_from(Some(&stage), staged.0, staged.1));
        cancel_own(&h.shard, unstaged);
        stage.let_go();
        h.pass(&mut due, 0);
        assert_eq!(h.drops(), 4);
        assert_eq!(h.fired(), 0);
        assert_eq!(h.shard.pending(), 0);
    });
}
