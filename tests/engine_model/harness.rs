//! A manual `Timer` (no reaper threads; time moves only by `advance`) driven side by side
//! with a model of its pending timers, checked after every operation. Shared by the
//! property test (`tests/engine_model.rs`) and the `engine_ops` fuzz target.
//!
//! What is checked: each `advance` fires exactly the timers whose deadline it reaches (with
//! exact deadlines, its nanosecond; without, deadlines round up to the tick and the current
//! tick rounds down), none early, none twice,
//! none left behind; `cancel` is true exactly for a pending timer, which then never fires;
//! `reset` succeeds exactly on a pending timer and moves its deadline; handles of fired,
//! cancelled or another timer's timers change nothing; `max_pending` refuses exactly at
//! the bound and hands the payload back; `pending` agrees; `shutdown` hands back exactly the
//! pending payloads, and scheduling afterwards is refused.

use shardwheel::{ScheduleError, StaleHandle, Timer, TimerHandle};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The tick every harness timer runs at.
pub const TICK_NANOS: u64 = 1_000_000;

/// One step of a test case. Indices into the handles issued so far are taken modulo their
/// number, so every `usize` picks some handle, live or stale. Times are in nanoseconds.
#[derive(Debug, Clone)]
pub enum Op {
    Schedule(u64),
    Cancel(usize),
    /// Schedule on a thread that exits at once, leaving the timer in its stage.
    ScheduleElsewhere(u64),
    /// Cancel on a thread of its own (a staged timer cancelled by another thread).
    CancelElsewhere(usize),
    Reset(usize, u64),
    /// Cancel, then reset, with a handle of another timer.
    Foreign(usize),
    Advance(u64),
}

