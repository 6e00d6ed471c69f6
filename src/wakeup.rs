//! The park handshake between a shard's reaper and the threads that feed it: no lost
//! wake-up, and no system call on a producer's common path.
//!
//! The reaper publishes when it plans to wake (the start of a tick, in nanoseconds since
//! the start; `AWAKE` while it works); a producer that has pushed work due earlier than
//! that plan unparks it (a timer due within the planned tick itself wakes it needlessly,
//! which is harmless). The race to close
//! is the classic one: the reaper decides to sleep just as a producer pushes. Both sides
//! store, then issue a SeqCst fence, then load the other side's variable:
//!
//! ```text
//!   reaper:   plan = tick;   fence(SeqCst);   if inbox empty { park }
//!   producer: push(inbox);   fence(SeqCst);   if deadline < plan { unpark }
//! ```
//!
//! The two fences are ordered one way or the other, and whichever comes second sees the
//! store before the first: either the reaper sees the push and does not park, or the
//! producer sees the plan and unparks (an unpark before `park` makes `park` return at
//! once). Fences rather than SeqCst accesses, because loom checks the fence form exactly
//! (it treats SeqCst accesses as AcqRel), so the loom model checks this very code.
//!
//! Cancels need no deadline kept: while they keep coming the reaper sleeps with some
//! waiting (it is *tidying*, and takes them every tidy interval, or when a backlog builds
//! up), rather than running a pass for every few of them, which would pull the lines
//! producers write (the lists' heads, the plan, the stages) to its core and back every
//! few microseconds. A reset's change does carry a deadline, so a resetter raises a flag,
//! `urgent`, before the same handshake (store, fence, load the plan), and the reaper, after
//! its fence, sleeps with changes waiting only if the flag is down: either it sees the flag
//! or the resetter sees the plan and wakes it for a deadline earlier than that.

use crate::clock::Clock;
use crate::sync::{AtomicBool, AtomicU64, Ordering, SetOnce, fence, thread};

/// The plan while the reaper works: no deadline is earlier, so nobody unparks it.
const AWAKE: u64 = 0;

#[derive(Debug)]
pub(crate) struct Wakeup {
    plan: AtomicU64,
    /// The earliest deadline (or the time, if it had passed) a producer unparked the
    /// reaper for, or pushed work due before `work` for, since it last planned a sleep or
    /// woke (`u64::MAX`: none): when the reaper should be at work by, at the latest. A
    /// hint for `overdue`, outside the handshake.
    asked: AtomicU64,
    /// When the reaper plans to wake for work of its own (nanoseconds since the start),
    /// which may be later than `plan` (a reaper also wakes to watch its siblings): a hint
    /// for those siblings' `due_by`, so that two reapers do not wake to watch each other.
    work: AtomicU64,
    /// The reaper will wake within the tidy interval anyway: cancels need not wake it.
    tidying: AtomicBool,
    /// A reset's change may be waiting: the reaper takes it before it sleeps (module doc).
    urgent: AtomicBool,
    reaper: SetOnce<thread::Thread>,
    /// The timer's clock, for a deadline that has passed in `asked`; none in the models.
    clock: Option<Clock>,
}

impl Wakeup {
    pub(crate) fn new() -> Self {
        Wakeup {
            plan: AtomicU64::new(AWAKE),
            asked: AtomicU64::new(u64::MAX),
            work: AtomicU64::new(u64::MAX),
            tidying: AtomicBool::new(false),
            urgent: AtomicBool::new(false),
            reaper: SetOnce::new(),
            clock: None,
        }
    }

    /// Reads `clock` for deadlines that have passed (see `asked`).
    pub(crate) fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The reaper, once, before it first plans to sleep: the thread to unpark. A second
    /// call changes nothing: the first reaper stays the one unparked.
    pub(crate) fn register_reaper(&self) {
        let _ = self.reaper.set(thread::current());
    }

