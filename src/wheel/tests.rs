//! Unit tests of the wheel, several named after a trap a peer's users fell into.

use super::*;
use std::rc::Rc;

/// Timers for the tests that want many: fewer under Miri, which interprets every step.
const MANY: u64 = if cfg!(miri) { 3_000 } else { 100_000 };

fn expire_all(wheel: &mut Wheel<u64>, now: u64) -> Vec<(u64, u64)> {
    wheel
        .drain_expired(now)
        .map(|e| (e.deadline, e.value))
        .collect()
}

/// Deadlines on and around every level boundary, from a few starting ticks.
fn boundary_deadlines(now: u64) -> Vec<u64> {
    let mut deadlines = vec![now, now.saturating_add(1), u64::MAX];
    for shift in (6..64).step_by(6) {
        let unit = 1u64 << shift;
        for d in [
            unit - 1,
            unit,
            unit + 1,
            unit.saturating_mul(63),
            unit.saturating_mul(64) - 1,
        ] {
            deadlines.push(now.saturating_add(d));
        }
    }
    deadlines.sort_unstable();
    deadlines.dedup();
    deadlines
}

#[test]
fn never_fires_before_its_deadline_and_fires_at_it() {
    // akka#1547, tokio-timer#14: early fire by rounding. Step to one tick before each
    // deadline, then to the deadline.
    for start in [0, 1, 63, 4095, 1 << 33] {
        let mut wheel = Wheel::new();
        assert!(wheel.poll_expired(start).is_none());
        for (i, &d) in boundary_deadlines(start).iter().enumerate() {
            wheel.insert(d, i as u64);
        }
        for &d in &boundary_deadlines(start) {
            if d > start {
                assert_eq!(expire_all(&mut wheel, d - 1), [], "before {d}");
            }
            let fired = expire_all(&mut wheel, d);
            assert_eq!(fired.len(), 1, "at {d}: {fired:?}");
            assert_eq!(fired[0].0, d);
        }
        assert!(wheel.is_empty());
        assert_eq!(wheel.next_deadline(), None);
    }
}

#[test]
fn deadline_at_or_before_now_fires_on_the_next_poll_without_an_added_tick() {
    // tokio#6866: sleep_until(now) waits an extra millisecond there.
    let mut wheel = Wheel::new();
    wheel.poll_expired(1_000);
    wheel.insert(1_000, 1);
    wheel.insert(3, 2);
    assert_eq!(wheel.next_deadline(), Some(1_000));
    let mut fired = expire_all(&mut wheel, 1_000);
    fired.sort_unstable();
    assert_eq!(fired, [(3, 2), (1_000, 1)]);
}

#[test]
fn far_future_deadlines_do_not_panic_or_collide() {
    // tokio#5183: a far deadline collided with a sentinel value.
    let mut wheel = Wheel::new();
    let max = wheel.insert(u64::MAX, 1);
    let almost = wheel.insert(u64::MAX - 1, 2);
    let half = wheel.insert(1 << 63, 3);
    assert_eq!(wheel.deadline(max), Some(u64::MAX));
    assert_eq!(expire_all(&mut wheel, (1 << 63) - 1), []);
    assert_eq!(expire_all(&mut wheel, 1 << 63), [(1 << 63, 3)]);
    assert_eq!(expire_all(&mut wheel, u64::MAX - 2), []);
    assert_eq!(wheel.cancel(almost), Some(2));
    assert_eq!(expire_all(&mut wheel, u64::MAX), [(u64::MAX, 1)]);
    assert!(!wheel.contains(half));
    // At the end of time, new timers are due at once, still with no panic.
    wheel.insert(5, 4);
    assert_eq!(expire_all(&mut wheel, u64::MAX), [(5, 4)]);
}