/// Runs `f` on a thread of its own that ends with it if `elsewhere`, else on this one.
fn on_thread<R: Send>(elsewhere: bool, f: impl FnOnce() -> R + Send) -> R {
    if elsewhere {
        std::thread::scope(|s| s.spawn(f).join().expect("no panic"))
    } else {
        f()
    }
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

pub struct Harness {
    timer: Timer<u64>,
    /// Payloads as the handler saw them run, in order.
    fired: Arc<Mutex<Vec<u64>>>,
    /// A second timer whose handles must never reach the first.
    other: Timer<u64>,
    other_handles: Vec<TimerHandle>,
    /// Every handle issued; a timer's payload is its position here.
    handles: Vec<TimerHandle>,
    /// Whether the timer fires at exact deadlines.
    exact: bool,
    /// Pending payload -> deadline: nanoseconds if `exact`, else its tick.
    pending: BTreeMap<u64, u64>,
    /// Payloads that fired or were cancelled: they must never fire (again).
    done: Vec<bool>,
    elapsed_nanos: u64,
    /// How many timers may be pending over the whole timer.
    bound: usize,
    /// What `stats()` must say after an advance.
    scheduled: u64,
    fired_count: u64,
    cancelled: u64,
    resets: u64,
}

impl Harness {
    /// A harness over a manual timer with `shards` shards and at most `max_pending` timers,
    /// firing at exact deadlines if `exact`.
    pub fn new(shards: usize, max_pending: usize, exact: bool) -> Self {
        let fired = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&fired);
        let timer = Timer::builder()
            .shards(shards)
            .tick(Duration::from_nanos(TICK_NANOS))
            .max_pending(max_pending)
            .exact_deadlines(exact)
            .manual()
            .build_with(move |payload: u64| record.lock().unwrap().push(payload))
            .expect("manual timer");
        let other = Timer::builder()
            .shards(shards)
            .manual()
            .build_with(|_: u64| {})
            .expect("manual timer");
        Harness {
            timer,
            fired,
            other,
            other_handles: Vec::new(),
            handles: Vec::new(),
            exact,
            pending: BTreeMap::new(),
            done: Vec::new(),
            elapsed_nanos: 0,
            bound: max_pending,
            scheduled: 0,
            fired_count: 0,
            cancelled: 0,
            resets: 0,
        }
    }

    fn deadline(&self, delay: u64) -> u64 {
        let deadline = self.elapsed_nanos.saturating_add(delay);
        if self.exact {
            deadline
        } else {
            deadline.div_ceil(TICK_NANOS)
        }
    }

    fn pick(&self, index: usize) -> Option<(u64, TimerHandle)> {
        if self.handles.is_empty() {
            return None;
        }
        let payload = index % self.handles.len();
        Some((payload as u64, self.handles[payload]))
    }

    /// Applies one operation to the timer and the model and compares them.
    pub fn apply(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Schedule(delay) | Op::ScheduleElsewhere(delay) => {
                let payload = self.handles.len() as u64;
                let elsewhere = matches!(op, Op::ScheduleElsewhere(_));
                let timer = &self.timer;
                let result = on_thread(elsewhere, || {
                    timer.insert(Duration::from_nanos(delay), payload)
                });
                if self.pending.len() >= self.bound {
                    ensure!(
                        matches!(result, Err(ScheduleError::Full(p)) if p == payload),
                        "schedule past max_pending ({}) gave {result:?}",
                        self.bound
                    );
                    return self.check_pending();
                }
                let handle = result.map_err(|e| format!("schedule refused: {e}"))?;
                self.handles.push(handle);
                self.scheduled += 1;
                self.done.push(false);
                self.pending.insert(payload, self.deadline(delay));
            }
            Op::Cancel(index) | Op::CancelElsewhere(index) => {
                let Some((payload, handle)) = self.pick(index) else {
                    return Ok(());
                };
                let was_pending = self.pending.remove(&payload).is_some();
                let timer = &self.timer;
                let elsewhere = matches!(op, Op::CancelElsewhere(_));
                let cancelled = on_thread(elsewhere, || timer.cancel(handle));
                ensure!(
                    cancelled == was_pending,
                    "cancel of {payload} (pending: {was_pending}) returned {cancelled}"
                );
                self.cancelled += u64::from(cancelled);
                self.done[payload as usize] = true;
            }
            Op::Reset(index, delay) => {
                let Some((payload, handle)) = self.pick(index) else {
                    return Ok(());
                };
                let deadline = self.deadline(delay);
                let result = self.timer.reset(handle, Duration::from_nanos(delay));
                match self.pending.get_mut(&payload) {
                    Some(due) => {
                        ensure!(result.is_ok(), "reset of pending {payload} gave {result:?}");
                        *due = deadline;
                        self.resets += 1;
                    }
                    None => ensure!(
                        result == Err(StaleHandle),
                        "reset of finished {payload} gave {result:?}"
                    ),
                }
            }
            Op::Foreign(index) => {
                if self.other_handles.len() <= index % 4 {
                    let handle = self.other.insert(Duration::from_secs(3600), 0);
                    self.other_handles
                        .push(handle.map_err(|e| format!("other timer: {e}"))?);
                }
                let handle = self.other_handles[index % self.other_handles.len()];
                ensure!(!self.timer.cancel(handle), "a foreign handle cancelled");
                ensure!(
                    self.timer.reset(handle, Duration::ZERO) == Err(StaleHandle),
                    "a foreign handle reset"
                );
            }
            Op::Advance(by) => {
                self.timer
                    .advance(Duration::from_nanos(by))
                    .map_err(|e| format!("advance: {e}"))?;
                self.elapsed_nanos = self.elapsed_nanos.saturating_add(by);
                let now = if self.exact {
                    self.elapsed_nanos
                } else {
                    self.elapsed_nanos / TICK_NANOS
                };
                let mut expected: Vec<u64> = self
                    .pending
                    .iter()
                    .filter(|&(_, &deadline)| deadline <= now)
                    .map(|(&payload, _)| payload)
                    .collect();
                let mut fired = std::mem::take(&mut *self.fired.lock().unwrap());
                for &payload in &fired {
                    ensure!(
                        !self.done[payload as usize],
                        "{payload} fired after it fired or was cancelled"
                    );
                    self.done[payload as usize] = true;
                }
                fired.sort_unstable();
                expected.sort_unstable();
                ensure!(
                    fired == expected,
                    "at {now} fired {fired:?}, due {expected:?}"
                );
                for payload in &fired {
                    self.pending.remove(payload);
                }
                self.fired_count += fired.len() as u64;
                self.check_stats()?;
            }
        }
        self.check_pending()
    }

    /// After an advance every shard has taken in everything: the counts are exact.
    fn check_stats(&self) -> Result<(), String> {
        let stats = self.timer.stats();
        let counted = (stats.scheduled, stats.fired, stats.cancelled, stats.reset);
        let expected = (
            self.scheduled,
            self.fired_count,
            self.cancelled,
            self.resets,
        );
        ensure!(
            counted == expected,
            "stats (scheduled, fired, cancelled, reset) {counted:?}, model {expected:?}"
        );
        ensure!(
            stats.pending == self.pending.len(),
            "stats pending {}",
            stats.pending
        );
        Ok(())
    }

    fn check_pending(&self) -> Result<(), String> {
        ensure!(
            self.timer.pending() == self.pending.len(),
            "pending {} but the model has {}",
            self.timer.pending(),
            self.pending.len()
        );
        Ok(())
    }

    /// Shuts the timer down: it must hand back exactly the pending payloads and refuse
    /// what comes after.
    pub fn finish(self) -> Result<(), String> {
        let mut unfired = self.timer.shutdown();
        unfired.sort_unstable();
        let expected: Vec<u64> = self.pending.keys().copied().collect();
        ensure!(
            unfired == expected,
            "shutdown handed back {unfired:?}, pending {expected:?}"
        );
        ensure!(
            self.fired.lock().unwrap().is_empty(),
            "a timer fired without an advance"
        );
        // The shutdown took in what no advance had: the counts still add up.
        let stats = self.timer.stats();
        let counted = (stats.scheduled, stats.fired, stats.cancelled, stats.reset);
        let expected = (
            self.scheduled,
            self.fired_count,
            self.cancelled,
            self.resets,
        );
        ensure!(
            counted == expected && stats.pending == 0,
            "after shutdown: stats {counted:?} pending {}, model {expected:?}",
            stats.pending
        );
        let late = self.timer.insert(Duration::ZERO, u64::MAX);
        ensure!(
            matches!(late, Err(ScheduleError::Shutdown(u64::MAX))),
            "schedule after shutdown gave {late:?}"
        );
        ensure!(
            self.timer.advance(Duration::from_secs(1)).is_ok(),
            "advance after shutdown"
        );
        ensure!(
            self.timer.shutdown().is_empty(),
            "a second shutdown handed back more"
        );
        Ok(())
    }
}
