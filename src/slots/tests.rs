//! The slots' unit tests: taking and freeing, giving memory back, races with lookups.

use super::chunk::{CHUNKS, chunk_len, first_index, locate};
use super::shrink::{KEEP_CHUNKS, SORT_BUDGET};
use super::*;
use std::sync::Arc;

#[test]
fn state_words_round_trip() {
    for generation in [0, 1, GENERATIONS - 1] {
        for state in [FREE, PENDING, FIRING, CANCELLED] {
            assert_eq!(split(word(generation, state)), (generation, state));
            for flag in [RESETTING, QUEUED, STAGED] {
                assert_eq!(split(word(generation, state) | flag), (generation, state));
            }
        }
    }
}

#[test]
fn every_slot_is_located_in_its_chunk_at_its_offset_there() {
    for chunk in 0..CHUNKS {
        let (first, len) = (first_index(chunk) as usize, chunk_len(chunk));
        for offset in [0, 1, len / 2, len - 1] {
            let index = u32::try_from(first + offset).unwrap();
            assert_eq!(locate(index), (chunk, offset), "slot {index}");
        }
    }
}

#[test]
fn released_slots_are_reused_with_the_next_generation() {
    let slots: Slots<u8> = Slots::new();
    let (a, slot) = slots.take().unwrap();
    // SAFETY: just taken, unpublished.
    unsafe { slot.write_payload(7) };
    slot.state.store(word(0, PENDING), Ordering::Release);
    // SAFETY: published, taken once, then released.
    assert_eq!(unsafe { slot.take_payload() }, 7);
    let mut freed = Freed::new();
    slots.release(a, slot, 0, &mut freed);
    assert_ne!(
        slots.take().unwrap().0,
        a,
        "not reusable before it is recycled"
    );
    slots.recycle(&mut freed);
    let (b, again) = slots.take().unwrap();
    assert_eq!(b, a);
    assert_eq!(split(again.state.load(Ordering::Relaxed)), (1, FREE));
    assert!(slots.get(MAX_SLOTS, &Pin::for_slot(MAX_SLOTS)).is_none());
    assert!(
        slots.get(5_000, &Pin::for_slot(5_000)).is_none(),
        "chunk never installed"
    );
}

/// Plays producer and reaper: takes `count` slots, publishes each (generation as it
/// came), then frees them all as the reaper would; returns their indices and
/// generations.
fn take_and_free(slots: &Slots<u64>, count: usize, freed: &mut Freed) -> Vec<(u32, u32)> {
    let taken: Vec<(u32, u32)> = (0..count)
        .map(|_| {
            let (index, slot) = slots.take().unwrap();
            let (generation, _) = split(slot.state.load(Ordering::Relaxed));
            // SAFETY: just taken, unpublished.
            unsafe { slot.write_payload(u64::from(index)) };
            slot.state
                .store(word(generation, PENDING), Ordering::Release);
            (index, generation)
        })
        .collect();
    for &(index, generation) in &taken {
        // SAFETY: published above; the test is its reaper.
        let slot = unsafe { slots.owned(index) }.unwrap();
        // SAFETY: published, taken once here, then released.
        assert_eq!(unsafe { slot.take_payload() }, u64::from(index));
        slots.release(index, slot, generation, freed);
    }
    slots.recycle(freed);
    taken
}

/// Runs the reaper's shrink step until it has nothing left to do soon (the deferred
/// frees need the epoch to move on, which other tests' threads may hold up a while).
fn shrink_until_settled(slots: &Slots<u64>, freed: &mut Freed, pending: usize) {
    for _ in 0..100_000 {
        if !slots.shrink(freed, pending) {
            return;
        }
        std::thread::yield_now();
    }
    panic!("the shrink never settled");
}

/// With nothing pending, shrinks until settled, and checks that all but the chunks kept
/// for good went back.
fn assert_shrinks_to_the_kept_chunks(slots: &Slots<u64>, freed: &mut Freed) {
    shrink_until_settled(slots, freed, 0);
    assert_eq!(frontier(slots), first_index(KEEP_CHUNKS));
}

/// Slots through which 100,000 timers (1,000 under miri) went and were freed, and a
/// shrink begun by a step that saw a twentieth of them still pending (returned): it keeps
/// room for four times that, and has sorted a share of the free stack.
fn a_shrink_begun_with_a_twentieth_pending() -> (Slots<u64>, Freed, usize) {
    let slots: Slots<u64> = Slots::new();
    let mut freed = Freed::new();
    let count = if cfg!(miri) { 1_000 } else { 100_000 };
    take_and_free(&slots, count, &mut freed);
    let early = count / 20;
    assert!(slots.shrink(&mut freed, early));
    (slots, freed, early)
}