    /// The deadline a producer last woke the reaper for, or pushed work due before the
    /// reaper's own for (see `asked`; `u64::MAX`: none), until the reaper's next pass
    /// (`awake`): the reaper, just awake, tells from it whether it was woken early for a
    /// timer still far off (see `shard::lead`).
    pub(crate) fn woken_for(&self) -> u64 {
        // Relaxed: a hint; an ask landing between this and `awake` is one missed.
        self.asked.load(Ordering::Relaxed)
    }

    /// The reaper starts a pass: producers need not wake it.
    pub(crate) fn awake(&self) {
        // Relaxed: being awake is only ever a reason *not* to unpark; a producer that still
        // sees the old plan merely unparks a thread that is running, which is harmless.
        self.plan.store(AWAKE, Ordering::Relaxed);
        // Relaxed: a hint (see `overdue`).
        self.asked.store(u64::MAX, Ordering::Relaxed);
    }

    /// The reaper, about to plan a sleep, will wake for work of its own at `at`
    /// (nanoseconds since the start) at the latest (see `work`).
    pub(crate) fn plan_work(&self, at: u64) {
        // Relaxed: a hint (see `due_by`).
        self.work.store(at, Ordering::Relaxed);
    }

    /// The reaper plans to sleep until `wake_at` (nanoseconds since the start; `u64::MAX`:
    /// until woken), and says whether it will wake within its tidy interval in any case. It
    /// may then park only if its inboxes are empty (the handshake in the module doc).
    pub(crate) fn plan_sleep(&self, wake_at: u64, tidying: bool) {
        // Relaxed stores, then the SeqCst fence: it orders them before the inbox check.
        // `asked` first: a producer that sees the new plan notes its deadline after this.
        self.asked.store(u64::MAX, Ordering::Relaxed);
        self.tidying.store(tidying, Ordering::Relaxed);
        self.plan.store(wake_at.max(AWAKE + 1), Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// A producer has pushed work due at `deadline` (nanoseconds since the start): wakes the
    /// reaper if it plans to sleep past it.
    pub(crate) fn notify(&self, deadline: u64) {
        // The fence orders the push before the load of the plan (module doc).
        fence(Ordering::SeqCst);
        let plan = self.plan.load(Ordering::Relaxed);
        if deadline < plan {
            self.wake_for(deadline);
        } else if plan != AWAKE {
            self.note(deadline);
        }
    }

    /// A resetter has pushed (or left queued) a change moving a timer to `deadline`: raises
    /// the flag that keeps the reaper from sleeping with it waiting, and wakes the reaper
    /// if it plans to sleep past the deadline (module doc).
    pub(crate) fn notify_reset(&self, deadline: u64) {
        // Release: a reaper whose `take_urgent` reads this also sees the push before it.
        // The fence then orders the flag before the load of the plan, as a push's. A swap
        // rather than a store: loom checks the fence handshake for a read-modify-write
        // (as the inbox push), not for a plain store.
        self.urgent.swap(true, Ordering::Release);
        self.notify(deadline);
    }

    /// The reaper, starting a pass, lowers the flag before it takes the changes: a reset
    /// whose flag it lowers here has its change taken now (the Acquire), and a later one
    /// raises the flag again.
    pub(crate) fn take_urgent(&self) {
        self.urgent.swap(false, Ordering::Acquire);
    }

    /// Whether the reaper may sleep with changes waiting: it is tidying (it wakes within
    /// the tidy interval) and no reset's change waits. Read after `plan_sleep`'s fence.
    pub(crate) fn may_leave_changes(&self, tidying: bool) -> bool {
        // Relaxed: ordered by the fences (module doc).
        tidying && !self.urgent.load(Ordering::Relaxed)
    }

    /// Whether the reaper was due at work more than `grace` nanoseconds before `elapsed`
    /// (nanoseconds since the start), at the time it planned to wake or at a deadline a
    /// producer unparked it for, and has not started a pass since: held up (see
    /// `shard::rescue`).
    pub(crate) fn overdue(&self, elapsed: u64, grace: u64) -> bool {
        self.due_by()
            .is_some_and(|due_by| due_by.saturating_add(grace) < elapsed)
    }

    /// When the reaper should be at work by, at the latest: the time it planned to wake
    /// for work of its own, or the deadline a producer unparked it for, if earlier
    /// (nanoseconds since the start; `u64::MAX` if neither); `None` while it is awake.
    pub(crate) fn due_by(&self) -> Option<u64> {
        // Relaxed: hints; the rescuer's lock on the wheel decides, and a rescue of a
        // reaper that was only slow is one pass made by another thread. An `asked` that
        // lands after the reaper planned its sleep comes with an unpark, so it stays only
        // while the reaper does not run.
        let plan = self.plan.load(Ordering::Relaxed);
        let work = self.work.load(Ordering::Relaxed);
        let asked = self.asked.load(Ordering::Relaxed);
        (plan != AWAKE).then(|| work.min(asked))
    }

    /// Whether the reaper, as last seen, plans to sleep past `deadline`: a producer about
    /// to stage a timer due then hands it over at once instead. A hint; `sleeps_past`
    /// decides.
    #[inline]
    pub(crate) fn plans_past(&self, deadline: u64) -> bool {
        // Relaxed: a hint, as said.
        deadline < self.plan.load(Ordering::Relaxed)
    }

    /// A producer has staged a timer due at `deadline` (see `stage`): whether the reaper
    /// plans to sleep past it, in which case the producer hands its stage over and wakes
    /// it.
    pub(crate) fn sleeps_past(&self, deadline: u64) -> bool {
        // The fence orders the stage's hints before the load of the plan, as a push's
        // (module doc).
        fence(Ordering::SeqCst);
        let plan = self.plan.load(Ordering::Relaxed);
        if plan != AWAKE && deadline >= plan {
            self.note(deadline);
        }
        deadline < plan
    }

    /// A canceller has pushed the first of a batch: wakes the reaper if it sleeps, and not
    /// just for its tidy interval, so that the cancelled timers' memory comes back soon,
    /// not at the next deadline.
    pub(crate) fn notify_sleeping(&self) {
        fence(Ordering::SeqCst);
        if self.plan.load(Ordering::Relaxed) != AWAKE && !self.tidying.load(Ordering::Relaxed) {
            self.wake();
        }
    }

    /// A backlog has built up in an inbox: wakes the reaper if it sleeps at all, and
    /// otherwise yields to it (see `yield_to_reaper`); true if it yielded. A hint, not
    /// part of the handshake: a reaper about to sleep sees the backlog in its last look
    /// anyway.
    pub(crate) fn notify_backlog(&self) -> bool {
        // Relaxed: a hint, as said; a stale plan at worst wakes a running reaper or
        // yields to one that has just gone to sleep.
        if self.plan.load(Ordering::Relaxed) != AWAKE {
            self.wake();
            return false;
        }
        self.yield_to_reaper()
    }

    /// A producer's periodic look (see `Scheduler::look_for_waiting_reaper`), from the
    /// core the reaper is pinned to, at `now` (nanoseconds since the start): if the reaper
    /// is awake, or planned to wake by now, it cannot be running (the caller is): it waits
    /// for this core, in the middle of a pass or woken for timers due. The caller yields
    /// to it (see `yield_to_reaper`) rather than run out its slice, which on Linux can
    /// leave the reaper waiting a millisecond and more. True if it yielded.
    pub(crate) fn yield_if_overdue(&self, now: u64) -> bool {
        // Relaxed: a hint; a plan read just as the reaper sleeps again at worst makes the
        // caller yield needlessly once.
        if self.plan.load(Ordering::Relaxed) > now {
            return false;
        }
        self.yield_to_reaper()
    }

    /// The reaper is awake or overdue (at work, or runnable and waiting for a core) and
    /// behind, or waiting for the caller's core: the calling producer gives up the rest
    /// of its time slice, so that where it shares a core with the reaper, the reaper
    /// catches up before more piles on. Where the reaper has a core of its own, or
    /// nothing else waits for this one, the yield returns at once. Not for the reaper
    /// itself (a callback scheduling on its own shard). True if it yielded.
    #[cold]
    #[inline(never)]
    fn yield_to_reaper(&self) -> bool {
        let Some(reaper) = self.reaper.get() else {
            // Not started yet: there is no reaper to yield to.
            return false;
        };
        if reaper.id() == thread::current().id() {
            return false;
        }
        thread::yield_now();
        true
    }

    /// Unparks the reaper for work due at `deadline` (nanoseconds since the start), and
    /// notes that it should be at work by then (see `overdue`).
    pub(crate) fn wake_for(&self, deadline: u64) {
        self.ask(deadline);
        self.wake();
    }

    /// A producer pushed work due at `deadline`, which the sleeping reaper plans to wake
    /// for without an unpark (it wakes at its plan, if it is not held up): notes it, if it
    /// is due before the reaper's own work, so that its siblings know when it should be
    /// at work by (see `asked`).
    fn note(&self, deadline: u64) {
        // Relaxed: hints (see `overdue`); the loads spare the write when nothing changes.
        if deadline < self.work.load(Ordering::Relaxed)
            && deadline < self.asked.load(Ordering::Relaxed)
        {
            self.ask(deadline);
        }
    }

    /// Notes that the reaper should be at work by `deadline`, or by now if that has
    /// passed: a reaper woken for a timer already due is not held up until some time
    /// after it was woken.
    fn ask(&self, deadline: u64) {
        let by = self
            .clock
            .map_or(deadline, |clock| deadline.max(clock.elapsed()));
        // Relaxed: a hint (see `overdue`).
        self.asked.fetch_min(by, Ordering::Relaxed);
    }

    /// Unparks the reaper (if it has registered; before that it has not slept either).
    pub(crate) fn wake(&self) {
        if let Some(reaper) = self.reaper.get() {
            reaper.unpark();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Wakeup;
    use crate::clock::Clock;
    use std::time::Duration;

    /// A reaper asleep until 10 (to watch its siblings) with work of its own at 1,000 is
    /// not unparked for a timer due at 50, but should be at work by then: held up once
    /// that is 2 past, not only once its own work is.
    /// A reaper asleep until `plan`, with work of its own at `work`.
    fn asleep(wakeup: Wakeup, plan: u64, work: u64) -> Wakeup {
        wakeup.plan_work(work);
        wakeup.plan_sleep(plan, false);
        wakeup
    }

    #[test]
    fn work_pushed_past_the_plan_but_before_the_reapers_own_is_noted() {
        let wakeup = asleep(Wakeup::new(), 10, 1_000);
        wakeup.notify(50);
        assert!(!wakeup.overdue(52, 2));
        assert!(wakeup.overdue(53, 2));
        // Work due after its own is not the siblings' business.
        let later = asleep(Wakeup::new(), 10, 1_000);
        later.notify(2_000);
        assert!(!later.overdue(1_002, 2));
        assert!(later.overdue(1_003, 2));
    }

    /// A reaper unparked for a timer already due should be at work some time after it was
    /// unparked, not after the timer's deadline.
    #[test]
    fn a_reaper_woken_for_a_timer_already_due_is_not_held_up_at_once() {
        let clock = Clock::new(Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(5));
        let wakeup = asleep(Wakeup::new().with_clock(clock), u64::MAX, u64::MAX);
        wakeup.notify(0);
        let grace = 2_000_000;
        assert!(!wakeup.overdue(clock.elapsed(), grace));
        assert!(wakeup.overdue(clock.elapsed() + grace + 1, grace));
    }
}
