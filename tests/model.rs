//! Model-based property test: random sequences of insert / cancel / reset / get / poll,
//! with time jumping across every level boundary, against a `BTreeMap` of pending timers.
//!
//! At every poll it checks that exactly the due timers come out, none early, none twice;
//! at every step that `len` agrees, that stale and never-issued keys are rejected, and that
//! `next_deadline` is never later than the earliest pending deadline and, once a poll has
//! run to completion, is exactly the first tick of that deadline's bucket.
//!
//! `PROPTEST_CASES` overrides the number of cases (10,000 by default).

use proptest::prelude::*;
use shardwheel::{Key, StaleKey, Wheel};
use std::collections::BTreeMap;

/// How a deadline is chosen, relative to the wheel's current tick where it says so.
#[derive(Debug, Clone)]
enum When {
    After(u64),
    Before(u64),
    At(u64),
}

#[derive(Debug, Clone)]
enum Op {
    Insert(When),
    Cancel(usize),
    Reset(usize, When),
    Get(usize),
    /// Use a key made from arbitrary bits.
    Forged(u64),
    /// Advance by the jump and expire everything due.
    Poll(u64),
    /// Advance by the jump and expire at most this many.
    PollSome(u64, usize),
}

/// Distances that sit on and around level boundaries, plus small, large and huge ones.
fn distance() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![
            0u64, 1, 2, 63, 64, 65, 4095, 4096, 4097, 262_143, 262_144
        ]),
        0u64..200,
        0u64..100_000,
        0u64..(1 << 40),
        any::<u64>(),
    ]
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        6 => distance().prop_map(When::After),
        1 => distance().prop_map(When::Before),
        1 => prop_oneof![Just(u64::MAX), Just(u64::MAX - 1), any::<u64>()].prop_map(When::At),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => when().prop_map(Op::Insert),
        3 => any::<usize>().prop_map(Op::Cancel),
        2 => (any::<usize>(), when()).prop_map(|(i, w)| Op::Reset(i, w)),
        1 => any::<usize>().prop_map(Op::Get),
        1 => any::<u64>().prop_map(Op::Forged),
        3 => distance().prop_map(Op::Poll),
        1 => (distance(), 0usize..4).prop_map(|(jump, n)| Op::PollSome(jump, n)),
    ]
}

/// The documented bucket granularity: the first tick of the bucket that `deadline` falls in,
/// seen from tick `now` (levels of 64 slots, slot = 6 bits of the deadline).
fn bucket_start(now: u64, deadline: u64) -> u64 {
    if deadline <= now {
        return now;
    }
    let level = (63 - ((now ^ deadline) | 63).leading_zeros()) / 6;
    deadline & !((1u64 << (6 * level)) - 1)
}

struct Harness {
    wheel: Wheel<u64>,
    /// Every key ever issued; the value of a timer is its position here.
    keys: Vec<Key>,
    /// Pending timers: value -> deadline.
    model: BTreeMap<u64, u64>,
    /// Whether the last poll ran to completion, which makes `next_deadline` exact.
    settled: bool,
}

impl Harness {
    fn deadline(&self, when: &When) -> u64 {
        let now = self.wheel.now();
        match *when {
            When::After(d) => now.saturating_add(d),
            When::Before(d) => now.saturating_sub(d),
            When::At(t) => t,
        }
    }