fn frontier(slots: &Slots<u64>) -> u32 {
    slots.claimed.load(Ordering::Relaxed) as u32
}

#[test]
fn chunks_all_free_are_given_back_and_stale_handles_find_nothing() {
    let slots: Slots<u64> = Slots::new();
    let mut freed = Freed::new();
    let count = if cfg!(miri) { 300 } else { 20_000 };
    let taken = take_and_free(&slots, count, &mut freed);
    assert_eq!(frontier(&slots), count as u32);
    shrink_until_settled(&slots, &mut freed, 0);
    let keep = first_index(KEEP_CHUNKS);
    assert_eq!(
        frontier(&slots),
        keep,
        "claims start again where the kept chunks end"
    );
    // The last frees may wait for other tests' threads to unpin (the epoch is the
    // process's): pins from here move it on, as any thread's later pins do.
    for _ in 0..10_000 {
        if slots.unfreed() == 0 {
            break;
        }
        epoch::pin().flush();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(slots.unfreed(), 0, "every chunk given back is freed");
    for chunk in 0..CHUNKS {
        let installed = !slots.chunks[chunk].load(Ordering::Relaxed).is_null();
        assert_eq!(installed, chunk < KEEP_CHUNKS, "chunk {chunk}");
    }
    let (above, generation) = *taken.last().unwrap();
    assert!(above >= keep);
    assert!(
        slots.get(above, &Pin::for_slot(above)).is_none(),
        "a stale handle finds no slot"
    );
    // The kept slots are all back on the free stack: taking them claims nothing new.
    let again: Vec<u32> = (0..keep).map(|_| slots.take().unwrap().0).collect();
    assert!(again.iter().all(|&index| index < keep));
    assert_eq!(frontier(&slots), keep);
    // The next claim is in a fresh chunk, at a generation no old handle names.
    let (index, slot) = slots.take().unwrap();
    assert_eq!(index, keep);
    let (fresh_generation, state) = split(slot.state.load(Ordering::Relaxed));
    assert_eq!(state, FREE);
    assert!(
        fresh_generation > generation,
        "{fresh_generation} > {generation}"
    );
    assert!(
        taken
            .iter()
            .all(|&(i, g)| i != index || g < fresh_generation)
    );
}

#[test]
fn a_slot_in_use_keeps_its_chunk_until_it_is_freed() {
    let slots: Slots<u64> = Slots::new();
    let mut freed = Freed::new();
    let count = if cfg!(miri) { 200 } else { 10_000 };
    take_and_free(&slots, count, &mut freed);
    // Taken again in the order the free stack gives them: the last is in the top chunk.
    let mut held_back = None;
    for _ in 0..count {
        let (index, slot) = slots.take().unwrap();
        if locate(index).0 == locate(count as u32 - 1).0 {
            held_back = Some((index, slot));
            break;
        }
    }
    let (index, slot) = held_back.expect("the top chunk's slots are on the stack");
    let generation = split(slot.state.load(Ordering::Relaxed)).0;
    // Slots taken above and not kept go back, as if they had fired.
    shrink_until_settled(&slots, &mut freed, 1);
    assert_eq!(
        frontier(&slots),
        count as u32,
        "the chunk of a slot in use is not given back"
    );
    // SAFETY: taken above, never published.
    unsafe { slot.write_payload(1) };
    slots.release(index, slot, generation, &mut freed);
    shrink_until_settled(&slots, &mut freed, 0);
    assert!(
        frontier(&slots) < count as u32,
        "given back once it is free"
    );
}

// A shrink that began while cancels were still coming stopped at its limit, and the
// reaper slept: the rest stayed until the next pass, which might never come.
#[test]
fn a_shrink_that_ends_high_is_followed_by_the_next_in_the_same_step() {
    // The first step sees a twentieth of the timers still pending: it begins a shrink
    // that keeps room for four times that, and sorts a share of the free stack.
    let (slots, mut freed, _) = a_shrink_begun_with_a_twentieth_pending();
    // The steps after see none pending: once that shrink is done, the next begins.
    assert_shrinks_to_the_kept_chunks(&slots, &mut freed);
}

// A shrink used to take the free stack for itself and sort it a share a pass, while
// producers found the stack empty and claimed new slots above the frontier: churn
// faster than the sorting grew memory while it was being given back.
#[test]
fn producers_take_the_slots_a_shrink_has_still_to_sort_before_new_ones() {
    let slots: Slots<u64> = Slots::new();
    let mut freed = Freed::new();
    let count = if cfg!(miri) { 300 } else { 100_000 };
    take_and_free(&slots, count, &mut freed);
    let top = frontier(&slots);
    // One step begins a shrink and sorts a share of the free slots (the top ones,
    // freed last, which it holds).
    assert!(slots.shrink(&mut freed, 0), "more to sort");
    // Producers take half as many slots as were free: none is claimed anew.
    let taken: Vec<(u32, u32)> = (0..count / 2)
        .map(|_| {
            let (index, slot) = slots.take().unwrap();
            (index, split(slot.state.load(Ordering::Relaxed)).0)
        })
        .collect();
    assert!(
        frontier(&slots) <= top,
        "claimed up to {} of {top} handed out while a shrink sorted the rest",
        frontier(&slots)
    );
    // Given back, they let the shrink end where it would have.
    for (index, generation) in taken {
        // SAFETY: taken above, never published.
        let slot = unsafe { slots.owned(index) }.unwrap();
        slots.release(index, slot, generation, &mut freed);
    }
    assert_shrinks_to_the_kept_chunks(&slots, &mut freed);
}

#[test]
fn timers_coming_back_stop_the_shrink_and_get_the_held_slots() {
    let slots: Slots<u64> = Slots::new();
    let mut freed = Freed::new();
    // A few slots in the top chunk, under a chunk bigger than one step sorts.
    let top = (KEEP_CHUNKS + 1..CHUNKS)
        .find(|&chunk| chunk_len(chunk - 1) > SORT_BUDGET as usize)
        .unwrap();
    let count = first_index(top) as usize + 10;
    take_and_free(&slots, count, &mut freed);
    // One step sorts part of the free stack: the top chunks go, some slots are held.
    assert!(slots.shrink(&mut freed, 0));
    let given_back_to = frontier(&slots);
    assert_eq!(
        given_back_to,
        first_index(top),
        "the first step gives the top chunk back"
    );
    assert!(
        given_back_to > first_index(KEEP_CHUNKS),
        "but not everything yet"
    );
    // Then as many timers as slots are pending: the held slots go back on the stack.
    shrink_until_settled(&slots, &mut freed, count);
    assert!(freed.shrink.is_none(), "the shrink is over");
    assert_eq!(
        frontier(&slots),
        given_back_to,
        "nothing more was given back"
    );
    let mut indices: Vec<u32> = (0..given_back_to)
        .map(|_| slots.take().unwrap().0)
        .collect();
    indices.sort_unstable();
    indices.dedup();
    assert_eq!(indices.len(), given_back_to as usize);
    assert_eq!(
        frontier(&slots),
        given_back_to,
        "every slot kept was on the stack"
    );
}

/// Threads look slots up by index and pop the free stack while the test, as the
/// reaper, hands out and frees slots and gives chunks back, round after round. Under
/// miri, a slot read after its chunk was freed is an error the run reports.
#[test]
fn lookups_race_with_chunks_given_back() {
    let rounds = if cfg!(miri) { 3 } else { 200 };
    let count = if cfg!(miri) { 150 } else { 5_000 };
    let slots: Arc<Slots<u64>> = Arc::new(Slots::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|seed| {
            let (slots, stop) = (Arc::clone(&slots), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut index = seed;
                let mut seen = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    index = (index * 7 + 13) % (count as u32 * 2);
                    let pin = Pin::for_slot(index);
                    if let Some(slot) = slots.get(index, &pin) {
                        seen += slot.state.load(Ordering::Relaxed) & 1;
                    }
                }
                seen
            })
        })
        .collect();
    let mut freed = Freed::new();
    for _ in 0..rounds {
        take_and_free(&slots, count, &mut freed);
        shrink_until_settled(&slots, &mut freed, 0);
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.join().unwrap();
    }
    assert_eq!(frontier(&slots), first_index(KEEP_CHUNKS));
}

