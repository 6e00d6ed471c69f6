//! A thread's record as a producer: which shard it schedules on, and its stages (see
//! `stage`).
//!
//! Each thread schedules on one shard, through a stage of its own there. One thread-local
//! record holds both its turn (which shard) and its list of stages, keyed by the timer's
//! id and the shard (ids are never reused, so an entry never names another timer's
//! shard). The record has no destructor, so that reaching it costs no check; a second
//! thread-local, set up with the thread's first stage, empties the list as the thread
//! exits, letting go of its stages, which the reapers then collect. Beside the list, the
//! record keeps the stage last looked up, by its key, as a pointer (`Recent`): a thread
//! that schedules and cancels on one timer finds its stage with two compares, not a
//! borrow of the list and a walk of it (some 15 instructions an operation).

use crate::scheduler::Scheduler;
use crate::shard::Shard;
use crate::stage::Stage;
use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Hands producer threads out to shards round-robin.
static NEXT_PRODUCER: AtomicUsize = AtomicUsize::new(0);

/// A thread looks, once every this many timers it schedules, at whether a reaper waits for
/// the core it holds (`Scheduler::look_for_waiting_reaper`): some 10-20 us apart while it
/// schedules flat out, against the 1.4 ms and more the reaper could wait for the thread's
/// slice to end. The look costs a few nanoseconds.
const LOOK_EVERY: u32 = 256;

thread_local! {
    /// This thread's record as a producer: one lookup finds both its shard and its stage
    /// there. It has no destructor (its list is `ManuallyDrop`), so reaching it costs no
    /// check of whether it is alive, and it can be reached even as the thread exits, when
    /// `EXIT` has emptied it.
    static PRODUCER: Producer = const {
        Producer {
            turn: Cell::new(None),
            home: Cell::new((0, 0)),
            scheduled: Cell::new(0),
            stages: RefCell::new(ManuallyDrop::new(Vec::new())),
            recent: Cell::new(None),
        }
    };
    /// Lets go of this thread's stages when it exits: set up with its first stage.
    static EXIT: Exit = const { Exit };
}

/// A thread's record as a producer.
pub(crate) struct Producer {
    /// This thread's shard, modulo the shard count: assigned once, kept after.
    turn: Cell<Option<usize>>,
    /// The last shard count asked for and this thread's shard among that many (`turn`
    /// modulo it); `(0, 0)` until the first (no timer has zero shards).
    home: Cell<(usize, usize)>,
    /// Timers this thread scheduled, modulo 2^32: it looks for a waiting reaper every
    /// `LOOK_EVERY`.
    scheduled: Cell<u32>,
    /// This thread's stages, one per shard it schedules on, let go of by `Exit`.
    stages: RefCell<ManuallyDrop<Vec<Staging>>>,
    /// The stage last found in `stages` (or registered), by its key; `None` until then,
    /// and once `Exit` emptied the list.
    recent: Cell<Option<Recent>>,
}

/// A stage of the thread's list, by its key (see `Producer::stage`). Read only by a
/// scheduler whose id is `timer`, which holds the shards; a shard's registry keeps each
/// stage (`Registry::all`) until the reaper retires it, only once its owner let go and
/// while it still collects it. An owner lets go only as its list drops the stage: at the
/// thread's exit (`Exit` forgets `recent` first), or in `register`, which drops only
/// closed stages, never retired (the reaper stops collecting a stage as it closes it).
#[derive(Clone, Copy)]
struct Recent {
    timer: u64,
    shard: usize,
    stage: NonNull<Stage>,
}

/// Lets go of the thread's stages as it exits (see `PRODUCER`).
struct Exit;

impl Drop for Exit {
    fn drop(&mut self) {
        // Nothing holds the list while thread-local destructors run one after the other;
        // were it held, its stages would stay (a leak, not a fault).
        let producer = producer();
        // Before the stages go: a schedule from a later thread-local destructor finds no
        // stage and goes to the inbox (`register` refuses once `EXIT` is gone).
        producer.recent.set(None);
        if let Ok(mut stages) = producer.stages.try_borrow_mut() {
            drop(std::mem::take(&mut **stages));
        }
    }
}

/// A thread's stage on a shard of a timer, which it lets go of when the thread exits.
struct Staging {
    timer: u64,
    shard: usize,
    stage: Arc<Stage>,
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.stage.let_go();
    }
}

