//! What a timer needs to schedule, cancel and reset timers, apart from who drives its
//! shards: its shards, its clock, and its id. Cheap to clone (it shares the shards), so
//! that a periodic timer's callback can reschedule itself from a reaper thread.
//!
//! Each thread schedules on one shard, through a stage of its own there, both found in
//! its record as a producer (see `producer`).

use crate::clock::{self, Clock};
use crate::error::{ScheduleError, StaleHandle};
use crate::handle::{Handles, Named, TimerHandle};
use crate::producer::{Producer, producer};
use crate::shard::{Refused, Shard};
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct Scheduler<T: Send + 'static> {
    /// Keys this thread's stages for this timer (see `timer::take_id`).
    id: u64,
    /// How this timer packs its handles.
    handles: Handles,
    shards: Arc<[Shard<T>]>,
    clock: Clock,
    /// A manual timer's time since its start, moved only by `advance`; `None` for a timer
    /// on the real clock.
    manual_elapsed: Option<Arc<AtomicU64>>,
    /// The forks the process descended from at the build (see `global`): under another
    /// count, this engine's reapers stayed in an ancestor.
    forks: u32,
}

impl<T: Send + 'static> Clone for Scheduler<T> {
    fn clone(&self) -> Self {
        Scheduler {
            id: self.id,
            handles: self.handles,
            shards: Arc::clone(&self.shards),
            clock: self.clock,
            manual_elapsed: self.manual_elapsed.clone(),
            forks: self.forks,
        }
    }
}