#[test]
fn stale_keys_touch_nothing_even_after_slot_reuse() {
    // tokio#5052: a stale DelayQueue key removed another entry.
    let mut wheel = Wheel::new();
    let fired = wheel.insert(1, 10);
    let cancelled = wheel.insert(100, 20);
    assert_eq!(wheel.cancel(cancelled), Some(20));
    assert_eq!(expire_all(&mut wheel, 1), [(1, 10)]);
    // Both slots are reused by the next inserts.
    let a = wheel.insert(500, 30);
    let b = wheel.insert(600, 40);
    let mut slots = [a.index(), b.index()];
    slots.sort_unstable();
    let mut old = [fired.index(), cancelled.index()];
    old.sort_unstable();
    assert_eq!(slots, old);
    for stale in [fired, cancelled] {
        assert_eq!(wheel.cancel(stale), None);
        assert_eq!(wheel.reset(stale, 0), Err(StaleKey));
        assert_eq!(wheel.get(stale), None);
        assert_eq!(wheel.get_mut(stale), None);
        assert_eq!(wheel.deadline(stale), None);
        assert!(!wheel.contains(stale));
    }
    assert_eq!(wheel.len(), 2);
    assert_eq!(expire_all(&mut wheel, 599), [(500, 30)]);
    assert_eq!(expire_all(&mut wheel, 600), [(600, 40)]);
}

#[test]
fn keys_that_were_never_issued_are_rejected() {
    let mut wheel = Wheel::new();
    let real = wheel.insert(10, 1);
    for bits in [
        0,
        1,
        u64::MAX,
        real.to_bits() + 1,
        real.to_bits() ^ (1 << 32),
    ] {
        let key = Key::from_bits(bits);
        if key == real {
            continue;
        }
        assert_eq!(wheel.cancel(key), None);
        assert!(wheel.reset(key, 0).is_err());
    }
    assert_eq!(wheel.get(real), Some(&1));
    assert_eq!(wheel.deadline(real), Some(10));
}

#[test]
fn cancel_gives_memory_back_at_once() {
    // Netty, STPE without removeOnCancel, KAFKA-16663: cancelled timers were kept until
    // their deadline. Here the slots are reused by the next inserts, so a second wave of
    // timers allocates nothing, and the bucket heap is empty again.
    let mut wheel = Wheel::new();
    let keys: Vec<Key> = (0..MANY).map(|i| wheel.insert(3_600_000 + i, i)).collect();
    let slots = wheel.slab.initialized();
    for key in keys {
        assert!(wheel.cancel(key).is_some());
    }
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_deadline(), None);
    assert_eq!(wheel.hierarchy.queued(), 0);
    for i in 0..MANY {
        wheel.insert(7_200_000 + i, i);
    }
    assert_eq!(wheel.slab.initialized(), slots);
}

#[test]
fn reset_moves_a_timer_earlier_and_later() {
    let mut wheel = Wheel::new();
    let a = wheel.insert(10_000, 1);
    let b = wheel.insert(20, 2);
    wheel.reset(a, 5).unwrap();
    wheel.reset(b, 70_000).unwrap();
    assert_eq!(expire_all(&mut wheel, 69_999), [(5, 1)]);
    assert_eq!(wheel.deadline(b), Some(70_000));
    assert_eq!(expire_all(&mut wheel, 70_000), [(70_000, 2)]);
    // Reset into the past: due at the next poll.
    let c = wheel.insert(80_000, 3);
    wheel.reset(c, 1).unwrap();
    assert_eq!(wheel.next_deadline(), Some(70_000));
    assert_eq!(expire_all(&mut wheel, 70_000), [(1, 3)]);
}

#[test]
fn mass_expiry_can_be_taken_in_bounded_passes() {
    // camunda#14882: many timers with one deadline.
    let count = MANY / 10;
    let mut wheel = Wheel::new();
    for i in 0..count {
        wheel.insert(5_000, i);
    }
    let mut seen = vec![false; count as usize];
    let mut passes = 0;
    loop {
        let batch: Vec<_> = wheel
            .drain_expired(5_000)
            .take(count as usize / 10)
            .collect();
        if batch.is_empty() {
            break;
        }
        passes += 1;
        for e in batch {
            assert!(!std::mem::replace(&mut seen[e.value as usize], true));
        }
        // Between passes the wheel accepts new work without losing the rest.
        wheel.insert(6_000, u64::MAX);
    }
    assert_eq!(passes, 10);
    assert!(seen.iter().all(|&s| s));
    assert_eq!(wheel.len(), 10);
}

