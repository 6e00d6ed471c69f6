//! `Builder`: a timer's configuration, checked, and the start of its shards and reapers.
//! Also what makes a timer's handles its own: an id never given twice.

use super::{Driver, Engine, Manual, Timer, reaper_thread};
use crate::bound::Bound;
use crate::callback::{self, Callback};
use crate::clock::Clock;
use crate::due::Due;
use crate::error::BuildError;
use crate::handle::Handles;
use crate::observe;
use crate::scheduler::Scheduler;
use crate::shard::Shard;
use crate::sync::AtomicU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Configures and starts a [`Timer`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder()
///     .shards(2)
///     .tick(Duration::from_millis(1))
///     .max_pending(1_000_000)
///     .build()
///     .unwrap();
/// assert_eq!(timer.shards(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    shards: usize,
    tick: Duration,
    pin_threads: bool,
    max_pending: usize,
    manual: bool,
    record_lateness: bool,
    exact_deadlines: bool,
    spin: Duration,
    wake_early: bool,
    huge_pages: bool,
    /// The clock to count from, for a timer that takes over another's deadlines (the
    /// process-wide timer rebuilt in a forked child); a new one otherwise.
    clock: Option<Clock>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()),
            tick: Duration::from_millis(1),
            pin_threads: true,
            max_pending: usize::MAX,
            manual: false,
            record_lateness: true,
            exact_deadlines: true,
            spin: Duration::ZERO,
            wake_early: true,
            huge_pages: true,
            clock: None,
        }
    }
}

impl Builder {
    /// Counts from `clock` rather than from the build: deadlines in its nanoseconds (a
    /// sleep's made on the timer this one replaces) mean the same instants.
    pub(crate) fn on_clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Number of shards, each with its own reaper thread: 1 to 65,536. Default: the
    /// available cores.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(2).build().unwrap();
    /// assert_eq!(timer.shards(), 2);
    /// assert!(shardwheel::Timer::builder().shards(0).build().is_err());
    /// ```
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// The wheel's resolution. With exact deadlines (the default) a timer fires when its
    /// deadline passes whatever the tick, and the tick is how finely the wheel sorts timers
    /// before that; without, a timer fires at the start of the first tick at or after its
    /// deadline, at most one tick late. Never early, either way; plus the time the reaper
    /// takes to wake. A finer tick means more cascades and wake-ups, not costlier
    /// operations. Default: 1 ms.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// // Coarse timeouts: a 10 ms wheel, fired at tick starts.
    /// let timer = shardwheel::Timer::builder()
    ///     .shards(1)
    ///     .tick(Duration::from_millis(10))
    ///     .exact_deadlines(false)
    ///     .build()
    ///     .unwrap();
    /// # drop(timer);
    /// ```
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// Pin reaper `i` to core `i` (modulo the cores) where the system allows it; where it
    /// does not, the threads run unpinned. Default: true.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(1).pin_threads(false).build().unwrap();
    /// # drop(timer);
    /// ```
    pub fn pin_threads(mut self, pin: bool) -> Self {
        self.pin_threads = pin;
        self
    }

    /// How many timers may be pending at once over the whole timer, whichever threads
    /// schedule them; beyond it [`Timer::schedule`] returns [`ScheduleError::Full`](crate::ScheduleError::Full). A
    /// bound costs one counter that every shard shares (a cache line its producers and
    /// reapers all write); without one there is none. Default: unbounded (each shard can
    /// index 2^31 timers, fewer in a timer of over 64 shards: see
    /// [`TimerHandle`](crate::TimerHandle)).
    ///
    /// ```
    /// use shardwheel::ScheduleError;
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().max_pending(1).build().unwrap();
    /// timer.schedule(Duration::from_secs(1), || {}).unwrap();
    /// let refused = timer.schedule(Duration::from_secs(1), || {});
    /// assert!(matches!(refused, Err(ScheduleError::Full(_))));
    /// ```
    pub fn max_pending(mut self, max_pending: usize) -> Self {
        self.max_pending = max_pending;
        self
    }