/// Resident memory of this process, in bytes.
#[cfg(all(target_os = "linux", not(miri)))]
fn resident_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

// A producer used to build every slot of a fresh chunk before installing it: for the
// chunk of 4M slots here, 200 MB written while its `schedule` call waited.
#[test]
#[cfg(all(target_os = "linux", not(miri)))]
fn installing_a_chunk_does_not_touch_its_slots() {
    let slots: Slots<u64> = Slots::new();
    let chunk = 16;
    let first = first_index(chunk);
    slots.claimed.store(first.into(), Ordering::Relaxed);
    let chunk_bytes = chunk_len(chunk) * std::mem::size_of::<Slot<u64>>();
    let before = resident_bytes();
    let (index, slot) = slots.take().unwrap();
    let grown = resident_bytes().saturating_sub(before);
    assert_eq!(index, first);
    assert!(
        grown < chunk_bytes / 8,
        "installing a {chunk_bytes}-byte chunk made {grown} bytes resident"
    );
    assert_eq!(split(slot.state.load(Ordering::Relaxed)), (0, FREE));
    assert_eq!(slot.wheel_prev(), NIL, "a fresh slot is in no wheel");
    // The fresh slot works: the drop below must find and drop its payload.
    // SAFETY: just taken, unpublished.
    unsafe { slot.write_payload(9) };
    slot.state.store(word(0, PENDING), Ordering::Release);
}