impl<T: Send + 'static> Scheduler<T> {
    pub(crate) fn new(
        id: u64,
        shards: Arc<[Shard<T>]>,
        clock: Clock,
        manual_elapsed: Option<Arc<AtomicU64>>,
    ) -> Self {
        Scheduler {
            id,
            handles: Handles::new(id, shards.len()),
            shards,
            clock,
            manual_elapsed,
            forks: crate::global::forks(),
        }
    }

    /// The id that keys this timer's stages in a thread's record (see `producer`).
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn shards(&self) -> &Arc<[Shard<T>]> {
        &self.shards
    }

    /// The forks the process descended from at the build (see `global`): a schedule
    /// succeeds only while `global::forks()` says the same.
    #[inline]
    pub(crate) fn forks(&self) -> u32 {
        self.forks
    }

    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    /// A manual timer's time, for `advance` to move.
    pub(crate) fn manual_elapsed(&self) -> Option<&AtomicU64> {
        self.manual_elapsed.as_deref()
    }

    /// Now, in nanoseconds since the timer started, by its clock (real or manual).
    pub(crate) fn now(&self) -> u64 {
        match &self.manual_elapsed {
            None => self.clock.elapsed(),
            // Relaxed: a reading of the time; an advance racing it may or may not count.
            Some(elapsed) => elapsed.load(Ordering::Relaxed),
        }
    }

    /// The deadline of a timer `delay` from now, by this timer's clock. Inlined, as are
    /// the schedules that call it (`Timer::insert`, `Timer::insert_within`): its call
    /// (frame, saved registers) cost some twenty instructions a schedule; inlined alone, it
    /// made its caller too big to be inlined in turn, which cost more.
    #[inline]
    pub(crate) fn deadline_after(&self, delay: Duration) -> u64 {
        let now = match self.manual_elapsed {
            None => self.clock.elapsed_ceiling(),
            Some(_) => self.now(),
        };
        now.saturating_add(clock::nanos(delay))
    }

    /// The deadline of a timer due at `instant`.
    pub(crate) fn deadline_at(&self, instant: Instant) -> u64 {
        self.clock.deadline_at(instant)
    }

    /// The deadline at which a timer due at `deadline`, with `slack` nanoseconds of
    /// tolerance, is scheduled (see `clock::within`).
    pub(crate) fn within(&self, deadline: u64, slack: u64) -> u64 {
        clock::within(deadline, slack, self.clock.tick_nanos())
    }

    /// Schedules `payload` at `deadline` on this thread's shard (`Timer::insert` and the
    /// other schedules of a timer, where the compiler decides whether to inline it).
    pub(crate) fn insert_due(
        &self,
        deadline: u64,
        payload: T,
    ) -> Result<TimerHandle, ScheduleError<T>> {
        self.insert_due_inlined(deadline, payload)
    }

    /// `insert_due` inlined into its caller: a sleep's first poll, where the call (its
    /// frame, the arguments and the result through the stack) cost some 40 of the 558
    /// instructions a W7 timeout added to the floor (callgrind, `scripts/instructions-per-op
    /// W7`: 516 with it). Not for `Timer::insert`: there `insert_due` marked `#[inline]`,
    /// inlined into the user's loop, made W1's producer path some 20 instructions dearer,
    /// and marked `#[inline(never)]` it cost W2 a fifth of its schedule rate.
    #[inline(always)]
    pub(crate) fn insert_due_inlined(
        &self,
        deadline: u64,
        payload: T,
    ) -> Result<TimerHandle, ScheduleError<T>> {
        // Kept from being dropped on an unwind until the schedule takes it (see
        // `Shard::schedule_kept`).
        let payload = ManuallyDrop::new(payload);
        if self.forks != crate::global::forks() {
            // Built before a fork: its reapers stayed in the parent (see `global`).
            return Err(ScheduleError::Shutdown(ManuallyDrop::into_inner(payload)));
        }
        let producer = producer();
        let shard = producer.shard(self.shards.len());
        let on = &self.shards[shard];
        // The look comes first: after the schedule, the schedule's result waited across it
        // on the stack, to be loaded and matched again.
        if producer.count_and_look() {
            self.look_for_waiting_reaper(on);
        }
        // A thread with no stage yet registers one out of line, so that the common path
        // carries no drop flag for a stage it might have registered.
        match producer.stage(self, shard) {
            Some(stage) => self.handle_of(shard, on.schedule_kept(stage, deadline, payload)),
            None => {
                let payload = ManuallyDrop::into_inner(payload);
                self.schedule_registering(producer, shard, on, deadline, payload)
            }
        }
    }

    /// The caller's result of a schedule on shard `shard`, handle and all, made right after
    /// the schedule, with the stage still held: a slot and a generation passed on, written
    /// to the stack as two halves and read back as one word, made that read wait for the
    /// two stores to reach the cache (the schedule's hottest instruction under perf); and
    /// a result made after the stage's borrow ends was stored, reloaded and matched again
    /// across it.
    #[inline(always)]
    fn handle_of(
        &self,
        shard: usize,
        scheduled: Result<(u32, u32), Refused<T>>,
    ) -> Result<TimerHandle, ScheduleError<T>> {
        match scheduled {
            Ok((slot, generation)) => Ok(self.handles.handle(shard, slot, generation)),
            Err(Refused::Full(payload)) => Err(ScheduleError::Full(payload)),
            Err(Refused::Closed(payload)) => Err(ScheduleError::Shutdown(payload)),
        }
    }

    /// `insert_due` for a thread with no stage on shard `index` (`on`): registers one and
    /// stages the timer there, or schedules it straight to the inbox if it cannot have one.
    #[cold]
    #[inline(never)]
    fn schedule_registering(
        &self,
        producer: &Producer,
        index: usize,
        on: &Shard<T>,
        deadline: u64,
        payload: T,
    ) -> Result<TimerHandle, ScheduleError<T>> {
        let scheduled = match producer.register(self.id, index, on) {
            Some(stage) => on.schedule_staged(&stage, deadline, payload),
            None => on.schedule(deadline, payload),
        };
        self.handle_of(index, scheduled)
    }

    /// A producer's periodic look (see `LOOK_EVERY`): if the reaper pinned to the CPU the
    /// calling thread runs on is awake, or planned to wake by now, it waits for the core
    /// this thread holds: the thread yields to it (see `Wakeup::yield_if_overdue`).
    /// `on`, any of this timer's shards, has the table of pinned reapers.
    #[cold]
    #[inline(never)]
    fn look_for_waiting_reaper(&self, on: &Shard<T>) {
        if !on.reapers_pinned() {
            return;
        }
        let Some(cpu) = current_cpu() else {
            return;
        };
        if let Some(reaper) = on
            .reaper_pinned_to(cpu)
            .and_then(|shard| self.shards.get(shard))
        {
            reaper.yield_if_reaper_overdue(self.now());
        }
    }

    /// This timer's shard that `handle` names, and where in it, if the shard is one of
    /// this timer's (the slot's generation check does the rest).
    #[inline]
    fn shard_of(&self, handle: TimerHandle) -> Option<(&Shard<T>, Named)> {
        let named = self.handles.named(handle);
        Some((self.shards.get(named.shard)?, named))
    }

    /// See [`Timer::cancel`](crate::Timer::cancel). The cancel's one call, taking the handle
    /// alone (`Shard::cancel_from` is inlined here): a call at the shard's cancel kept the
    /// decoded handle and the stage live across it in the caller's loop (W1: 14 more).
    #[inline(never)]
    pub(crate) fn cancel(&self, handle: TimerHandle) -> bool {
        let Some((shard, named)) = self.shard_of(handle) else {
            return false;
        };
        let stage = producer().stage(self, named.shard);
        shard.cancel_from(stage, named.slot, named.generation)
    }

    /// Cancels the timer `handle` names if it still waits in the calling thread's stage,
    /// untouched, and returns its payload (see `Shard::take_staged`); `None`, and nothing
    /// done, otherwise.
    ///
    /// # Safety
    ///
    /// No other thread holds `handle` (a sleep's own timer): none can cancel or reset the
    /// timer while this runs.
    #[inline]
    pub(crate) unsafe fn take_staged(&self, handle: TimerHandle) -> Option<T> {
        let (shard, named) = self.shard_of(handle)?;
        let stage = producer().stage(self, named.shard)?;
        // SAFETY: the caller's contract.
        unsafe { shard.take_staged(stage, named.slot, named.generation) }
    }

    /// Whether the timer `handle` names is still pending (see `Shard::is_pending`).
    #[inline]
    pub(crate) fn is_pending(&self, handle: TimerHandle) -> bool {
        self.shard_of(handle)
            .is_some_and(|(shard, named)| shard.is_pending(named.slot, named.generation))
    }

    /// See [`Timer::reset`](crate::Timer::reset).
    pub(crate) fn reset_due(&self, handle: TimerHandle, deadline: u64) -> Result<(), StaleHandle> {
        let (shard, named) = self.shard_of(handle).ok_or(StaleHandle)?;
        shard
            .reset(named.slot, named.generation, deadline)
            .then_some(())
            .ok_or(StaleHandle)
    }

    /// The shard `handle` names, for tests of where timers go.
    #[cfg(test)]
    pub(crate) fn shard_index(&self, handle: TimerHandle) -> usize {
        self.handles.named(handle).shard
    }
}

/// The CPU the calling thread runs on, where the OS tells (Linux: a read of what the kernel
/// keeps for the thread, no system call with a recent C library).
fn current_cpu() -> Option<u32> {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: `sched_getcpu` takes no argument and touches no memory of ours.
        let cpu = unsafe { libc::sched_getcpu() };
        u32::try_from(cpu).ok()
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    None
}
