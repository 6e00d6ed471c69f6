//! The slab's unit tests: layout, generations, the free list, and giving chunks back.

use super::*;
use std::rc::Rc;

#[test]
fn chunks_double_in_size_and_tile_the_index_range() {
    assert_eq!(
        (
            chunk_of::<FIRST_CHUNK_BITS>(0),
            chunk_of::<FIRST_CHUNK_BITS>(31),
            chunk_of::<FIRST_CHUNK_BITS>(32)
        ),
        (0, 0, 1)
    );
    assert_eq!(
        (
            chunk_of::<FIRST_CHUNK_BITS>(95),
            chunk_of::<FIRST_CHUNK_BITS>(96)
        ),
        (1, 2)
    );
    assert_eq!(
        (
            first_index::<FIRST_CHUNK_BITS>(0),
            first_index::<FIRST_CHUNK_BITS>(1),
            first_index::<FIRST_CHUNK_BITS>(2)
        ),
        (0, 32, 96)
    );
    // Chunk 26 starts at index 2^31 - 32; the cap leaves only its first 32 slots in use.
    assert_eq!(chunk_of::<FIRST_CHUNK_BITS>(MAX_SLOTS - 1), 26);
    assert_eq!(first_index::<FIRST_CHUNK_BITS>(26), (1 << 31) - 32);
    // Miri interprets every step; a shorter span still crosses eight chunk boundaries.
    let span = if cfg!(miri) { 10_000 } else { 2_000_000 };
    for index in (0..span).chain([MAX_SLOTS - 33, MAX_SLOTS - 32, MAX_SLOTS - 1]) {
        let chunk = chunk_of::<FIRST_CHUNK_BITS>(index);
        let offset = index as usize - first_index::<FIRST_CHUNK_BITS>(chunk);
        assert!(
            offset < chunk_len::<FIRST_CHUNK_BITS>(chunk),
            "index {index}"
        );
    }
}

#[test]
fn freed_slot_is_reused_with_a_new_generation() {
    let mut slab = Slab::new();
    let (a, gen_a) = slab.alloc(5, "a", NIL, NIL).unwrap();
    assert_eq!(slab.free(a).0, "a");
    assert!(
        slab.lookup(a, gen_a).is_none(),
        "stale generation must not match"
    );
    let (b, gen_b) = slab.alloc(6, "b", NIL, NIL).unwrap();
    assert_eq!(b, a, "LIFO free list reuses the warm slot");
    assert_ne!(gen_b, gen_a);
    assert_eq!(slab.lookup(b, gen_b).map(Entry::deadline), Some(6));
    assert!(slab.lookup(b, gen_a).is_none());
    assert_eq!(slab.len(), 1);
}

#[test]
fn free_slot_generation_never_matches() {
    let mut slab = Slab::new();
    let (a, generation) = slab.alloc(0, (), NIL, NIL).unwrap();
    slab.free(a);
    // The free slot's own (even) generation is not a valid key either.
    assert!(slab.lookup(a, generation + 1).is_none());
    assert!(slab.lookup(a + 1, 1).is_none(), "never-initialised slot");
    assert!(slab.lookup(u32::MAX, 1).is_none());
}

#[test]
fn slot_is_retired_when_its_generation_would_wrap() {
    let mut slab = Slab::new();
    let (a, _) = slab.alloc(0, 1u8, NIL, NIL).unwrap();
    slab.entry_mut(a).generation = u32::MAX;
    slab.free(a);
    let (b, generation) = slab.alloc(0, 2u8, NIL, NIL).unwrap();
    assert_ne!(b, a, "a slot at the last generation is never reused");
    assert_eq!(generation, 1);
    assert!(slab.lookup(a, 0).is_none() && slab.lookup(a, u32::MAX).is_none());
}

#[test]
fn deadline_round_trips_through_halves() {
    let mut slab = Slab::new();
    for deadline in [0, 1, u64::from(u32::MAX), 1 << 32, u64::MAX - 1, u64::MAX] {
        let (index, _) = slab.alloc(deadline, (), NIL, NIL).unwrap();
        assert_eq!(slab.entry(index).deadline(), deadline);
    }
}

#[test]
fn values_still_held_are_dropped_with_the_slab() {
    let tracker = Rc::new(());
    let mut slab = Slab::new();
    let mut kept = Vec::new();
    for i in 0..100u64 {
        let (index, _) = slab.alloc(i, Rc::clone(&tracker), NIL, NIL).unwrap();
        if i % 3 == 0 {
            drop(slab.free(index).0);
        } else {
            kept.push(index);
        }
    }
    assert_eq!(Rc::strong_count(&tracker), 1 + kept.len());
    drop(slab);
    assert_eq!(Rc::strong_count(&tracker), 1);
}

/// Allocates `count` entries and frees all but those whose index `keep` accepts;
/// returns every key handed out.
fn spike(slab: &mut Slab<u32>, count: u32, keep: impl Fn(u32) -> bool) -> Vec<(u32, u32)> {
    let keys: Vec<(u32, u32)> = (0..count)
        .map(|i| slab.alloc(u64::from(i), i, NIL, NIL).unwrap())
        .collect();
    for &(index, _) in &keys {
        if !keep(index) {
            slab.free(index);
        }
    }
    keys
}

fn shrink_fully(slab: &mut Slab<u32>) {
    let mut steps = 0;
    while slab.shrink() {
        steps += 1;
        assert!(steps < 1_000_000, "the shrink never ends");
    }
}

const SPIKE: u32 = if cfg!(miri) { 3_000 } else { 200_000 };