    fn key(&self, pick: usize) -> Option<(u64, Key)> {
        (!self.keys.is_empty()).then(|| {
            let id = pick % self.keys.len();
            (id as u64, self.keys[id])
        })
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Insert(when) => {
                let deadline = self.deadline(when);
                let id = self.keys.len() as u64;
                let key = self.wheel.insert(deadline, id);
                prop_assert!(!self.keys.contains(&key), "key {key:?} issued twice");
                self.keys.push(key);
                self.model.insert(id, deadline);
            }
            Op::Cancel(pick) => {
                if let Some((id, key)) = self.key(*pick) {
                    let expected = self.model.remove(&id).map(|_| id);
                    prop_assert_eq!(self.wheel.cancel(key), expected);
                }
            }
            Op::Reset(pick, when) => {
                if let Some((id, key)) = self.key(*pick) {
                    let deadline = self.deadline(when);
                    let result = self.wheel.reset(key, deadline);
                    match self.model.get_mut(&id) {
                        Some(d) => {
                            prop_assert_eq!(result, Ok(()));
                            *d = deadline;
                        }
                        None => prop_assert_eq!(result, Err(StaleKey)),
                    }
                }
            }
            Op::Get(pick) => {
                if let Some((id, key)) = self.key(*pick) {
                    let pending = self.model.get(&id).copied();
                    prop_assert_eq!(self.wheel.get(key).copied(), pending.map(|_| id));
                    prop_assert_eq!(self.wheel.deadline(key), pending);
                    prop_assert_eq!(self.wheel.contains(key), pending.is_some());
                }
            }
            Op::Forged(bits) => {
                let key = Key::from_bits(*bits);
                let issued = self.keys.iter().position(|&k| k == key);
                if issued.is_none_or(|id| !self.model.contains_key(&(id as u64))) {
                    prop_assert_eq!(self.wheel.cancel(key), None);
                    prop_assert_eq!(self.wheel.reset(key, 0), Err(StaleKey));
                    prop_assert_eq!(self.wheel.get(key), None);
                }
            }
            Op::Poll(jump) => self.poll(*jump, usize::MAX)?,
            Op::PollSome(jump, limit) => self.poll(*jump, *limit)?,
        }
        self.check()
    }

    fn poll(&mut self, jump: u64, limit: usize) -> Result<(), TestCaseError> {
        let now = self.wheel.now().saturating_add(jump);
        let mut taken = 0;
        while taken < limit {
            let Some(expired) = self.wheel.poll_expired(now) else {
                // Ran to completion: nothing due may be left.
                let due = self.model.iter().find(|&(_, &d)| d <= now);
                prop_assert_eq!(due, None, "due timer not expired at {}", now);
                prop_assert_eq!(self.wheel.now(), now);
                self.settled = true;
                return Ok(());
            };
            taken += 1;
            let id = expired.value;
            prop_assert_eq!(expired.key, self.keys[id as usize]);
            let deadline = self.model.remove(&id);
            prop_assert!(
                deadline.is_some(),
                "timer {} expired twice or after cancel",
                id
            );
            prop_assert_eq!(Some(expired.deadline), deadline);
            prop_assert!(
                expired.deadline <= now,
                "early: {} at {}",
                expired.deadline,
                now
            );
        }
        self.settled = false;
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.wheel.len(), self.model.len());
        prop_assert_eq!(self.wheel.is_empty(), self.model.is_empty());
        let next = self.wheel.next_deadline();
        let Some(earliest) = self.model.values().min().copied() else {
            prop_assert_eq!(next, None);
            return Ok(());
        };
        let now = self.wheel.now();
        prop_assert!(next.is_some(), "timers pending but no next deadline");
        let next = next.unwrap();
        prop_assert!(next >= now, "next {} before now {}", next, now);
        prop_assert!(
            next <= earliest.max(now),
            "next {} later than earliest {}",
            next,
            earliest
        );
        if self.settled {
            let expected = self.model.values().map(|&d| bucket_start(now, d)).min();
            prop_assert_eq!(Some(next), expected);
        }
        Ok(())
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn wheel_agrees_with_a_btreemap_model(ops in prop::collection::vec(op(), 1..120)) {
        let mut harness = Harness {
            wheel: Wheel::new(),
            keys: Vec::new(),
            model: BTreeMap::new(),
            settled: true,
        };
        for op in &ops {
            harness.apply(op)?;
        }
        // Finally everything expires, exactly once.
        harness.poll(u64::MAX, usize::MAX)?;
        prop_assert!(harness.wheel.is_empty());
        prop_assert_eq!(harness.wheel.next_deadline(), None);
    }
}
