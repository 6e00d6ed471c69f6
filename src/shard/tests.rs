//! The shard's unit tests: payloads crossing threads once each, and the wind-up's edges.

use super::*;
use crate::due::Due;
use crate::slots::Freed;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

/// A shard with exact deadlines and a tick of 1,000 ns, whose payloads are boxed (so
/// that one moved out twice is a double free that miri and the allocator see).
fn exact_shard() -> Shard<Box<u64>> {
    Shard::new(usize::MAX, 1_000, false, true)
}

/// Holds a timer due at 1,500 ns: its tick (1) has come at 1,000 ns, its deadline not.
fn held_timer(shard: &Shard<Box<u64>>, due: &mut Due, payload: u64) -> (u32, u32) {
    let handle = shard.schedule(1_500, Box::new(payload)).unwrap();
    shard.pass(due, 1, &|| 1_000, &|_| panic!("not due"));
    assert_eq!(due.next_near(), Some(1_500), "held until its deadline");
    handle
}

// The wind-up used to hand back held timers by slot index alone: a held timer that was
// cancelled left its index in the heap, its slot was freed and taken again by a
// producer still to find the inbox closed, and the wind-up took that producer's
// payload, which the producer then took again (moved out twice, the slot freed twice,
// `pending` wrapped).
#[test]
fn the_wind_up_leaves_a_held_slot_that_moved_on_to_its_new_producer() {
    let shard = exact_shard();
    let mut due = Due::new();
    let (index, generation) = held_timer(&shard, &mut due, 1);
    assert!(shard.cancel(index, generation));
    shard.pass(&mut due, 1, &|| 1_000, &|_| panic!("cancelled"));
    // A producer takes the freed slot and marks it pending: `schedule` up to its push.
    let (taken, slot) = shard.slots.take().unwrap();
    assert_eq!(taken, index, "the freed slot is the first on the stack");
    // SAFETY: just taken, not published.
    unsafe { slot.write_payload(Box::new(2)) };
    slot.state
        .store(slots::word(generation + 1, PENDING), Ordering::Relaxed);
    let unfired = shard.wind_up(&mut due);
    assert!(
        unfired.is_empty(),
        "handed back {unfired:?}, not the reaper's"
    );
    // The producer's push is refused, and the slot is still its own to give back.
    assert_eq!(shard.inbox.push(taken, &slot.link), Err(Closed));
    // SAFETY: written above, never published.
    assert_eq!(*unsafe { slot.take_payload() }, 2);
    let mut freed = Freed::new();
    shard.slots.release(taken, slot, generation + 1, &mut freed);
    shard.slots.recycle(&mut freed);
}

/// Producers schedule, reset and cancel boxed payloads while a reaper thread runs
/// passes, then the reaper winds up: every payload is fired, cancelled or handed back,
/// once. Small enough for miri, whose race detector and leak check watch the payload
/// cells, the free stack and the inboxes as they are handed between threads.
#[test]
fn payloads_cross_threads_once_each() {
    const PER_PRODUCER: u64 = if cfg!(miri) { 40 } else { 20_000 };
    let shard: Arc<Shard<Box<u64>>> = Arc::new(Shard::new(usize::MAX, 1, true, true));
    let stop = Arc::new(AtomicBool::new(false));
    let fired = Arc::new(AtomicUsize::new(0));
    let reaper = {
        let (shard, stop, fired) = (Arc::clone(&shard), Arc::clone(&stop), Arc::clone(&fired));
        std::thread::spawn(move || {
            let mut due = Due::new();
            let mut now = 0;
            let count = |payload: Box<u64>| {
                assert!(*payload < 2 * PER_PRODUCER);
                fired.fetch_add(1, Ordering::Relaxed);
            };
            while !stop.load(Ordering::Acquire) {
                shard.pass(&mut due, now, &|| now, &count);
                now += 1;
            }
            shard.pass(&mut due, now, &|| now, &count);
            shard.wind_up(&mut due).len()
        })
    };
    // Producer 0 stages its timers, and hands some to a thread that cancels them; producer
    // 1 pushes each on the inbox.
    let (send, receive) = std::sync::mpsc::channel::<(u32, u32)>();
    let canceller = {
        let shard = Arc::clone(&shard);
        std::thread::spawn(move || {
            receive
                .into_iter()
                .filter(|&(slot, generation)| shard.cancel(slot, generation))
                .count()
        })
    };
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let shard = Arc::clone(&shard);
            let send = send.clone();
            std::thread::spawn(move || {
                let stage = (p == 0).then(|| shard.register_stage().expect("running"));
                let mut cancelled = 0;
                for i in 0..PER_PRODUCER {
                    let id = p * PER_PRODUCER + i;
                    let (slot, generation) = match &stage {
                        Some(stage) => shard.schedule_staged(stage, id % 50, Box::new(id)),
                        None => shard.schedule(id % 50, Box::new(id)),
                    }
                    .expect("no bound");
                    if i % 3 == 0 {
                        shard.reset(slot, generation, id % 7);
                    }
                    if i % 5 == 1 {
                        send.send((slot, generation)).unwrap();
                    } else if i % 2 == 0 && shard.cancel_from(stage.as_deref(), slot, generation) {
                        cancelled += 1;
                    }
                }
                if let Some(stage) = stage {
                    stage.let_go();
                }
                cancelled
            })
        })
        .collect();
    drop(send);
    let cancelled: usize = producers
        .into_iter()
        .map(|p| p.join().unwrap())
        .sum::<usize>()
        + canceller.join().unwrap();
    stop.store(true, Ordering::Release);
    let unfired = reaper.join().unwrap();
    assert_eq!(
        fired.load(Ordering::Relaxed) + cancelled + unfired,
        2 * PER_PRODUCER as usize
    );
    assert_eq!(shard.pending(), 0);
}

