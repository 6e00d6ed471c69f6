//! A rescue (see `shard::rescue`): a pass made by another thread than the reaper's, on the
//! same wheel, handed between them by the wheel's lock, while a producer cancels. The
//! reaper-only bookkeeping (the generations it reads Relaxed as its own, the wheel's
//! links) must be seen by whichever thread holds the wheel next: every timer fires once
//! or is cancelled, its payload dropped once, whichever thread's pass takes it.
#![cfg(loom)]

mod support;

use loom::sync::atomic::Ordering;
use loom::sync::{Arc, Mutex};
use loom::thread;
use shardwheel::loom_api::Due;
use support::Harness;

#[test]
fn a_rescue_pass_on_another_thread_takes_the_wheel_as_the_reaper_left_it() {
    loom::model(|| {
        let h = Harness::new();
        let wheel = Arc::new(Mutex::new(Due::new()));
        h.shard.schedule(0, h.payload(1)).unwrap();
        let (later, generation) = h.shard.schedule(5, h.payload(2)).unwrap();
        let passes: Vec<_> = (0..2)
            .map(|_| {
                let (h, wheel) = (h.clone(), Arc::clone(&wheel));
                // The reaper, and a sibling rescuing it.
                thread::spawn(move || h.pass(&mut wheel.lock().unwrap(), 0))
            })
            .collect();
        let cancelled = h.shard.cancel(later, generation);
        for pass in passes {
            pass.join().unwrap();
        }
        let mut due = wheel.lock().unwrap();
        h.pass(&mut due, 5);
        h.pass(&mut due, 5);
        assert_eq!(
            h.fired() + usize::from(cancelled),
            2,
            "each timer fired or cancelled"
        );
        let later_fired = h.fired_values.load(Ordering::SeqCst) == 3;
        assert_eq!(
            later_fired, !cancelled,
            "the later timer fired or was cancelled"
        );
        assert_eq!(h.drops(), 2, "each payload dropped once");
        assert_eq!(h.shard.pending(), 0);
    });
}
