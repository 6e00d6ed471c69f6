//! Where a deadline goes in the hierarchy: level and slot arithmetic, and the buckets.
//!
//! Time is cut in blocks of 64 ticks. Level 0 holds the deadlines of the current block and
//! of the next one, one bucket per tick (128 slots, slot = the deadline's low 7 bits).
//! Level `L >= 1` has 64 slots of `64^L` ticks each, slot = bits `6L..6L+6` of the
//! deadline, and takes a deadline further away by the rule of a plain hierarchical wheel,
//! seen from one block ahead (`now + 64`): the level of the highest bit in which the two
//! differ. Its bucket is due one block before its first tick, so that its timers reach
//! level 0 a block early; a level-1 bucket can then be moved down a share at a time over
//! that block instead of all at once when its first tick comes (see `Wheel::poll_expired`),
//! which spreads the cost of a busy bucket (tens of thousands of timers) over 64 ticks.
//! Every bucket is due after the current tick and never after its first deadline, so
//! every pending bucket lies ahead of the wheel and none is passed over. Eleven levels
//! above level 0 cover the whole `u64` tick range.

use crate::slab::NIL;

/// Bits of the deadline per level, so 64 slots.
pub(super) const LEVEL_BITS: u32 = 6;
/// Slots per level (level 0 has two rows of them).
pub(super) const SLOTS: usize = 1 << LEVEL_BITS;
/// Ticks in a block: level 0 holds the current block and the next.
pub(super) const BLOCK: u64 = SLOTS as u64;
/// Levels needed for every `u64` deadline: ceil(64 / 6).
pub(super) const MAX_LEVELS: usize = 64usize.div_ceil(LEVEL_BITS as usize);
/// Rows of 64 buckets: two for level 0, one per level above.
pub(super) const MAX_ROWS: usize = MAX_LEVELS + 1;

/// The bucket a deadline belongs in, seen from the wheel's current tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Placement {
    /// The bucket's number among all buckets: the slot (0..128) at level 0, `(level + 1)
    /// * 64 + slot` above, so that bucket `b` is slot `b % 64` of row `b / 64`.
    pub(super) bucket: usize,
    /// When the bucket must be processed.
    pub(super) due: u64,
}

impl Placement {
    /// The row of 64 buckets this bucket is in.
    pub(super) fn row(self) -> usize {
        self.bucket / SLOTS
    }
}

/// The level of bucket number `bucket` (see `Placement::bucket`).
pub(super) fn level_of(bucket: usize) -> usize {
    (bucket / SLOTS).saturating_sub(1)
}

/// Places `deadline` relative to the current tick `now`. A deadline at or before `now` goes
/// to the level-0 bucket of `now`, due at once: it fires at the next poll, with no tick
/// added (tokio#6866 adds one).
#[inline]
pub(super) fn place(now: u64, deadline: u64) -> Placement {
    if deadline / BLOCK <= now / BLOCK + 1 {
        let due = deadline.max(now);
        return Placement {
            bucket: due as usize % (2 * SLOTS),
            due,
        };
    }
    // Two blocks ahead or more, so `ahead` cannot overflow and `deadline` is in a later
    // block than it: the level is at least 1.
    let ahead = now + BLOCK;
    let highest_difference = 63 - (ahead ^ deadline).leading_zeros();
    let level = (highest_difference / LEVEL_BITS) as usize;
    debug_assert!((1..MAX_LEVELS).contains(&level));
    let shift = LEVEL_BITS * level as u32;
    Placement {
        bucket: (level + 1) * SLOTS + (deadline >> shift) as usize % SLOTS,
        due: (deadline & !((1u64 << shift) - 1)) - BLOCK,
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

/// A row of 64 buckets: one level above level 0, or half of level 0.
pub(super) type Level = [Bucket; SLOTS];

pub(super) const EMPTY_LEVEL: Level = [Bucket::EMPTY; SLOTS];

#[cfg(test)]
mod tests {
    use super::*;

    /// (level, slot, due)
    fn placed(now: u64, deadline: u64) -> (usize, usize, u64) {
        let p = place(now, deadline);
        let level = level_of(p.bucket);
        let slot = if level == 0 {
            p.bucket
        } else {
            p.bucket % SLOTS
        };
        (level, slot, p.due)
    }

    #[test]
    fn past_and_present_deadlines_are_due_now() {
        assert_eq!(placed(0, 0), (0, 0, 0));
        assert_eq!(placed(100, 3), (0, 100, 100));
        assert_eq!(placed(u64::MAX, 0), (0, 127, u64::MAX));
    }

    #[test]
    fn level_zero_holds_this_block_and_the_next() {
        assert_eq!(placed(0, 1), (0, 1, 1));
        assert_eq!(placed(0, 63), (0, 63, 63));
        assert_eq!(placed(0, 64), (0, 64, 64));
        assert_eq!(placed(0, 127), (0, 127, 127));
        assert_eq!(placed(63, 127), (0, 127, 127));
        assert_eq!(
            placed(64, 191),
            (0, 63, 191),
            "the slot row follows the block's parity"
        );
        assert_eq!(placed(u64::MAX - 1, u64::MAX), (0, 127, u64::MAX));
    }

    #[test]
    fn further_levels_are_seen_from_a_block_ahead_and_due_a_block_early() {
        assert_eq!(placed(0, 128), (1, 2, 64));
        assert_eq!(placed(0, 191), (1, 2, 64));
        assert_eq!(placed(0, 4095), (1, 63, 4032 - 64));
        assert_eq!(placed(0, 4096), (2, 1, 4096 - 64));
        // A block ahead of 4032 is 4096, in the next level-1 rotation: 8191 is level 1.
        assert_eq!(placed(4032, 8191), (1, 63, 8128 - 64));
        assert_eq!(placed(0, (1 << 60) - 1), (9, 63, (63 << 54) - 64));
        assert_eq!(placed(0, 1 << 60), (10, 1, (1 << 60) - 64));
        assert_eq!(placed(0, u64::MAX), (10, 15, (15 << 60) - 64));
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
                let level = level_of(p.bucket);
                assert!(level < MAX_LEVELS && p.row() < MAX_ROWS);
                if deadline <= now {
                    assert_eq!(p.due, now);
                    continue;
                }
                assert!(p.due > now, "now {now} deadline {deadline}: {p:?}");
                assert!(p.due <= deadline, "now {now} deadline {deadline}: {p:?}");
                if level == 0 {
                    assert_eq!(p.due, deadline);
                    continue;
                }
                // Due a block before the first tick of a bucket that holds the deadline.
                let first = u128::from(p.due) + u128::from(BLOCK);
                let span = 1u128 << (LEVEL_BITS * level as u32);
                assert!(u128::from(deadline) >= first && u128::from(deadline) < first + span);
                assert_eq!(first % span, 0);
            }
        }
    }

    #[test]
    fn placement_is_stable_until_the_bucket_is_due() {
        // The reason buckets can be filled over time: a deadline placed at any tick before
        // its bucket is due lands in the same bucket.
        for (first, deadline) in [(0u64, 5000u64), (10, 262_200), (3900, 4100), (7, 1 << 50)] {
            let p = place(first, deadline);
            for now in [first + 1, (first + p.due) / 2, p.due - 1] {
                assert_eq!(place(now, deadline), p, "placed at {now}");
            }
        }
    }
}