/// A timer its own thread cancels while it is still staged never reaches the reaper: its
/// slot is the thread's next, in the next generation, with no pass in between.
#[test]
fn a_timer_cancelled_while_staged_gives_its_slot_back_to_its_owner() {
    let shard = exact_shard();
    let stage = shard.register_stage().unwrap();
    let (index, generation) = shard.schedule_staged(&stage, 5_000, Box::new(1)).unwrap();
    assert!(shard.cancel_from(Some(&stage), index, generation));
    assert!(!shard.cancel_from(Some(&stage), index, generation), "once");
    let again = shard.schedule_staged(&stage, 5_000, Box::new(2)).unwrap();
    assert_eq!(again, (index, generation + 1));
    assert_eq!(
        shard.inbox.take_all(),
        crate::slab::NIL,
        "nothing handed over"
    );
    assert_eq!(shard.pending(), 1);
    // The timer left staged reaches the reaper when it is due, and fires.
    let mut due = Due::new();
    let fired = AtomicUsize::new(0);
    let count = |payload: Box<u64>| {
        assert_eq!(*payload, 2);
        fired.fetch_add(1, Ordering::Relaxed);
    };
    shard.pass(&mut due, 4, &|| 4_999, &count);
    assert_eq!(fired.load(Ordering::Relaxed), 0, "not due yet");
    shard.pass(&mut due, 5, &|| 5_000, &count);
    assert_eq!(fired.load(Ordering::Relaxed), 1);
    assert_eq!(shard.pending(), 0);
}

/// A timer another thread cancels while it is staged is freed by whoever hands the stage
/// over, once, and never fires; the stage's own cancels and schedules go on meanwhile.
#[test]
fn a_staged_timer_cancelled_by_another_thread_is_dropped_once() {
    let shard = exact_shard();
    let stage = shard.register_stage().unwrap();
    let (index, generation) = shard.schedule_staged(&stage, 5_000, Box::new(1)).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| assert!(shard.cancel(index, generation)));
    });
    assert!(!shard.cancel_from(Some(&stage), index, generation));
    let mut due = Due::new();
    shard.pass(&mut due, 9, &|| 9_000, &|_| panic!("cancelled"));
    assert_eq!(shard.pending(), 0);
    assert!(shard.wind_up(&mut due).is_empty());
    let stats = shard.stats();
    assert_eq!((stats.scheduled, stats.cancelled), (1, 1));
}