/// This thread's record as a producer. A reference rather than a closure run with it: a
/// schedule's closure owned the payload, so it was built on the stack (to be dropped were
/// the access to fail), and its result was copied out of it on the way back.
#[inline]
pub(crate) fn producer() -> &'static Producer {
    // `try_with`, which is `#[inline]` (`with` is not, and a call to it reaches the record
    // through a function pointer); it cannot fail, as the record has no destructor.
    let record = PRODUCER
        .try_with(ptr::from_ref)
        .expect("a thread-local without a destructor is always there");
    // SAFETY: the record has no destructor (see `PRODUCER`), so its storage is never
    // torn down while the thread runs, destructors of other thread-locals included: it
    // lives until the thread's end. A `&Producer` cannot leave the thread (`Producer` is
    // not `Sync`: its cells), so no reference outlives it.
    unsafe { &*record }
}

impl Producer {
    /// This thread's shard among `shards`: its turn modulo `shards`, kept for the last
    /// count asked for. The division is taken out of the schedule: its result decides
    /// which shard every later load of the schedule reads, so the tens of cycles of a
    /// `div` would stand on the schedule's critical path each time.
    #[inline]
    pub(crate) fn shard(&self, shards: usize) -> usize {
        match self.home.get() {
            (among, shard) if among == shards => shard,
            _ => self.home_among(shards),
        }
    }

    /// `shard` for a count other than the last one asked for.
    #[cold]
    #[inline(never)]
    fn home_among(&self, shards: usize) -> usize {
        let shard = self.turn.get().unwrap_or_else(|| self.take_turn()) % shards;
        self.home.set((shards, shard));
        shard
    }

    /// Counts a timer this thread scheduled; true once every `LOOK_EVERY`.
    #[inline]
    pub(crate) fn count_and_look(&self) -> bool {
        let scheduled = self.scheduled.get().wrapping_add(1);
        self.scheduled.set(scheduled);
        scheduled.is_multiple_of(LOOK_EVERY)
    }

    #[cold]
    fn take_turn(&self) -> usize {
        let turn = NEXT_PRODUCER.fetch_add(1, Ordering::Relaxed);
        self.turn.set(Some(turn));
        turn
    }

    /// This thread's stage on shard `shard` of timer `timer`, if it has one: the one
    /// looked up last, or one found in the list. `scheduler`, the caller's, whose id is
    /// `timer`, keeps it alive (see `Recent`).
    #[inline]
    pub(crate) fn stage<'s, T: Send + 'static>(
        &self,
        scheduler: &'s Scheduler<T>,
        shard: usize,
    ) -> Option<&'s Stage> {
        let timer = scheduler.id();
        let stage = match self.recent.get() {
            Some(recent) if recent.timer == timer && recent.shard == shard => recent.stage,
            _ => self.find_stage(timer, shard)?,
        };
        // SAFETY: a stage of the thread's list keyed by `timer` (now, or when it was
        // recorded in `recent`), which lives as long as `scheduler`, whose id is `timer`
        // (see `Recent`). Shared only: the stage is `Sync`, its contents behind its own
        // handshake.
        Some(unsafe { stage.as_ref() })
    }

    /// `stage` for another key than the last: looks in the list, and records what it
    /// found as the last.
    #[cold]
    #[inline(never)]
    fn find_stage(&self, timer: u64, shard: usize) -> Option<NonNull<Stage>> {
        // The list is borrowed mutably only by `register`, which runs no user code.
        let list = self.stages.try_borrow().ok()?;
        let found = list.iter().find(|s| s.timer == timer && s.shard == shard)?;
        let stage = NonNull::from(&*found.stage);
        self.recent.set(Some(Recent {
            timer,
            shard,
            stage,
        }));
        Some(stage)
    }

    /// Registers a stage on `shard`, shard `index` of timer `timer`, for this thread;
    /// none if it cannot have one (the shard shut down, or the thread is exiting: `Exit`
    /// holds the list, or is gone). Nothing else holds the list while user code runs.
    #[cold]
    #[inline(never)]
    pub(crate) fn register<T>(
        &self,
        timer: u64,
        index: usize,
        shard: &Shard<T>,
    ) -> Option<Arc<Stage>> {
        let mut list = self.stages.try_borrow_mut().ok()?;
        // A thread that is exiting keeps no stage: `Exit` would not let go of it.
        EXIT.try_with(|_| ()).ok()?;
        let stage = shard.register_stage()?;
        // Stages of timers that shut down are forgotten as new ones come.
        list.retain(|staging| !staging.stage.is_closed());
        list.push(Staging {
            timer,
            shard: index,
            stage: Arc::clone(&stage),
        });
        Some(stage)
    }
}

