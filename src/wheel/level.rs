//! Where a deadline goes in the hierarchy: level and slot arithmetic, and the buckets.
//!
//! Level `L` has 64 slots of `64^L` ticks each, and slot = bits `6L..6L+6` of the
//! deadline. A deadline goes to the lowest level whose current rotation contains it: the
//! level of the highest bit in which it differs from the wheel's current tick. Its bucket
//! is then due at the deadline rounded down to a multiple of `64^L` (the bucket's first
//! tick), which is always after the current tick, so every pending bucket lies ahead of
//! the wheel and none is ever passed over. Eleven levels cover the whole `u64` tick range,
//! the last using only 16 of its slots.

use crate::slab::NIL;

/// Bits of the deadline per level, so 64 slots.
pub(super) const LEVEL_BITS: u32 = 6;
/// Slots per level.
pub(super) const SLOTS: usize = 1 << LEVEL_BITS;
/// Levels needed for every `u64` deadline: ceil(64 / 6).
pub(super) const MAX_LEVELS: usize = 64usize.div_ceil(LEVEL_BITS as usize);

/// The bucket a deadline belongs in, seen from the wheel's current tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Placement {
    pub(super) level: usize,
    pub(super) slot: usize,
    /// The bucket's first tick: when it must be processed.
    pub(super) due: u64,
}

impl Placement {
    /// The bucket's number among all buckets, `level * 64 + slot`.
    pub(super) fn bucket(self) -> usize {
        self.level * SLOTS + self.slot
    }
}

/// Places `deadline` relative to the current tick `now`. A deadline at or before `now` goes
/// to the level-0 bucket of `now`, due at once: it fires at the next poll, with no tick
/// added (tokio#6866 adds one).
#[inline]
pub(super) fn place(now: u64, deadline: u64) -> Placement {
    if deadline <= now {
        return Placement {
            level: 0,
            slot: now as usize % SLOTS,
            due: now,
        };
    }
    // Or-ing in the level-0 mask makes "differs only in the lowest 6 bits" level 0.
    let highest_difference = 63 - ((now ^ deadline) | (SLOTS as u64 - 1)).leading_zeros();
    let level = (highest_difference / LEVEL_BITS) as usize;
    debug_assert!(level < MAX_LEVELS);
    let shift = LEVEL_BITS * level as u32;
    Placement {
        level,
        slot: (deadline >> shift) as usize % SLOTS,
        due: deadline & !((1u64 << shift) - 1),
    }
}

/// One slot of one level: the head of an intrusive list of entries through the slab.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bucket {
    /// First entry, or `NIL` when the bucket is empty.
    pub(super) head: u32,
    /// Whether the bucket heap holds this bucket (at `due`). It may stay set for a while
    /// after the bucket empties; see `bucket_heap`.
    pub(super) queued: bool,
    /// When the bucket is due; meaningful while it is non-empty or queued.
    pub(super) due: u64,
}

impl Bucket {
    const EMPTY: Bucket = Bucket {
        head: NIL,
        queued: false,
        due: 0,
    };
}

/// The 64 buckets of one level.
pub(super) type Level = [Bucket; SLOTS];

pub(super) const EMPTY_LEVEL: Level = [Bucket::EMPTY; SLOTS];

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(now: u64, deadline: u64) -> (usize, usize, u64) {
        let p = place(now, deadline);
        (p.level, p.slot, p.due)
    }

    #[test]
    fn past_and_present_deadlines_are_due_now() {
        assert_eq!(placed(0, 0), (0, 0, 0));
        assert_eq!(placed(100, 3), (0, 100 % 64, 100));
        assert_eq!(placed(u64::MAX, 0), (0, 63, u64::MAX));
    }

    #[test]
    fn level_boundaries_from_zero() {
        assert_eq!(placed(0, 1), (0, 1, 1));
        assert_eq!(placed(0, 63), (0, 63, 63));
        assert_eq!(placed(0, 64), (1, 1, 64));
        assert_eq!(placed(0, 127), (1, 1, 64));
        assert_eq!(placed(0, 4095), (1, 63, 4032));
        assert_eq!(placed(0, 4096), (2, 1, 4096));
        assert_eq!(placed(0, (1 << 60) - 1), (9, 63, 63 << 54));
        assert_eq!(placed(0, 1 << 60), (10, 1, 1 << 60));
        assert_eq!(placed(0, u64::MAX), (10, 15, 15 << 60));
    }

    #[test]
    fn level_depends_on_the_rotation_not_the_distance() {
        // One tick ahead but across a level-0 rotation: level 1, due exactly then.
        assert_eq!(placed(63, 64), (1, 1, 64));
        // 64 ticks ahead inside one level-1 rotation: level 1.
        assert_eq!(placed(64, 128), (1, 2, 128));
        // Across the level-1 rotation boundary.
        assert_eq!(placed(4095, 4096), (2, 1, 4096));
        assert_eq!(placed(u64::MAX - 1, u64::MAX), (0, 63, u64::MAX));
    }

    #[test]
    fn a_bucket_is_always_due_after_now_and_never_after_the_deadline() {
        let edges = |x: u64| {
            let mut v = vec![x, x.saturating_add(1), x.saturating_sub(1)];
            for shift in (0..64).step_by(6) {
                let unit = 1u64 << shift;
                v.push(x.saturating_add(unit));
                v.push(x.saturating_add(unit - 1));
                v.push(x | (unit - 1));
                v.push((x & !(unit - 1)).saturating_add(unit));
            }
            v
        };
        let nows = [
            0,
            1,
            63,
            64,
            4095,
            4096,
            1 << 40,
            u64::MAX / 3,
            u64::MAX - 64,
        ];
        for now in nows {
            for deadline in edges(now) {
                let p = place(now, deadline);
                assert!(p.level < MAX_LEVELS && p.slot < SLOTS);
                if deadline <= now {
                    assert_eq!(p.due, now);
                    continue;
                }
                assert!(p.due > now, "now {now} deadline {deadline}: {p:?}");
                assert!(p.due <= deadline, "now {now} deadline {deadline}: {p:?}");
                let span = 1u128 << (LEVEL_BITS * p.level as u32);
                assert!(u128::from(deadline) < u128::from(p.due) + span);
                assert_eq!(p.due % (span as u64).max(1), 0);
            }
        }
    }

    #[test]
    fn placement_is_stable_until_the_bucket_is_due() {
        // The reason buckets can be filled over time: a deadline placed at any tick before
        // its bucket is due lands in the same bucket.
        for (first, deadline) in [(0u64, 5000u64), (10, 262_200), (4000, 4100), (7, 1 << 50)] {
            let p = place(first, deadline);
            for now in [first + 1, (first + p.due) / 2, p.due - 1] {
                assert_eq!(place(now, deadline), p, "placed at {now}");
            }
        }
    }
}