/// One pass collects every stage holding a timer due (in one round of the take's steps),
/// leaves those holding none, and skips one whose owner is inside, which hands its timers
/// over as it leaves.
#[test]
fn a_pass_collects_every_stage_holding_a_timer_due() {
    let shard = exact_shard();
    let stages: Vec<_> = (0..4).map(|_| shard.register_stage().unwrap()).collect();
    for (i, stage) in stages.iter().enumerate() {
        let deadline = if i == 3 { 9_000 } else { 5_000 };
        shard
            .schedule_staged(stage, deadline, Box::new(i as u64))
            .unwrap();
    }
    let mut due = Due::new();
    let fired = std::sync::Mutex::new(Vec::new());
    let record = |payload: Box<u64>| fired.lock().unwrap().push(*payload);
    let sorted = || {
        let mut fired = fired.lock().unwrap().clone();
        fired.sort_unstable();
        fired
    };
    // The pass before the deadlines picks the stages up; the owner of stage 2 is inside
    // at the next one.
    shard.pass(&mut due, 4, &|| 4_999, &record);
    assert!(stages[2].try_own());
    let heavy = || crate::barrier::HEAVY_CALLS.with(|calls| calls.get());
    let before = heavy();
    shard.pass(&mut due, 5, &|| 5_000, &record);
    assert_eq!(
        heavy() - before,
        2,
        "one heavy fence to take the three stages, one to ask stage 2's owner"
    );
    assert_eq!(sorted(), [0, 1], "stage 2's owner is inside");
    assert!(stages[2].is_asked(), "the reaper asked it");
    shard.leave(&stages[2]);
    shard.pass(&mut due, 5, &|| 5_000, &record);
    assert_eq!(sorted(), [0, 1, 2], "handed over as its owner left");
    assert_eq!(shard.pending(), 1, "stage 3's timer is not due");
}

/// A staged timer due at the end of time (`u64::MAX`, where a deadline saturates) fires
/// when the clock gets there: the stage records it one nanosecond early, as `u64::MAX`
/// says that nothing is staged.
#[test]
fn a_staged_timer_due_at_the_end_of_time_fires_there() {
    let shard = exact_shard();
    let stage = shard.register_stage().unwrap();
    shard
        .schedule_staged(&stage, u64::MAX, Box::new(7))
        .unwrap();
    let mut due = Due::new();
    let fired = std::sync::Mutex::new(Vec::new());
    let record = |payload: Box<u64>| fired.lock().unwrap().push(*payload);
    // One pass collects the stage, the next fires what it took in.
    for _ in 0..2 {
        shard.pass(&mut due, u64::MAX / 1_000, &|| u64::MAX, &record);
    }
    assert_eq!(*fired.lock().unwrap(), [7]);
}

/// A thread takes the slots a pass freed as one batch into its stage; when it lets go,
/// the reaper gives the batch's unused slots back to the shard with the stage's other
/// free slots, and the next thread reuses them all rather than claiming new ones.
#[test]
fn a_stage_that_lets_go_gives_its_batch_of_free_slots_back() {
    let shard = exact_shard();
    let mut due = Due::new();
    let handles: Vec<(u32, u32)> = (0..3)
        .map(|payload| shard.schedule(5_000, Box::new(payload)).unwrap())
        .collect();
    let not_due = |_: Box<u64>| panic!("not due");
    shard.pass(&mut due, 1, &|| 1_000, &not_due);
    for (index, generation) in handles {
        assert!(shard.cancel(index, generation));
    }
    // Frees the three slots: one batch.
    shard.pass(&mut due, 1, &|| 1_000, &not_due);
    let first = shard.register_stage().unwrap();
    let (index, generation) = shard.schedule_staged(&first, 5_000, Box::new(3)).unwrap();
    assert!(shard.cancel_from(Some(&first), index, generation));
    first.let_go();
    shard.pass(&mut due, 1, &|| 1_000, &not_due);
    let second = shard.register_stage().unwrap();
    for payload in 4..7 {
        let (index, _) = shard
            .schedule_staged(&second, 5_000, Box::new(payload))
            .unwrap();
        assert!(index < 3, "slot {index} is new");
    }
    assert_eq!(shard.slots.claimed(), 3);
}