#[test]
fn top_chunks_go_once_entries_drop_far_below_the_high_water_mark() {
    let mut slab = Slab::new();
    let keys = spike(&mut slab, SPIKE, |index| index % 1_000 == 0);
    shrink_fully(&mut slab);
    let limit = keep_limit::<FIRST_CHUNK_BITS>(SPIKE.div_ceil(1_000), 4, KEEP_CHUNKS);
    assert!(limit < SPIKE / 8);
    // Entries above the limit held values: the chunks wait for them.
    assert_eq!(slab.initialized(), SPIKE);
    for &(index, _) in &keys {
        if index % 1_000 == 0 && index >= limit {
            slab.free(index);
        }
    }
    shrink_fully(&mut slab);
    assert_eq!(
        slab.initialized(),
        limit,
        "the chunks above the limit are freed"
    );
    assert_eq!(slab.bases.len(), chunk_of::<FIRST_CHUNK_BITS>(limit));
    for &(index, generation) in &keys {
        let kept = index % 1_000 == 0 && index < limit;
        assert_eq!(slab.lookup(index, generation).is_some(), kept, "{index}");
    }
    // Every free entry below the limit is listed: allocations fill them before growing.
    let kept = slab.len() as u32;
    let fresh: Vec<(u32, u32)> = (kept..limit + 10)
        .map(|i| slab.alloc(0, i, NIL, NIL).unwrap())
        .collect();
    assert_eq!(slab.initialized(), limit + 10);
    for &(index, generation) in &fresh {
        let old = keys[index as usize].1;
        assert!(
            index < limit || generation > old,
            "slot {index} made again at generation {generation}, an old key had {old}"
        );
    }
    assert_eq!(slab.len() as u32, limit + 10);
}

#[test]
fn a_shrink_that_ends_high_is_followed_by_the_next_at_once() {
    let mut slab = Slab::new();
    // A shrink begins with a twentieth of the entries held, and waits for the last one.
    let keys = spike(&mut slab, SPIKE, |index| index % 20 == 0);
    shrink_fully(&mut slab);
    assert_ne!(slab.shrink.cursor, u32::MAX, "a shrink waits");
    let high = keep_limit::<FIRST_CHUNK_BITS>(SPIKE / 20, 4, KEEP_CHUNKS);
    // All go: the step that frees the chunks above `high` goes on to the next shrink.
    for &(index, _) in &keys {
        if index % 20 == 0 {
            slab.free(index);
        }
    }
    shrink_fully(&mut slab);
    assert!(slab.initialized() < high);
    assert_eq!(
        slab.initialized(),
        first_index::<FIRST_CHUNK_BITS>(KEEP_CHUNKS) as u32
    );
}

#[test]
fn a_shrink_whose_floor_would_wrap_keeps_the_chunks() {
    let mut slab = Slab::new();
    let keys = spike(&mut slab, SPIKE, |index| index == SPIKE - 1);
    shrink_fully(&mut slab);
    assert_ne!(
        slab.shrink.cursor,
        u32::MAX,
        "the shrink waits for the last entry"
    );
    // Meanwhile an entry was reused some 2^31 times.
    slab.top_generation = u32::MAX - 2;
    slab.free(keys.last().unwrap().0);
    shrink_fully(&mut slab);
    assert_eq!(
        slab.initialized(),
        SPIKE,
        "no chunk made again could start at 0"
    );
    assert_eq!(slab.shrink.cursor, u32::MAX);
    let fresh = slab.alloc(0, 0, NIL, NIL).unwrap();
    assert!(keys.iter().all(|&key| key != fresh));
}

#[test]
fn entries_coming_back_stop_the_shrink_and_every_free_entry_is_listed_again() {
    let mut slab = Slab::new();
    // The last entry stays: its chunk, and the chunks below down to the limit, wait.
    spike(&mut slab, SPIKE, |index| index == SPIKE - 1);
    assert!(!slab.shrink(), "one step lists the entries below the limit");
    assert_ne!(
        slab.shrink.cursor,
        u32::MAX,
        "the shrink waits for the last entry"
    );
    // Entries come back in numbers: once the free list runs dry the shrink is given up
    // and every free entry (the high ones left off the list too) is listed again, so
    // the slab does not grow.
    let back: Vec<u32> = (1..SPIKE)
        .map(|i| slab.alloc(0, i, NIL, NIL).unwrap().0)
        .collect();
    assert_eq!(
        slab.initialized(),
        SPIKE,
        "no entry was left off the free list"
    );
    assert_eq!(slab.len() as u32, SPIKE);
    assert!(!slab.shrink());
    assert_eq!(slab.shrink.cursor, u32::MAX, "no shrink under way");
    assert!(back.iter().all(|&index| index < SPIKE - 1));
}

#[test]
fn a_retired_entry_is_never_listed_by_a_shrink() {
    let mut slab = Slab::new();
    let (retiring, _) = slab.alloc(0, 0u32, NIL, NIL).unwrap();
    slab.entry_mut(retiring).generation = u32::MAX;
    slab.free(retiring);
    spike(&mut slab, SPIKE, |_| false);
    // The slab holds one entry for each alloc below: none may be the retired one.
    let held: Vec<u32> = (0..10)
        .map(|_| slab.alloc(0, 0, NIL, NIL).unwrap().0)
        .collect();
    shrink_fully(&mut slab);
    let limit = slab.initialized();
    let after: Vec<u32> = (10..limit)
        .map(|_| slab.alloc(0, 0, NIL, NIL).unwrap().0)
        .collect();
    assert!(held.iter().chain(&after).all(|&index| index != retiring));
}

#[test]
fn entry_for_a_sixteen_byte_payload_takes_36_bytes() {
    assert_eq!(std::mem::size_of::<Entry<[u8; 16]>>(), 36);
    assert_eq!(std::mem::size_of::<Entry<u64>>(), 32);
}