    /// Record each fired timer's lateness in [`Timer::stats`]' histogram: a clock read
    /// and an uncontended lock per fired timer, on the reaper. The counts are kept either
    /// way. Default: true.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(1).record_lateness(false).build().unwrap();
    /// # drop(timer);
    /// ```
    pub fn record_lateness(mut self, record: bool) -> Self {
        self.record_lateness = record;
        self
    }

    /// Fire each timer when its exact deadline passes (true), or at the start of the first
    /// tick at or after it (false). Exact deadlines cost a reaper wake-up per distinct
    /// deadline in place of one per tick, and a small heap of the timers due within the
    /// current tick; timers cancelled before then cost nothing more. While a shard's timers
    /// come due in a dense stream (ten thousand a second or more), its reaper wakes once
    /// every 200 us rather than for each few deadlines, and fires what came due meanwhile:
    /// those timers are up to 200 us late, and the wake-ups (each a context switch, and a
    /// preemption of whatever shares the reaper's core) stay a few thousand a second;
    /// [`spin_before_deadline`](Self::spin_before_deadline) keeps them exact. Default:
    /// true.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(1).exact_deadlines(false).build().unwrap();
    /// # drop(timer);
    /// ```
    pub fn exact_deadlines(mut self, exact: bool) -> Self {
        self.exact_deadlines = exact;
        self
    }