/// The owner's cancel of a timer already handed over (or pushed on the inbox) waits in its
/// stage, not on the list of changes, and the reaper frees it when it collects the stage:
/// at once the first time, then once a tidy interval, and only the cancels (the staged
/// timer stays, as it is not due).
#[test]
fn the_owners_cancels_of_timers_handed_over_wait_in_its_stage_for_a_tidy_pass() {
    let shard = exact_shard();
    let stage = shard.register_stage().unwrap();
    let state = |index: u32| slots::split(shard.slot(index).state.load(Ordering::Relaxed));
    // A staged timer gives the stage a slot in the first chunk; two more go on the inbox.
    shard
        .schedule_staged(&stage, 50_000_000, Box::new(0))
        .unwrap();
    let inbox: Vec<(u32, u32)> = (1..3)
        .map(|payload| shard.schedule(50_000_000, Box::new(payload)).unwrap())
        .collect();
    let (first, first_generation) = inbox[0];
    assert!(shard.cancel_from(Some(&stage), first, first_generation));
    assert!(shard.changes.is_empty(), "not on the list of changes");
    assert!(stage.has_cancels());
    assert_eq!(state(first), (first_generation, slots::CANCELLED));
    let mut due = Due::new();
    let not_due = |_: Box<u64>| panic!("not due");
    // The pass takes the cancelled timer off the inbox, then its cancel from the stage.
    shard.pass(&mut due, 1, &|| 1_000, &not_due);
    assert_eq!(state(first), (first_generation + 1, slots::FREE), "freed");
    assert!(!stage.has_cancels());
    assert_eq!(shard.pending(), 2);
    let (second, second_generation) = inbox[1];
    assert!(shard.cancel_from(Some(&stage), second, second_generation));
    shard.pass(&mut due, 2, &|| 2_000, &not_due);
    assert_eq!(
        state(second),
        (second_generation, slots::CANCELLED),
        "waits for the tidy interval"
    );
    let tidy = 1_000 + clock::nanos(TIDY_INTERVAL);
    shard.pass(&mut due, tidy / 1_000, &|| tidy, &not_due);
    assert_eq!(state(second), (second_generation + 1, slots::FREE));
    assert_eq!(stage.min(), Some(50_000_000), "the staged timer stays");
    assert_eq!(shard.pending(), 1);
    let stats = shard.stats();
    assert_eq!((stats.scheduled, stats.cancelled), (3, 2));
}

/// A stage holding a timer due whose owner is inside (preempted there, say) stays in the
/// reaper's plan, a retry away, so that its timers are not left waiting unseen for as long
/// as the owner is kept off its CPU; once the owner leaves, the next pass fires them.
#[test]
fn a_stage_whose_owner_was_asked_stays_in_the_plan() {
    let shard = exact_shard();
    let stage = shard.register_stage().unwrap();
    shard.schedule_staged(&stage, 5_000, Box::new(1)).unwrap();
    let mut due = Due::new();
    shard.pass(&mut due, 4, &|| 4_999, &|_| panic!("not due"));
    assert_eq!(shard.next_staged(&due, 4_999), Some(5_000));
    assert!(stage.try_own(), "the owner is inside, and stays");
    shard.pass(&mut due, 5, &|| 5_000, &|_| panic!("its owner is inside"));
    assert!(stage.is_asked());
    let retry = 5_000 + clock::nanos(super::staged::ASKED_RETRY);
    assert_eq!(
        shard.next_staged(&due, 5_000),
        Some(retry),
        "asked, and planned for"
    );
    assert_eq!(shard.next_staged(&due, retry + 7), Some(retry + 1_000_007));
    // The owner goes on without leaving; the reaper comes back at the retry and asks.
    shard.pass(&mut due, 6, &|| 6_000, &|_| panic!("its owner is inside"));
    stage.answer();
    let fired = std::sync::Mutex::new(Vec::new());
    assert_eq!(stage.leave(), crate::stage::Leave::Left);
    shard.pass(&mut due, 7, &|| 7_000, &|payload| {
        fired.lock().unwrap().push(*payload)
    });
    assert_eq!(*fired.lock().unwrap(), [1], "taken once the owner left");
}

/// A drain stops the reapers once its bound has passed, and a reaper's last pass fires what
/// is due by then; an owner inside its stage during that pass is asked, and hands its
/// timers over only as the wind-up closes the stage: those due fire then, rather than
/// being handed back.
#[test]
fn the_wind_up_fires_what_an_owner_inside_its_stage_hands_over_due() {
    let shard = exact_shard();
    let stage = shard.register_stage().unwrap();
    shard.schedule_staged(&stage, 5_000, Box::new(1)).unwrap();
    shard.schedule_staged(&stage, 90_000, Box::new(2)).unwrap();
    let mut due = Due::new();
    shard.pass(&mut due, 4, &|| 4_999, &|_| panic!("not due"));
    assert!(stage.try_own(), "the owner is inside, and stays");
    shard.stop();
    let fired = std::sync::Mutex::new(Vec::new());
    let record = |payload: Box<u64>| fired.lock().unwrap().push(*payload);
    shard.pass(&mut due, 6, &|| 6_000, &record);
    assert!(fired.lock().unwrap().is_empty(), "its owner is inside");
    let unfired = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            shard.leave(&stage);
        });
        shard.wind_up_firing(&mut due, 6, &|| 6_000, &record)
    });
    assert_eq!(*fired.lock().unwrap(), [1], "due by the last pass: fired");
    assert_eq!(unfired.into_iter().map(|p| *p).collect::<Vec<_>>(), [2]);
}
