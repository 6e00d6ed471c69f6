//! The stage handshake when the kernel refuses its barrier (see `barrier`): `light` is a
//! compiler fence and `heavy` fences the reaper alone, so an owner's entry may sit in its
//! store buffer while the reaper reads it out. The reaper must then take no stage on
//! that reading (it asks the owner instead), or both would touch the stage's contents
//! at once, which loom reports. With `Stage::settle` taking the stage whenever the owner
//! looks out, whatever the fence did, this model fails (a causality violation on the
//! stage's contents).
#![cfg(loom)]

mod support;

use loom::thread;
use shardwheel::loom_api::{Due, refuse_barriers};
use support::Harness;

#[test]
fn an_unfenced_reaper_never_takes_a_stage_its_owner_may_be_in() {
    loom::model(|| {
        refuse_barriers(true);
        let h = Harness::new();
        let stage = h.shard.register_stage().unwrap();
        let mut due = Due::new();
        // Picks the stage up.
        h.pass(&mut due, 0);
        let owner = {
            let (h, stage) = (h.clone(), stage.clone());
            thread::spawn(move || drop(h.shard.schedule_staged(&stage, 5, h.payload(1))))
        };
        h.pass(&mut due, 10);
        owner.join().unwrap();
        // The owner lets go: its stage is taken on `let_go`'s Release, fence or none.
        stage.let_go();
        h.pass(&mut due, 10);
        refuse_barriers(false);
        assert_eq!((h.fired(), h.drops()), (1, 1), "fired once, dropped once");
    });
}
