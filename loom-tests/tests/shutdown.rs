//! Shutdown racing the producers: a timer scheduled, reset or cancelled while the reaper
//! winds up is either refused (and handed back to its producer) or handed back by the
//! wind-up; never lost, never both, its payload dropped exactly once.
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
        // A payload cancelled after the wind-up goes with the shard's slots.
        let drops = loom::sync::Arc::clone(&h.drops);
        drop(h);
        assert_eq!(drops.load(loom::sync::atomic::Ordering::SeqCst), 1);
    });
}
