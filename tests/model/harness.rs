//! A `Wheel` driven side by side with a `BTreeMap` model of its pending timers, checking
//! after every operation that the two agree. Shared by the property test (`tests/model.rs`)
//! and the fuzz targets (`fuzz/fuzz_targets/`), which only differ in how they choose
//! operations.
//!
//! What is checked: exactly the due timers come out of a poll, none early, none twice, each
//! with the key and deadline it was given; `len` agrees; stale and never-issued keys are
//! rejected by every method and change nothing; `next_deadline` is never later than the
//! earliest pending deadline nor earlier than `now`, and once a poll has run to completion
//! it is exactly when that deadline's bucket is due, or the next tick while a level-1
//! bucket of the next block is being moved down a share per tick.

use shardwheel::{Key, StaleKey, Wheel};
use std::collections::{BTreeMap, HashMap};

/// How a deadline is chosen, relative to the wheel's current tick where it says so.
#[derive(Debug, Clone)]
pub enum When {
    After(u64),
    Before(u64),
    At(u64),
}

/// One step of a test case. Indices into the keys issued so far are taken modulo their
/// number, so every `usize` picks some key, live or stale.
#[derive(Debug, Clone)]
pub enum Op {
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
    /// Insert `SPIKE` timers due within 4,096 ticks, then cancel all but one in
    /// `16 + keep`: enough for the wheel to shrink afterwards.
    Spike(u8),
    /// One step of `Wheel::shrink`.
    Shrink,
}

/// Timers a spike inserts: more than the 2,016 entries a wheel keeps when it shrinks.
pub const SPIKE: u64 = 2_500;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// The documented bucket granularity: the first tick of the bucket that `deadline` falls
/// in, seen from tick `now` (levels of 64 slots, slot = 6 bits of the deadline).
/// When the bucket of `deadline` is due, seen from tick `now` (the rule of the wheel's
/// `level` module): the deadline itself in this block or the next, otherwise a block
/// before the first tick of its bucket at the level seen from a block ahead.
fn bucket_due(now: u64, deadline: u64) -> u64 {
    if deadline <= now {
        return now;
    }
    if deadline / 64 <= now / 64 + 1 {
        return deadline;
    }
    let ahead = now + 64;
    let level = (63 - ((ahead ^ deadline) | 63).leading_zeros()) / 6;
    (deadline & !((1u64 << (6 * level)) - 1)) - 64
}

pub struct Harness {
    wheel: Wheel<u64>,
    /// Every key ever issued; the value of a timer is its position here.
    keys: Vec<Key>,
    /// The same keys, to their values.
    ids: HashMap<Key, u64>,
    /// Pending timers: value -> deadline.
    model: BTreeMap<u64, u64>,
    /// Whether the last poll ran to completion, which makes `next_deadline` exact.
    settled: bool,
}

impl Default for Harness {
    fn default() -> Self {
        Harness {
            wheel: Wheel::new(),
            keys: Vec::new(),
            ids: HashMap::new(),
            model: BTreeMap::new(),
            settled: true,
        }
    }
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

