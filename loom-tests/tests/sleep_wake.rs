//! A sleep's wake-up, as the sleep drives its timer (see `sleep`): the timer's payload is
//! the task's waker itself, and the sleep learns how its wait stands from the slot's state.
//! Each model makes the calls a sleep makes, in its order, against a reaper's pass on
//! another thread, on a shard with rounded deadlines and on one with exact deadlines:
//! - a poll racing the fire: a poll that finds the timer pending is woken after, and the
//!   poll after that wake-up finds the wait ended, even once the slot holds a new timer;
//! - a drop racing the fire: the timer is cancelled (from the stage or the shard) and its
//!   waker discarded unwoken, or it fires and wakes once, never both;
//! - a poll with a new waker racing the fire: the timer moves to the new waker, or the old
//!   one is woken and the wait has ended;
//! - shutdown racing a poll: the handed-back wake-up, dropped, wakes a task whose poll saw
//!   its timer pending, and that task then finds the timer gone.
//!
//! In every model each waker is dropped exactly once.
#![cfg(loom)]

use loom::thread;
use shardwheel::Callback;
use shardwheel::loom_api::{Due, Shard, discard, is_wake_up, wake_up};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};

/// A waker that counts its wake-ups; its `Arc`'s count tells how many copies live.
struct Count(loom::sync::atomic::AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count(loom::sync::atomic::AtomicUsize::new(0)));
    (Arc::clone(&count), Waker::from(count))
}

fn woken(count: &Count) -> usize {
    count.0.load(Ordering::SeqCst)
}

/// Checks what every model ends with: the waker dropped once.
fn let_go(count: &Arc<Count>) {
    assert_eq!(
        Arc::strong_count(count),
        1,
        "the waker leaked or was dropped twice"
    );
}

/// A shard of sleeps' wake-ups, and the deadline of a timer due at once on it.
struct Sleeps {
    shard: loom::sync::Arc<Shard<Callback>>,
    /// A deadline that the first pass finds due.
    due_at: u64,
    /// The tick and the clock of that pass.
    tick: u64,
    elapsed: u64,
    fired: loom::sync::Arc<AtomicUsize>,
}

impl Sleeps {
    /// A shard that drops a cancelled wake-up as a timer of callbacks does; with exact
    /// deadlines (a tick of 1,000 ns, the timer due within its tick) or rounded ones.
    fn new(exact: bool) -> Self {
        let (tick_nanos, due_at, tick, elapsed) = if exact {
            (1_000, 1_500, 1, 1_500)
        } else {
            (1, 0, 0, 0)
        };
        Sleeps {
            shard: loom::sync::Arc::new(
                Shard::new(usize::MAX, tick_nanos, true, exact).with_discard(discard),
            ),
            due_at,
            tick,
            elapsed,
            fired: loom::sync::Arc::new(AtomicUsize::new(0)),
        }
    }

    /// One reaper pass at the deadline: a fired wake-up runs (wakes its task).
    fn pass(&self, due: &mut Due) {
        let elapsed = self.elapsed;
        let fired = loom::sync::Arc::clone(&self.fired);
        self.shard.pass(
            due,
            self.tick,
            &move || elapsed,
            &move |callback: Callback| {
                fired.fetch_add(1, Ordering::SeqCst);
                callback.run();
            },
        );
    }

    /// A reaper on its own thread: one pass.
    fn reaper(&self) -> thread::JoinHandle<Due> {
        let sleeps = self.share();
        thread::spawn(move || {
            let mut due = Due::new();
            sleeps.pass(&mut due);
            due
        })
    }

    fn share(&self) -> Sleeps {
        Sleeps {
            shard: loom::sync::Arc::clone(&self.shard),
            fired: loom::sync::Arc::clone(&self.fired),
            ..*self
        }
    }

    fn fired(&self) -> usize {
        self.fired.load(Ordering::SeqCst)
    }
}

fn a_poll_racing_the_fire_is_never_lost(exact: bool) {
    loom::model(move || {
        let sleeps = Sleeps::new(exact);
        let (count, waker) = counting();
        let (slot, generation) = sleeps
            .shard
            .schedule(sleeps.due_at, wake_up(waker))
            .unwrap();
        let reaper = sleeps.reaper();
        thread::yield_now();
        // A poll: a timer still pending means the task waits for its wake-up.
        if sleeps.shard.is_pending(slot, generation) {
            while woken(&count) == 0 {
                thread::yield_now();
            }
        }
        let mut due = reaper.join().unwrap();
        // The slot taken again by another timer (the next a thread schedules), which a
        // poll must not take for its own.
        let (other_count, other) = counting();
        let (again, _) = sleeps
            .shard
            .schedule(sleeps.due_at + 100_000, wake_up(other))
            .unwrap();
        assert_eq!(again, slot, "the freed slot is taken again");
        assert!(
            !sleeps.shard.is_pending(slot, generation),
            "a poll after the wake-up finds the wait not ended"
        );
        assert_eq!(woken(&count), 1);
        let_go(&count);
        let unfired = sleeps.shard.wind_up(&mut due);
        assert_eq!(unfired.len(), 1);
        unfired.into_iter().for_each(discard);
        assert_eq!(woken(&other_count), 0);
        let_go(&other_count);
    });
}