/// Makes the calling thread schedule on shard `index` (modulo a timer's shard count)
/// from now on, rather than on the next shard in turn: a reaper keeps to its own, so that
/// a callback's timers stay on its core and the producers' turns stay spread.
pub(crate) fn keep_to_shard(index: usize) {
    let producer = producer();
    producer.turn.set(Some(index));
    producer.home.set((0, 0));
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::thread;
    use std::time::Duration;

    /// The thread's stages.
    fn stages() -> Vec<Arc<Stage>> {
        let list = producer().stages.borrow();
        list.iter()
            .map(|staging| Arc::clone(&staging.stage))
            .collect()
    }

    #[test]
    fn a_thread_that_exits_lets_go_of_its_stages() {
        let timer = crate::Timer::builder().shards(2).manual().build().unwrap();
        let (first, second) = (timer.clone(), timer.clone());
        let stages = thread::spawn(move || {
            first.schedule(Duration::from_secs(1), || {}).unwrap();
            second.schedule(Duration::from_secs(2), || {}).unwrap();
            let stages = stages();
            assert!(stages.iter().all(|stage| !stage.is_gone()));
            stages
        })
        .join()
        .unwrap();
        assert_eq!(
            stages.len(),
            1,
            "one stage for the thread's shard of the timer"
        );
        assert!(stages[0].is_gone(), "let go of as the thread exited");
        assert_eq!(timer.pending(), 2, "its timers stay");
    }

    /// The stage a lookup gives, as a pointer to compare.
    fn found(timer: &crate::Timer, shard: usize) -> Option<*const Stage> {
        producer()
            .stage(timer.scheduler(), shard)
            .map(ptr::from_ref)
    }

    #[test]
    fn a_thread_that_alternates_between_timers_finds_each_ones_own_stage() {
        let first = crate::Timer::builder().shards(1).manual().build().unwrap();
        let second = crate::Timer::builder().shards(1).manual().build().unwrap();
        thread::spawn(move || {
            assert_eq!(found(&first, 0), None, "no stage before the first schedule");
            let kept = first.schedule(Duration::from_secs(1), || {}).unwrap();
            second.schedule(Duration::from_secs(1), || {}).unwrap();
            let listed: Vec<*const Stage> = stages().iter().map(Arc::as_ptr).collect();
            let [one, two] = listed[..] else {
                panic!("a stage for each timer")
            };
            assert_ne!(one, two);
            for _ in 0..2 {
                assert_eq!(found(&first, 0), Some(one));
                assert_eq!(found(&second, 0), Some(two));
            }
            assert_eq!(found(&first, 1), None, "no such shard");
            // The last one looked up stays readable once its timer shut down and a new
            // stage made the list forget it.
            assert_eq!(found(&second, 0), Some(two));
            assert_eq!(second.shutdown().len(), 1);
            let third = crate::Timer::builder().shards(1).manual().build().unwrap();
            third.schedule(Duration::from_secs(1), || {}).unwrap();
            assert_eq!(stages().len(), 2, "the closed stage forgotten");
            assert_eq!(found(&second, 0), Some(two), "kept by its shard");
            assert!(second.schedule(Duration::from_secs(1), || {}).is_err());
            assert!(first.cancel(kept), "the first timer's stage still found");
            assert_eq!(first.pending(), 0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_schedules_on_its_turn_modulo_each_timers_shards_and_follows_a_new_turn() {
        let three = crate::Timer::builder().shards(3).manual().build().unwrap();
        let two = crate::Timer::builder().shards(2).manual().build().unwrap();
        thread::spawn(move || {
            let on = |timer: &crate::Timer| {
                let handle = timer.schedule(Duration::from_secs(1), || {}).unwrap();
                timer.scheduler().shard_index(handle)
            };
            keep_to_shard(4);
            assert_eq!(on(&three), 1);
            assert_eq!(on(&two), 0);
            assert_eq!(on(&two), 0);
            assert_eq!(on(&three), 1);
            // A new turn replaces what was kept for the last count asked for.
            keep_to_shard(5);
            assert_eq!(on(&three), 2);
            assert_eq!(on(&two), 1);
        })
        .join()
        .unwrap();
    }
}