#[test]
fn next_deadline_is_when_the_earliest_bucket_is_due() {
    let mut wheel = Wheel::new();
    // Level 3 at tick 0: the bucket starts at 262_144 and is due a block (64) before.
    wheel.insert(300_000, 0);
    assert_eq!(wheel.next_deadline(), Some(262_080));
    wheel.insert(5_000, 0); // level 2: starts at 4_096
    assert_eq!(wheel.next_deadline(), Some(4_032));
    let near = wheel.insert(17, 0);
    assert_eq!(wheel.next_deadline(), Some(17));
    wheel.cancel(near);
    assert_eq!(
        wheel.next_deadline(),
        Some(4_032),
        "emptied top bucket is dropped"
    );
    // Cascading moves next_deadline forward until the deadline is exact.
    assert_eq!(wheel.poll_expired(4_032), None);
    assert_eq!(wheel.next_deadline(), Some(4_928)); // level 1, starts at 4_992
    assert_eq!(wheel.poll_expired(4_928), None);
    assert_eq!(wheel.next_deadline(), Some(5_000));
}

#[test]
fn time_never_goes_back() {
    let mut wheel = Wheel::new();
    wheel.poll_expired(100);
    wheel.insert(150, 1);
    assert_eq!(wheel.poll_expired(50), None);
    assert_eq!(wheel.now(), 100);
    assert_eq!(expire_all(&mut wheel, 150), [(150, 1)]);
}

#[test]
fn debug_summarises_instead_of_listing() {
    let mut wheel = Wheel::new();
    for i in 0..MANY {
        wheel.insert(i * 7, i);
    }
    let text = format!("{wheel:?}");
    assert!(text.len() < 200, "{text}");
    assert!(text.contains(&format!("len: {MANY}")), "{text}");
}

#[test]
fn pending_values_are_dropped_with_the_wheel() {
    let tracker = Rc::new(());
    let mut wheel = Wheel::new();
    for i in 0..1_000u64 {
        wheel.insert(i * 13, Rc::clone(&tracker));
    }
    assert_eq!(wheel.drain_expired(5_000).count(), 385);
    assert_eq!(Rc::strong_count(&tracker), 1 + 615);
    drop(wheel);
    assert_eq!(Rc::strong_count(&tracker), 1);
}

#[test]
fn levels_are_made_on_demand() {
    let mut wheel = Wheel::new();
    wheel.insert(10, ());
    assert_eq!(wheel.hierarchy.rows(), 1);
    wheel.insert(5_000, ());
    assert_eq!(wheel.hierarchy.rows(), 4, "level 2 is the fourth row");
    wheel.insert(u64::MAX, ());
    assert_eq!(wheel.hierarchy.rows(), level::MAX_ROWS);
}

/// Timers in the busy level-1 bucket of the spreading tests: more than one tick's share.
const BUSY: u64 = if cfg!(miri) { 1_100 } else { 10_000 };

#[test]
fn a_busy_level_one_bucket_is_moved_down_a_share_per_tick_in_the_block_before() {
    let mut wheel = Wheel::new();
    // Timers in block 3 (ticks 192 to 255): a level-1 bucket, due a block early.
    for i in 0..BUSY {
        wheel.insert(192 + i % 64, i);
    }
    assert_eq!(wheel.next_deadline(), Some(128));
    let (mut fired, mut most_moved) = (0, 0);
    for tick in 0..=256 {
        let before = wheel.cascaded();
        while let Some(expired) = wheel.poll_expired(tick) {
            assert_eq!(expired.deadline, tick, "fired at its own tick");
            fired += 1;
        }
        most_moved = most_moved.max(wheel.cascaded() - before);
    }
    assert_eq!(fired, BUSY as usize);
    assert!(most_moved <= 1_024, "{most_moved} moved in one tick");
}

#[test]
fn a_spread_bucket_catches_up_when_polls_skip_ticks() {
    for polls in [
        &[130u64, 150, 191, 255][..],
        &[129, 191, 255],
        &[200, 255],
        &[255],
    ] {
        let mut wheel = Wheel::new();
        for i in 0..BUSY {
            wheel.insert(192 + i % 64, i);
        }
        let mut fired = 0;
        for &tick in polls {
            while let Some(expired) = wheel.poll_expired(tick) {
                assert!(expired.deadline <= tick, "early, polls {polls:?}");
                fired += 1;
            }
            let due = (0..BUSY).filter(|i| 192 + i % 64 <= tick).count();
            assert_eq!(fired, due, "at {tick}, polls {polls:?}");
        }
        assert!(wheel.is_empty());
    }
}