#[test]
fn a_poll_racing_the_fire_is_never_lost_rounded() {
    a_poll_racing_the_fire_is_never_lost(false);
}

#[test]
fn a_poll_racing_the_fire_is_never_lost_exact() {
    a_poll_racing_the_fire_is_never_lost(true);
}

/// The sleep dropped (a timeout whose work finished) as its timer fires: from the thread
/// whose stage holds the timer (`Sleep::let_go`'s first try), or from another thread.
fn a_drop_racing_the_fire_wakes_only_for_the_fire(exact: bool, from_stage: bool) {
    loom::model(move || {
        let sleeps = Sleeps::new(exact);
        let (count, waker) = counting();
        let stage = from_stage.then(|| sleeps.shard.register_stage().unwrap());
        let (slot, generation) = match &stage {
            Some(stage) => sleeps
                .shard
                .schedule_staged(stage, sleeps.due_at, wake_up(waker)),
            None => sleeps.shard.schedule(sleeps.due_at, wake_up(waker)),
        }
        .unwrap();
        let reaper = sleeps.reaper();
        let taken = stage
            .as_ref()
            // SAFETY: no other thread of the model has the handle (the reaper works
            // from the stage and its lists).
            .and_then(|stage| unsafe { sleeps.shard.take_staged(stage, slot, generation) });
        let cancelled = match taken {
            Some(callback) => {
                assert!(is_wake_up(&callback));
                discard(callback);
                true
            }
            None => sleeps.shard.cancel_from(stage.as_deref(), slot, generation),
        };
        let mut due = reaper.join().unwrap();
        // A pass that frees what the first left cancelled.
        sleeps.pass(&mut due);
        assert_eq!(sleeps.fired() + usize::from(cancelled), 1, "one winner");
        assert_eq!(
            woken(&count),
            sleeps.fired(),
            "a cancelled timer's waker was woken, or a fired one not"
        );
        drop(stage);
        let _ = sleeps.shard.wind_up(&mut due);
        let_go(&count);
    });
}

#[test]
fn a_drop_racing_the_fire_wakes_only_for_the_fire_rounded() {
    a_drop_racing_the_fire_wakes_only_for_the_fire(false, false);
}

#[test]
fn a_drop_racing_the_fire_wakes_only_for_the_fire_exact() {
    a_drop_racing_the_fire_wakes_only_for_the_fire(true, false);
}

#[test]
fn a_drop_from_the_stage_racing_the_fire_wakes_only_for_the_fire() {
    a_drop_racing_the_fire_wakes_only_for_the_fire(false, true);
}

/// A poll with another task's waker as the timer fires: the sleep cancels the timer and
/// schedules it anew with the new waker, or finds it taken (the wait has ended).
fn a_new_waker_racing_the_fire_is_never_lost(exact: bool) {
    loom::model(move || {
        let sleeps = Sleeps::new(exact);
        let (first_count, first) = counting();
        let (second_count, second) = counting();
        let (slot, generation) = sleeps
            .shard
            .schedule(sleeps.due_at, wake_up(first))
            .unwrap();
        let reaper = sleeps.reaper();
        let moved = sleeps.shard.cancel(slot, generation);
        if moved {
            sleeps
                .shard
                .schedule(sleeps.due_at, wake_up(second))
                .unwrap();
        } else {
            drop(second);
        }
        let mut due = reaper.join().unwrap();
        sleeps.pass(&mut due);
        if moved {
            assert_eq!((woken(&first_count), woken(&second_count)), (0, 1));
        } else {
            assert_eq!((woken(&first_count), woken(&second_count)), (1, 0));
        }
        let _ = sleeps.shard.wind_up(&mut due);
        let_go(&first_count);
        let_go(&second_count);
    });
}

#[test]
fn a_new_waker_racing_the_fire_is_never_lost_rounded() {
    a_new_waker_racing_the_fire_is_never_lost(false);
}

#[test]
fn a_new_waker_racing_the_fire_is_never_lost_exact() {
    a_new_waker_racing_the_fire_is_never_lost(true);
}

/// Shutdown as the task polls: the reaper hands the timer back and the handed-back
/// wake-up is dropped, which wakes the task; a poll that saw the timer pending before is
/// woken, and the poll after finds it gone.
#[test]
fn shutdown_racing_a_poll_wakes_the_task_once() {
    loom::model(|| {
        let sleeps = Sleeps::new(false);
        let (count, waker) = counting();
        let (slot, generation) = sleeps.shard.schedule(1_000, wake_up(waker)).unwrap();
        let shard = loom::sync::Arc::clone(&sleeps.shard);
        let reaper = thread::spawn(move || {
            let mut due = Due::new();
            let unfired = shard.wind_up(&mut due);
            assert_eq!(unfired.len(), 1);
            assert!(is_wake_up(&unfired[0]));
            drop(unfired);
        });
        if sleeps.shard.is_pending(slot, generation) {
            while woken(&count) == 0 {
                thread::yield_now();
            }
        }
        assert!(
            !sleeps.shard.is_pending(slot, generation),
            "the timer is gone"
        );
        reaper.join().unwrap();
        assert_eq!(woken(&count), 1, "woken once");
        let_go(&count);
    });
}