#[test]
fn a_slot_at_the_last_generation_is_retired() {
    let slots: Slots<()> = Slots::new();
    let (a, slot) = slots.take().unwrap();
    let mut freed = Freed::new();
    slots.release(a, slot, GENERATIONS - 2, &mut freed);
    slots.recycle(&mut freed);
    let (again, slot) = slots.take().unwrap();
    assert_eq!(again, a, "the last generation is still used");
    assert_eq!(
        split(slot.state.load(Ordering::Relaxed)),
        (GENERATIONS - 1, FREE)
    );
    slots.release(a, slot, GENERATIONS - 1, &mut freed);
    slots.recycle(&mut freed);
    let (b, _) = slots.take().unwrap();
    assert_ne!(a, b);
}

#[test]
fn concurrent_takers_get_distinct_slots() {
    const PER_THREAD: usize = if cfg!(miri) { 100 } else { 5_000 };
    let slots: Arc<Slots<u64>> = Arc::new(Slots::new());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let slots = Arc::clone(&slots);
            std::thread::spawn(move || {
                (0..PER_THREAD)
                    .map(|_| slots.take().unwrap().0)
                    .collect::<Vec<u32>>()
            })
        })
        .collect();
    let mut all: Vec<u32> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 4 * PER_THREAD);
}

#[test]
fn a_slot_with_a_16_byte_payload_is_40_bytes() {
    // Control (state word), change link and body (deadline, two links, payload): W4's
    // memory per pending timer. A 32-byte body never straddles two cache lines.
    assert_eq!(std::mem::size_of::<Control>(), 4);
    assert_eq!(std::mem::size_of::<Body<[u8; 16]>>(), 32);
    assert_eq!(std::mem::size_of::<Body<crate::Callback>>(), 32);
}

#[test]
fn a_chunk_packs_the_controls_apart_from_the_bodies() {
    let slots = Slots::<[u8; 16]>::new();
    let pin = Pin::NONE;
    let taken: Vec<u32> = (0..64).map(|_| slots.take().unwrap().0).collect();
    let at = |index: u32| {
        let slot = slots.get(index, &pin).unwrap();
        (
            slot.state as *const AtomicU32 as usize,
            slot.change_link as *const AtomicU32 as usize,
            &*slot as *const Body<[u8; 16]> as usize,
        )
    };
    let (first_state, first_link, first_body) = at(taken[0]);
    assert!(
        first_link >= first_state + 4 * 64,
        "the links after the controls"
    );
    for &index in &taken {
        let (state, link, body) = at(index);
        let offset = (index - taken[0]) as usize;
        // The controls one after another, 4 bytes each, then the change links, and the
        // bodies after them all.
        assert_eq!(state, first_state + 4 * offset);
        assert_eq!(link, first_link + 4 * offset);
        assert_eq!(body, first_body + 32 * offset);
        assert!(
            body >= first_link + 4 * 64,
            "slot {index}'s body among the links"
        );
    }
}

/// The slots of a chain through their links, from `first` to its `NIL`.
fn chain_of(slots: &Slots<u64>, first: u32) -> Vec<u32> {
    let mut chain = Vec::new();
    let mut index = first;
    while index != NIL {
        chain.push(index);
        // SAFETY: the chain's slots are the test's, in installed chunks.
        index = unsafe { slots.owned(index) }
            .unwrap()
            .link
            .load(Ordering::Relaxed);
    }
    chain
}

#[test]
fn a_pass_worth_of_free_slots_is_taken_as_one_batch() {
    let slots: Slots<u64> = Slots::new();
    let mut freed = Freed::new();
    let mut taken: Vec<u32> = take_and_free(&slots, 3, &mut freed)
        .into_iter()
        .map(|(index, _)| index)
        .collect();
    slots.recycle(&mut freed);
    // A producer without a stage keeps one slot and leaves the rest on the stack...
    let (single, _) = slots.take().unwrap();
    // ...where a stage takes them with one CAS, chained.
    let first = slots.take_chain().expect("two slots left");
    let mut chain = chain_of(&slots, first);
    assert_eq!(chain.len(), 2);
    assert_eq!(slots.take_chain(), None, "the stack is empty");
    chain.push(single);
    chain.sort_unstable();
    taken.sort_unstable();
    assert_eq!(chain, taken, "each freed slot exactly once");
    // Given back whole, the chain is the next batch taken.
    slots.give_chain(first, &freed);
    assert_eq!(slots.take_chain(), Some(first));
    assert_eq!(chain_of(&slots, first).len(), 2);
}