    /// Each reaper spins instead of sleeping for the last `spin` before a deadline, so that
    /// timers fire within microseconds of it rather than when the OS wakes the thread
    /// (tens of microseconds, more on a busy machine). It keeps a core busy while a
    /// deadline is near: for latency-critical timers only. With a spin, exact deadlines
    /// stay exact in a dense stream of timers too (see
    /// [`exact_deadlines`](Self::exact_deadlines)). Default: zero (no spin).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder()
    ///     .shards(1)
    ///     .spin_before_deadline(Duration::from_micros(50))
    ///     .build()
    ///     .unwrap();
    /// # drop(timer);
    /// ```
    pub fn spin_before_deadline(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// Each reaper learns how late the OS ends its timed sleeps (a running median of it,
    /// 50 us at most) and wakes that much before each deadline it sleeps for, spinning
    /// the rest: timers fire within microseconds of their deadlines at the median, and the
    /// tail of their lateness is shorter by the same amount. The spin lasts about as long
    /// as the OS wakes the reaper earlier than usual, comes only after such a sleep, near
    /// the deadline it was for, and takes at most 1 % of the reaper's time: a reaper kept
    /// busy by producers, or waiting for a core on a loaded machine, hardly spins. Off, a
    /// reaper sleeps until the deadline itself and never spins but for
    /// [`spin_before_deadline`](Builder::spin_before_deadline). Default: true.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(1).wake_early(false).build().unwrap();
    /// # drop(timer);
    /// ```
    pub fn wake_early(mut self, wake_early: bool) -> Self {
        self.wake_early = wake_early;
        self
    }

    /// Whether each shard's slots, once they need chunks of 2 MiB and more (from some
    /// 65,000 pending timers a shard, with callbacks), ask Linux for transparent huge
    /// pages for them (where it offers them on request, its common `madvise` mode). With a
    /// million pending timers every cancel touches a random slot, and huge pages spare
    /// those accesses most TLB misses: engine W1 at a million pending timers ran 2.99 to
    /// 3.41x tokio's timers with them and 2.73 to 2.86x without. But a huge page is 2 MiB
    /// of memory at once: in a virtual machine that gives memory it does not use back to
    /// its host (free page reporting, as in Firecracker), the first touch of such memory
    /// stalls the CPU that makes it for milliseconds (3.5 to 4.7 ms a huge page on our
    /// test VM), a stop the other CPUs feel too, and their reapers with them, where small
    /// pages mostly come from memory the VM still holds. Turn this off there if the first spike of timers must
    /// fire on time, and the global allocator's huge pages too, which hold the boxes of
    /// callbacks that capture more than a word (mimalloc advises its arena onto huge
    /// pages unless `MIMALLOC_ALLOW_THP=0`). A million timers scheduled in a fresh
    /// process on our test VM fired with a p99 lateness over 2 ms in 6 of 9 runs with
    /// either left on (up to 16.6 ms), and at most 1.25 ms in 4 with both off. Default:
    /// true.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(1).huge_pages(false).build().unwrap();
    /// # drop(timer);
    /// ```
    pub fn huge_pages(mut self, huge_pages: bool) -> Self {
        self.huge_pages = huge_pages;
        self
    }

    /// Starts no reaper threads: the timer's time stands still until [`Timer::advance`]
    /// moves it, and its callbacks run inside `advance`, on the caller's thread. For tests
    /// and fuzzing: the same shards, slots, inboxes and state words as the threaded engine,
    /// driven deterministically. Default: off.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let fired = Arc::new(AtomicUsize::new(0));
    /// let count = Arc::clone(&fired);
    /// let timer = shardwheel::Timer::builder()
    ///     .manual()
    ///     .build_with(move |_: ()| {
    ///         count.fetch_add(1, Ordering::Relaxed);
    ///     })
    ///     .unwrap();
    /// timer.insert(Duration::from_secs(60), ()).unwrap();
    /// timer.advance(Duration::from_secs(59)).unwrap();
    /// assert_eq!(fired.load(Ordering::Relaxed), 0);
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// assert_eq!(fired.load(Ordering::Relaxed), 1);
    /// ```
    pub fn manual(mut self) -> Self {
        self.manual = true;
        self
    }

    /// Starts the reaper threads of a [`Timer`] of boxed callbacks.
    ///
    /// # Errors
    ///
    /// [`BuildError`] if the shard count is zero or above 65,536, the tick is zero, or a
    /// thread cannot be started.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// timer.schedule(Duration::from_millis(1), || println!("fired")).unwrap();
    /// ```
    pub fn build(self) -> Result<Timer, BuildError> {
        self.build_with(Callback::run)
    }

    /// Starts the reaper threads of a payload-generic [`Timer<T>`]: every timer carries a
    /// `T`, and `handler` runs with it, on a reaper thread, when the timer comes due. Nothing
    /// is allocated per timer (the payload lives in the shard's slab).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let expired = Arc::new(AtomicU64::new(0));
    /// let counter = Arc::clone(&expired);
    /// let timer = shardwheel::Timer::builder()
    ///     .shards(1)
    ///     .build_with(move |request_id: u64| {
    ///         counter.fetch_add(request_id, Ordering::Relaxed);
    ///     })
    ///     .unwrap();
    /// timer.insert(Duration::from_millis(1), 7).unwrap();
    /// let cancelled = timer.insert(Duration::from_secs(30), 100).unwrap();
    /// assert!(timer.cancel(cancelled));
    /// while timer.pending() > 0 {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert!(timer.shutdown().is_empty());
    /// assert_eq!(expired.load(Ordering::Relaxed), 7);
    /// ```
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build).
    pub fn build_with<T: Send + 'static>(
        self,
        handler: impl Fn(T) + Send + Sync + 'static,
    ) -> Result<Timer<T>, BuildError> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(BuildError::Shards(self.shards));
        }
        if self.tick.is_zero() {
            return Err(BuildError::ZeroTick);
        }
        let bound = Bound::new(self.max_pending);
        let clock = self.clock.unwrap_or_else(|| Clock::new(self.tick));
        let cores = if self.pin_threads && !self.manual {
            core_affinity::get_core_ids().unwrap_or_default()
        } else {
            Vec::new()
        };
        let reapers_by_cpu = reapers_by_cpu(&cores);
        let shards: Arc<[Shard<T>]> = (0..self.shards)
            .map(|_| {
                Shard::new(
                    usize::MAX,
                    clock.tick_nanos(),
                    self.record_lateness,
                    self.exact_deadlines,
                )
                .with_bound(bound.clone())
                .with_spin(self.spin)
                .with_wake_early(self.wake_early)
                .with_huge_pages(self.huge_pages)
                .with_discard(callback::discard_of::<T>())
                .with_slot_limit(Handles::slot_limit(self.shards))
                .with_reapers_by_cpu(Arc::clone(&reapers_by_cpu))
                .with_clock(clock)
            })
            .collect();
        let id = take_id(&NEXT_TIMER_ID).ok_or(BuildError::Ids)?;
        if self.manual {
            let manual = Manual {
                reapers: (0..self.shards).map(|_| Due::new()).collect(),
                handler: Box::new(handler),
            };
            let elapsed = Arc::new(AtomicU64::new(0));
            return Ok(Engine::start(
                Scheduler::new(id, shards, clock, Some(elapsed)),
                Driver::Manual(Mutex::new(Some(manual))),
            ));
        }
        let handler = Arc::new(handler);
        let mut reapers = Vec::new();
        let mut failure = None;
        for index in 0..self.shards {
            let shards = Arc::clone(&shards);
            let handler = Arc::clone(&handler);
            let core = (!cores.is_empty()).then(|| cores[index % cores.len()]);
            let reaper = std::thread::Builder::new()
                .name(format!("shardwheel-reaper-{index}"))
                .spawn(move || {
                    // Pinning is an optimisation: where it is refused, run unpinned.
                    if let Some(core) = core.filter(|&core| core_affinity::set_for_current(core)) {
                        shards[index].pinned_to(index, core.id);
                    }
                    reaper_thread::prepare();
                    // A callback that schedules (a periodic run rescheduling itself) does
                    // so on this reaper's own shard, and takes no producer's turn.
                    crate::producer::keep_to_shard(index);
                    observe::reaper_started(index);
                    let unfired = shards[index].run(&shards, &clock, &*handler);
                    observe::reaper_stopped(index, unfired.len());
                    unfired
                });
            match reaper {
                Ok(handle) => reapers.push(handle),
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        let timer = Engine::start(
            Scheduler::new(id, shards, clock, None),
            Driver::Reapers(Mutex::new(reapers)),
        );
        match failure {
            // Dropping `timer` stops the reapers already started.
            Some(error) => Err(BuildError::Thread(error)),
            None => Ok(timer),
        }
    }
}