    /// Applies one operation to both wheel and model, then checks that they agree.
    pub fn apply(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::Insert(when) => {
                let deadline = self.deadline(when);
                self.insert(deadline)?;
            }
            Op::Spike(keep) => {
                let now = self.wheel.now();
                let first = self.keys.len();
                for i in 0..SPIKE {
                    self.insert(now.saturating_add(1 + i * 4_096 / SPIKE))?;
                }
                for id in first as u64..self.keys.len() as u64 {
                    if id % (16 + u64::from(*keep)) != 0 {
                        let key = self.keys[id as usize];
                        self.model.remove(&id);
                        ensure!(self.wheel.cancel(key) == Some(id), "spike cancel {id}");
                    }
                }
            }
            Op::Shrink => {
                self.wheel.shrink();
            }
            Op::Cancel(pick) => {
                if let Some((id, key)) = self.key(*pick) {
                    let expected = self.model.remove(&id).map(|_| id);
                    let got = self.wheel.cancel(key);
                    ensure!(
                        got == expected,
                        "cancel {key:?}: {got:?}, model {expected:?}"
                    );
                }
            }
            Op::Reset(pick, when) => {
                if let Some((id, key)) = self.key(*pick) {
                    let deadline = self.deadline(when);
                    let result = self.wheel.reset(key, deadline);
                    match self.model.get_mut(&id) {
                        Some(d) => {
                            ensure!(result.is_ok(), "reset of live {key:?}: {result:?}");
                            *d = deadline;
                        }
                        None => ensure!(result == Err(StaleKey), "reset of stale {key:?} ok"),
                    }
                }
            }
            Op::Get(pick) => {
                if let Some((id, key)) = self.key(*pick) {
                    let pending = self.model.get(&id).copied();
                    let got = self.wheel.get(key).copied();
                    ensure!(got == pending.map(|_| id), "get {key:?}: {got:?}");
                    let deadline = self.wheel.deadline(key);
                    ensure!(deadline == pending, "deadline {key:?}: {deadline:?}");
                    ensure!(
                        self.wheel.contains(key) == pending.is_some(),
                        "contains {key:?}"
                    );
                }
            }
            Op::Forged(bits) => {
                let key = Key::from_bits(*bits);
                let issued = self.ids.get(&key);
                if issued.is_none_or(|id| !self.model.contains_key(id)) {
                    ensure!(self.wheel.get(key).is_none(), "forged {key:?} found");
                    ensure!(self.wheel.cancel(key).is_none(), "forged {key:?} cancelled");
                    ensure!(self.wheel.reset(key, 0).is_err(), "forged {key:?} reset");
                }
            }
            Op::Poll(jump) => self.poll(*jump, usize::MAX)?,
            Op::PollSome(jump, limit) => self.poll(*jump, *limit)?,
        }
        self.check()
    }

    /// Inserts a timer due at `deadline`, whose value is its position in `keys`.
    fn insert(&mut self, deadline: u64) -> Result<(), String> {
        let id = self.keys.len() as u64;
        let key = self.wheel.insert(deadline, id);
        // After a shrink, a slot made again must not reissue an old key.
        ensure!(
            self.ids.insert(key, id).is_none(),
            "key {key:?} issued twice"
        );
        self.keys.push(key);
        self.model.insert(id, deadline);
        Ok(())
    }

    /// Expires everything that is left, as a last poll at the end of time.
    pub fn finish(&mut self) -> Result<(), String> {
        self.poll(u64::MAX, usize::MAX)?;
        ensure!(self.wheel.is_empty(), "timers left at the end of time");
        ensure!(
            self.wheel.next_deadline().is_none(),
            "empty wheel has a deadline"
        );
        Ok(())
    }

    fn poll(&mut self, jump: u64, limit: usize) -> Result<(), String> {
        let now = self.wheel.now().saturating_add(jump);
        let mut taken = 0;
        while taken < limit {
            let Some(expired) = self.wheel.poll_expired(now) else {
                // Ran to completion: nothing due may be left.
                let due = self.model.iter().find(|&(_, &d)| d <= now);
                ensure!(due.is_none(), "due timer {due:?} not expired at {now}");
                ensure!(
                    self.wheel.now() == now,
                    "now {} after poll at {now}",
                    self.wheel.now()
                );
                self.settled = true;
                return Ok(());
            };
            taken += 1;
            let id = expired.value;
            let deadline = self.model.remove(&id);
            ensure!(
                deadline.is_some(),
                "timer {id} expired twice or after cancel"
            );
            ensure!(
                expired.key == self.keys[id as usize],
                "timer {id} with the wrong key"
            );
            ensure!(
                Some(expired.deadline) == deadline,
                "timer {id}: wrong deadline"
            );
            ensure!(
                expired.deadline <= now,
                "early: {} at {now}",
                expired.deadline
            );
        }
        self.settled = false;
        Ok(())
    }

    fn check(&self) -> Result<(), String> {
        ensure!(
            self.wheel.len() == self.model.len(),
            "len {}",
            self.wheel.len()
        );
        ensure!(self.wheel.is_empty() == self.model.is_empty(), "is_empty");
        let next = self.wheel.next_deadline();
        let Some(earliest) = self.model.values().min().copied() else {
            ensure!(next.is_none(), "empty wheel has next deadline {next:?}");
            return Ok(());
        };
        let now = self.wheel.now();
        let Some(next) = next else {
            return Err("timers pending but no next deadline".into());
        };
        ensure!(next >= now, "next {next} before now {now}");
        ensure!(
            next <= earliest.max(now),
            "next {next} later than earliest {earliest}"
        );
        if self.settled {
            let expected = self.model.values().map(|&d| bucket_due(now, d)).min();
            // A level-1 bucket of the next block may still hold timers being spread.
            let spreading = next == now.saturating_add(1)
                && self.model.values().any(|&d| d / 64 == now / 64 + 1);
            ensure!(
                Some(next) == expected || spreading,
                "next {next}, expected {expected:?}"
            );
        }
        Ok(())
    }
}