#[test]
fn batches_stack_up_and_come_off_newest_first() {
    let slots: Slots<u64> = Slots::new();
    let taken: Vec<u32> = (0..5).map(|_| slots.take().unwrap().0).collect();
    // Two passes free two and three of them: two batches.
    for pass in [&taken[..2], &taken[2..]] {
        let mut freed = Freed::new();
        for &index in pass {
            // SAFETY: taken above, never published: the test owns it.
            let slot = unsafe { slots.owned(index) }.unwrap();
            slots.release(index, slot, 0, &mut freed);
        }
        slots.recycle(&mut freed);
    }
    let mut newer = chain_of(&slots, slots.take_chain().unwrap());
    let mut older = chain_of(&slots, slots.take_chain().unwrap());
    newer.sort_unstable();
    older.sort_unstable();
    assert_eq!((&older[..], &newer[..]), (&taken[..2], &taken[2..]));
    assert_eq!(slots.take_chain(), None);
}

/// A producer without a stage takes a batch off the spare stack and pushes the rest back
/// after the shrink ended: the next shrink takes those slots in rather than storing over
/// them (it did, and their chunk could never be given back again).
#[test]
fn slots_pushed_back_on_the_spare_stack_after_a_shrink_reach_the_next() {
    // A first shrink, sorted until the spare stack's top batch is below its limit. A pass
    // sorts for `SORT_TIME` (at least 256 slots): on a loaded machine that takes hundreds
    // of passes, so the loop waits for the state rather than counting passes (a bound of
    // 100 passes made this test fail under load).
    let (slots, mut freed, early) = a_shrink_begun_with_a_twentieth_pending();
    let limit = freed.shrink.as_ref().unwrap().limit;
    let below_limit = |slots: &Slots<u64>| {
        let top = slots.spare.load(Ordering::Relaxed) as u32;
        top == NIL || top < limit
    };
    while !below_limit(&slots) {
        assert!(
            slots.shrink(&mut freed, early),
            "the shrink stopped with the spare stack's top above its limit"
        );
    }
    // A producer's `take` takes a batch...
    let first = slots
        .take_batch(&slots.spare)
        .expect("a batch below the limit");
    // SAFETY: a batch taken, so the test's.
    let kept = unsafe { slots.owned(first) }.unwrap();
    let rest = kept.link.load(Ordering::Relaxed);
    // ...the reaper ends the shrink meanwhile...
    shrink_until_settled(&slots, &mut freed, early);
    assert!(freed.shrink.is_none(), "the first shrink is over");
    // ...and the rest goes back on the spare stack, the first slot to the reaper.
    slots.push_batch(&slots.spare, rest);
    let (generation, _) = split(kept.state.load(Ordering::Relaxed));
    slots.release(first, kept, generation, &mut freed);
    slots.recycle(&mut freed);
    // Nothing pending: the next shrink gives back all but the kept chunks.
    assert_shrinks_to_the_kept_chunks(&slots, &mut freed);
}

/// A pass that frees more than a batch's worth pushes several batches: one thread's stage
/// takes one of them, and the others stay for other threads.
#[test]
fn a_big_pass_frees_its_slots_in_batches() {
    let slots: Slots<u64> = Slots::new();
    let mut freed = Freed::new();
    take_and_free(&slots, 2_500, &mut freed);
    let mut sizes = Vec::new();
    while let Some(first) = slots.take_chain() {
        sizes.push(chain_of(&slots, first).len());
    }
    sizes.sort_unstable();
    assert_eq!(sizes, [452, 1024, 1024]);
}

// A timer of over 64 shards gives each fewer slots than `MAX_SLOTS` (see
// `handle::Handles`): a claim past its limit would be a slot no handle can name.
#[test]
fn claims_stop_at_the_limit() {
    let slots: Slots<u8> = Slots::new().with_limit(100);
    let taken: Vec<u32> = std::iter::from_fn(|| slots.take().map(|(index, _)| index)).collect();
    assert_eq!(taken, (0..100).collect::<Vec<_>>());
    assert!(slots.take().is_none(), "still full");
}
