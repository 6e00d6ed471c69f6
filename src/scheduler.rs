//! What a timer needs to schedule, cancel and reset timers, apart from who drives its
//! shards: its shards, its clock, and its id. Cheap to clone (it shares the shards), so
//! that a periodic timer's callback can reschedule itself from a reaper thread.

use crate::clock::{self, Clock};
use crate::error::{ScheduleError, StaleHandle};
use crate::handle::TimerHandle;
use crate::shard::{Refused, Shard};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct Scheduler<T: Send + 'static> {
    /// Tells this timer's handles from another's (see `timer::take_id`).
    id: u64,
    shards: Arc<[Shard<T>]>,
    clock: Clock,
    /// A manual timer's time since its start, moved only by `advance`; `None` for a timer
    /// on the real clock.
    manual_elapsed: Option<Arc<AtomicU64>>,
}

impl<T: Send + 'static> Clone for Scheduler<T> {
    fn clone(&self) -> Self {
        Scheduler {
            id: self.id,
            shards: Arc::clone(&self.shards),
            clock: self.clock,
            manual_elapsed: self.manual_elapsed.clone(),
        }
    }
}

/// Hands producer threads out to shards round-robin.
static NEXT_PRODUCER: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard, modulo the shard count: assigned once, kept after.
    static PRODUCER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Makes the calling thread schedule on shard `index` (modulo a timer's shard count)
/// from now on, rather than on the next shard in turn: a reaper keeps to its own, so that
/// a callback's timers stay on its core and the producers' turns stay spread.
pub(crate) fn keep_to_shard(index: usize) {
    PRODUCER.with(|producer| producer.set(Some(index)));
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
            shards,
            clock,
            manual_elapsed,
        }
    }

    pub(crate) fn shards(&self) -> &Arc<[Shard<T>]> {
        &self.shards
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

    /// The deadline of a timer `delay` from now, by this timer's clock.
    pub(crate) fn deadline_after(&self, delay: Duration) -> u64 {
        self.now().saturating_add(clock::nanos(delay))
    }

    /// The deadline of a timer due at `instant`.
    pub(crate) fn deadline_at(&self, instant: Instant) -> u64 {
        self.clock.deadline_at(instant)
    }

    /// Schedules `payload` at `deadline` on this thread's shard.
    pub(crate) fn insert_due(
        &self,
        deadline: u64,
        payload: T,
    ) -> Result<TimerHandle, ScheduleError<T>> {
        let shard = self.producer_shard();
        match self.shards[shard].schedule(deadline, payload) {
            Ok((slot, generation)) => Ok(TimerHandle::new(self.id, shard as u32, slot, generation)),
            Err(Refused::Full(payload)) => Err(ScheduleError::Full(payload)),
            Err(Refused::Closed(payload)) => Err(ScheduleError::Shutdown(payload)),
        }
    }

    fn producer_shard(&self) -> usize {
        PRODUCER.with(|producer| {
            let index = producer.get().unwrap_or_else(|| {
                let index = NEXT_PRODUCER.fetch_add(1, Ordering::Relaxed);
                producer.set(Some(index));
                index
            });
            index % self.shards.len()
        })
    }

    /// This timer's shard that `handle` names, if it is one of this timer's handles.
    fn shard_of(&self, handle: TimerHandle) -> Option<&Shard<T>> {
        if handle.timer() != self.id {
            return None;
        }
        self.shards.get(handle.shard() as usize)
    }

    /// See [`Timer::cancel`](crate::Timer::cancel).
    pub(crate) fn cancel(&self, handle: TimerHandle) -> bool {
        self.shard_of(handle)
            .is_some_and(|shard| shard.cancel(handle.slot(), handle.generation()))
    }

    /// See [`Timer::reset`](crate::Timer::reset).
    pub(crate) fn reset_due(&self, handle: TimerHandle, deadline: u64) -> Result<(), StaleHandle> {
        let shard = self.shard_of(handle).ok_or(StaleHandle)?;
        shard
            .reset(handle.slot(), handle.generation(), deadline)
            .then_some(())
            .ok_or(StaleHandle)
    }
}