/// The table of which shard's reaper is pinned to each CPU of `cores` (indexed by the
/// CPU's number), empty for none: each reaper fills in its own entry once pinned (see
/// `Shard::pinned_to`).
fn reapers_by_cpu(cores: &[core_affinity::CoreId]) -> Arc<[AtomicU32]> {
    let len = cores.iter().map(|core| core.id + 1).max().unwrap_or(0);
    (0..len).map(|_| AtomicU32::new(0)).collect()
}

/// The most shards a timer can have: each shard's handles then keep 21 bits for its
/// slot (see `Handles`).
const MAX_SHARDS: usize = 1 << 16;

/// Timer ids: every `u64` but the last.
const TIMER_IDS: u64 = u64::MAX;

/// The next id to give a timer: ids key a thread's stages, and a timer's handles.
static NEXT_TIMER_ID: AtomicU64 = AtomicU64::new(0);

/// Takes the next id from `counter`, or `None` once every id was given. Ids are never
/// given twice, so a thread's stage of a timer dropped long ago is never taken for a
/// later timer's, and no two timers share a handle key.
fn take_id(counter: &AtomicU64) -> Option<u64> {
    // Relaxed: ids only need to differ, which the RMW's total order gives.
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |id| {
            // Lazily: `id + 1` at the last id would overflow.
            (id < TIMER_IDS).then(|| id + 1)
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    // A reaper used to take a producer's turn at its first schedule (a periodic run
    // rescheduling itself): its timer went to whichever shard came next (here, the same
    // one in one case of 16), and two producers after it could share a shard.
    #[test]
    fn a_callback_schedules_on_its_reapers_own_shard() {
        let timer = Arc::new(Timer::builder().shards(16).build().unwrap());
        let (tx, rx) = mpsc::channel();
        let again = Arc::clone(&timer);
        let first = timer
            .schedule(Duration::ZERO, move || {
                let handle = again.schedule(Duration::from_secs(60), || {}).unwrap();
                tx.send(again.scheduler().shard_index(handle)).unwrap();
            })
            .unwrap();
        let reaper_scheduled_on = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(reaper_scheduled_on, timer.scheduler().shard_index(first));
    }

    #[test]
    fn timer_ids_are_never_given_twice() {
        let counter = AtomicU64::new(TIMER_IDS - 2);
        assert_eq!(take_id(&counter), Some(TIMER_IDS - 2));
        assert_eq!(take_id(&counter), Some(TIMER_IDS - 1));
        assert_eq!(take_id(&counter), None, "all given: none wraps round to 0");
        assert_eq!(take_id(&counter), None);
    }
}
