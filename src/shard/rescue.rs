//! Rescue: a reaper runs the pass of a sibling shard whose own reaper is held up.
//!
//! A reaper is pinned to its core, and a core can be taken away from everything on it:
//! the hypervisor runs another guest on the virtual CPU for tens of milliseconds (steal
//! time), or a real-time task takes it. The shard's timers would then wait for their
//! reaper, late by as long as the core is gone, while the other cores run on. Nothing in
//! the guest can tell the reaper apart from a thread that is running: only the time can.
//!
//! So each reaper's wheel (its `Due`) sits behind a lock, which the reaper holds from the
//! moment it wakes until it parks again. Between its own passes, a reaper looks at its
//! siblings' plans: one that planned to wake more than `RESCUE_AFTER` ago, or that a
//! producer unparked for a timer due that long ago, and has not started its pass since, is
//! held up (`Wakeup::overdue`). If its lock is free (the reaper was parked, not stopped
//! in the middle of a pass, which holds the lock), the rescuer runs its pass: takes in
//! what its producers handed over and staged, and fires what is due. It then comes back
//! every `RESCUE_POLL`, or sooner for the sibling's next deadline, for as long as the
//! sibling's plan stays in the past; the held-up reaper, once back, takes its lock and
//! goes on as if it had made those passes itself (they are the same passes on the same
//! wheel, one at a time).
//!
//! The rescue pass leaves the sibling's plan as it was, in the past, so that producers
//! still see its reaper as due to wake rather than asleep: they stage and hand over as
//! for a reaper about to run, and the rescuer's next look takes their timers. The timers
//! a rescue pass fires are collected and their callbacks run once the sibling's lock is
//! let go, on the rescuing reaper's thread, and so are the payloads of the cancelled
//! timers it frees dropped (`Deferred`): user code never runs holding another shard's
//! lock (a callback or a payload's `Drop` may shut the timer down, which waits for the
//! sibling's reaper, and that reaper needs its lock to wind up). Their lateness is
//! recorded as they are claimed, the pass's remaining work before they run.
//!
//! A reaper looks at its siblings each time it wakes for its own work, and wakes to look
//! when a sibling is due at work and it would not wake otherwise: `RESCUE_AFTER` after
//! the sibling's time, but not sooner than `WATCH_INTERVAL` from its own last look (a
//! sibling at work counts as due now). So a reaper whose siblings are busy wakes a
//! hundred times a second at most to watch them, and an idle timer's reapers hardly ever.

use super::Shard;
use crate::clock::{self, Clock};
use crate::due::Due;
use crate::sync::Ordering;
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

/// How long after its planned wake-up a reaper that has not started its pass counts as
/// held up: well beyond the OS's usual lateness of a wake-up (tens of microseconds) and
/// the wait of a woken reaper for a core its producers keep busy (a time slice).
const RESCUE_AFTER: Duration = Duration::from_millis(2);

/// How often a reaper comes back to a sibling it rescued while that one stays held up:
/// timers handed over to the sibling meanwhile wait this long at most.
const RESCUE_POLL: Duration = Duration::from_millis(1);

/// The shortest a reaper sleeps when it wakes only to watch its siblings.
const WATCH_INTERVAL: Duration = Duration::from_millis(10);

/// What a rescue pass leaves for after the sibling's wheel is let go (see the module
/// doc): the payloads of the timers it fired, whose callbacks then run, and of the
/// cancelled timers it freed, which are then dropped.
pub(super) struct Deferred<T> {
    /// A rescue pass is under way. Written and read only by whoever holds the wheel's
    /// lock, which orders those accesses: Relaxed, and std's atomic (no loom model runs
    /// a rescue).
    rescuing: AtomicBool,
    /// Fired, and cancelled.
    payloads: Mutex<(Vec<T>, Vec<T>)>,
}

impl<T> Default for Deferred<T> {
    fn default() -> Self {
        Deferred {
            rescuing: AtomicBool::new(false),
            payloads: Mutex::new((Vec::new(), Vec::new())),
        }
    }
}

impl<T> Deferred<T> {
    fn payloads(&self) -> MutexGuard<'_, (Vec<T>, Vec<T>)> {
        self.payloads.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T> Shard<T> {
    /// The reaper's wheel (see `reaping`), locked. A panic while it was held can only
    /// have been the engine's own bug; the wheel stays as that pass left it.
    pub(super) fn wheel(&self) -> MutexGuard<'_, Option<Due>> {
        self.reaping.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the payload of a cancelled timer the wheel's holder freed: at once, or, in a
    /// rescue pass, once the pass has let the wheel go.
    pub(super) fn dispose(&self, payload: T) {
        if self.deferred.rescuing.load(Ordering::Relaxed) {
            self.deferred.payloads().1.push(payload);
        } else {
            self.discard(payload);
        }
    }

    /// Drops the payload of a cancelled timer (see `with_discard`), as user code; a
    /// payload with nothing to drop costs no call. Inlined: its own call (a frame around
    /// the call through `discard`) cost the owner's cancel as much again as the drop.
    #[inline(always)]
    pub(super) fn discard(&self, payload: T) {
        if std::mem::needs_drop::<T>() {
            self.contain(|| (self.slots.discard)(payload));
        }
    }
}

impl<T: Send> Shard<T> {
    /// Runs the pass of each of `siblings` (the timer's shards; this one is skipped) whose
    /// reaper is held up (see the module doc), and returns when to look at them again, if
    /// one was: nanoseconds since the start.
    pub(super) fn rescue(
        &self,
        siblings: &[Shard<T>],
        clock: &Clock,
        handler: &(dyn Fn(T) + Sync),
    ) -> Option<u64> {
        let mut again = None;
        for sibling in siblings
            .iter()
            .filter(|&sibling| !std::ptr::eq(sibling, self))
        {
            if !sibling
                .wakeup
                .overdue(clock.elapsed(), clock::nanos(RESCUE_AFTER))
            {
                continue;
            }
            let next = sibling.rescue_pass(clock);
            let (fired, cancelled) = std::mem::take(&mut *sibling.deferred.payloads());
            for payload in fired {
                sibling.contain(|| handler(payload));
            }
            for payload in cancelled {
                sibling.discard(payload);
            }
            if let Some(next) = next {
                let look = next.min(clock.elapsed().saturating_add(clock::nanos(RESCUE_POLL)));
                again = Some(again.map_or(look, |again: u64| again.min(look)));
            }
        }
        again
    }

    /// When to wake to look at `siblings` (this one is skipped) again, the time being
    /// `elapsed` (nanoseconds since the start): see the module doc.
    pub(super) fn watch(&self, siblings: &[Shard<T>], elapsed: u64) -> Option<u64> {
        siblings
            .iter()
            .filter(|&sibling| !std::ptr::eq(sibling, self))
            .map(|sibling| sibling.wakeup.due_by().unwrap_or(elapsed))
            .min()
            .map(|due_by| {
                due_by
                    .saturating_add(clock::nanos(RESCUE_AFTER))
                    .max(elapsed.saturating_add(clock::nanos(WATCH_INTERVAL)))
            })
    }

    /// A pass of this shard's, for a rescuer, if its reaper's lock is free and it is not
    /// stopping; what it fires and frees waits in `deferred`. Returns when the shard next
    /// has work (nanoseconds since the start; `u64::MAX` if it has none planned), or
    /// `None` if it made no pass.
    fn rescue_pass(&self, clock: &Clock) -> Option<u64> {
        let mut held = match self.reaping.try_lock() {
            Ok(held) => held,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        // Not started, or wound up.
        let due = held.as_mut()?;
        // Relaxed: a stopping reaper winds up once it is back; its last pass is its own.
        if self.stopping.load(Ordering::Relaxed) {
            return None;
        }
        self.deferred.rescuing.store(true, Ordering::Relaxed);
        let collect = |payload| self.deferred.payloads().0.push(payload);
        self.take_in_and_fire(due, clock.now(), &|| clock.elapsed(), &collect);
        self.deferred.rescuing.store(false, Ordering::Relaxed);
        self.reaper_stats().rescued += 1;
        let next = [
            self.wake_target(due),
            self.next_staged(due, clock.elapsed()),
        ]
        .into_iter()
        .flatten()
        .min();
        Some(next.unwrap_or(u64::MAX))
    }
}

#[cfg(all(test, target_os = "linux", not(miri)))]
mod tests {
    use crate::Timer;
    use crate::producer::keep_to_shard;
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
    use std::sync::{Arc, mpsc};
    use std::time::{Duration, Instant};

    /// How long the signal handler below keeps its thread stopped.
    static STALL_NANOS: AtomicU64 = AtomicU64::new(0);

    /// Stops the thread it runs on for `STALL_NANOS`, as a core taken away does.
    extern "C" fn stall(_signal: libc::c_int) {
        let nanos = STALL_NANOS.load(Relaxed);
        let pause = libc::timespec {
            tv_sec: (nanos / 1_000_000_000) as libc::time_t,
            tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: `nanosleep` is async-signal-safe, and both pointers are valid for the
        // call (the second may be null).
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }

    /// Stops thread `tid` of this process for `pause`, from wherever it is.
    fn stop_thread(tid: libc::c_long, pause: Duration) {
        STALL_NANOS.store(pause.as_nanos() as u64, Relaxed);
        let signal = libc::SIGRTMIN() + 5;
        // SAFETY: a zeroed `sigaction` is a valid value to fill in; the handler is an
        // `extern "C" fn(c_int)`, as `sa_sigaction` without `SA_SIGINFO` expects, and it
        // calls only async-signal-safe functions. `tgkill` names a thread of this process.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = stall as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            assert_eq!(libc::sigaction(signal, &action, std::ptr::null_mut()), 0);
            let pid = libc::c_long::from(libc::getpid());
            assert_eq!(libc::syscall(libc::SYS_tgkill, pid, tid, signal), 0);
        }
    }

    fn thread_id() -> libc::c_long {
        // SAFETY: `gettid` takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) }
    }

    /// What a test's timers send as they fire: a tag, how long after they were scheduled,
    /// and the thread they fired on.
    type Fire = (&'static str, Duration, libc::c_long);

    /// Schedules, on shard `index` of `timer`, a timer due in `delay` that sends `tag` when
    /// it fires.
    fn on_shard(
        timer: &Timer,
        index: usize,
        delay: Duration,
        fired: &mpsc::Sender<Fire>,
        tag: &'static str,
    ) {
        keep_to_shard(index);
        let fired = fired.clone();
        let scheduled = Instant::now();
        timer
            .schedule(delay, move || {
                let _ = fired.send((tag, scheduled.elapsed(), thread_id()));
            })
            .unwrap();
    }

    /// A two-shard timer whose shard 1's reaper is stopped for `pause` once it has parked,
    /// the thread id of that reaper, and where its timers' fires arrive; shard 0 has timers
    /// every 5 ms for 150 ms, for its reaper to wake and look at its sibling.
    fn held_up(
        pause: Duration,
    ) -> (
        Timer,
        libc::c_long,
        mpsc::Sender<Fire>,
        mpsc::Receiver<Fire>,
    ) {
        let timer = Timer::builder().shards(2).build().unwrap();
        let (fired, fires) = mpsc::channel();
        on_shard(&timer, 1, Duration::ZERO, &fired, "shard 1's reaper");
        let (_, _, reaper) = fires.recv().unwrap();
        // Parked by then: nothing is due for a second.
        std::thread::sleep(Duration::from_millis(50));
        stop_thread(reaper, pause);
        std::thread::sleep(Duration::from_millis(10));
        for beat in 1..=30 {
            on_shard(&timer, 0, Duration::from_millis(5 * beat), &fired, "beat");
        }
        (timer, reaper, fired, fires)
    }

    /// Waits for the timer tagged `tag` to fire; when and where it did.
    fn fire_of(fires: &mpsc::Receiver<Fire>, tag: &str) -> (Duration, libc::c_long) {
        loop {
            let (fired, after, by) = fires.recv_timeout(Duration::from_secs(3)).expect("fired");
            if fired == tag {
                return (after, by);
            }
        }
    }

    #[test]
    fn a_sibling_fires_the_timers_of_a_reaper_whose_thread_is_stopped() {
        let (timer, reaper, fired, fires) = held_up(Duration::from_millis(1_500));
        on_shard(&timer, 1, Duration::from_millis(20), &fired, "held up");
        let (after, by) = fire_of(&fires, "held up");
        assert_ne!(by, reaper, "fired by a sibling's reaper");
        assert!(
            after < Duration::from_millis(500),
            "fired {after:?} after it was scheduled"
        );
        assert!(timer.shard_counts(1).unwrap().rescued > 0);
        assert_eq!(timer.shard_counts(0).unwrap().rescued, 0);
    }

    /// A rescued timer's callback runs once the sibling's wheel is let go: a shutdown from
    /// it waits for the held-up reaper, which needs its wheel to wind up and hand back
    /// what its shard still had pending.
    #[test]
    fn a_rescued_callback_may_shut_the_timer_down() {
        let (timer, _, fired, fires) = held_up(Duration::from_millis(300));
        on_shard(&timer, 1, Duration::from_secs(10), &fired, "pending");
        let inner = timer.clone();
        keep_to_shard(1);
        timer
            .schedule(Duration::from_millis(5), move || {
                // Joins shard 1's reaper (not this one, the rescuer, which is running
                // the callback): its shard's timers come back.
                let handed_back = inner.shutdown().len();
                let _ = fired.send(("shut down", Duration::ZERO, handed_back as libc::c_long));
            })
            .unwrap();
        let (_, handed_back) = fire_of(&fires, "shut down");
        assert_eq!(handed_back, 1, "shard 1's pending timer");
        assert!(timer.shard_counts(1).unwrap().rescued > 0);
    }
    /// A payload whose drop shuts its timer down.
    struct ShutsDownOnDrop(Timer, mpsc::Sender<Fire>);

    impl Drop for ShutsDownOnDrop {
        fn drop(&mut self) {
            let handed_back = self.0.shutdown().len();
            let _ = self
                .1
                .send(("dropped", Duration::ZERO, handed_back as libc::c_long));
        }
    }

    /// A rescue pass drops the payloads of the cancelled timers it frees once the sibling's
    /// wheel is let go: a drop that shuts the timer down waits for the held-up reaper,
    /// which needs its wheel to wind up.
    #[test]
    fn a_payload_dropped_by_a_rescue_may_shut_the_timer_down() {
        let timer = Timer::builder().shards(2).build().unwrap();
        let (fired, fires) = mpsc::channel();
        on_shard(&timer, 1, Duration::ZERO, &fired, "shard 1's reaper");
        let (_, _, reaper) = fires.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        keep_to_shard(1);
        let payload = ShutsDownOnDrop(timer.clone(), fired.clone());
        // Due before the idle reaper's plan (a second): handed over to its wheel.
        let handle = timer
            .schedule(Duration::from_millis(800), move || drop(payload))
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        stop_thread(reaper, Duration::from_millis(300));
        std::thread::sleep(Duration::from_millis(5));
        // Its change waits for the held-up reaper, or for a rescue pass.
        assert!(timer.cancel(handle));
        on_shard(&timer, 1, Duration::from_millis(1), &fired, "due at once");
        for beat in 1..=60 {
            on_shard(&timer, 0, Duration::from_millis(5 * beat), &fired, "beat");
        }
        fire_of(&fires, "dropped");
        assert!(timer.shard_counts(1).unwrap().rescued > 0);
    }

    /// What became of each timer of the test below: runs of its callback, drops of its
    /// payload.
    struct Tally {
        runs: Vec<AtomicU32>,
        drops: Vec<AtomicU32>,
    }

    /// Timer `.1`'s payload, which counts its drop.
    struct Token(Arc<Tally>, usize);

    impl Drop for Token {
        fn drop(&mut self) {
            self.0.drops[self.1].fetch_add(1, Relaxed);
        }
    }

    /// Two producers schedule timers on both shards and cancel half of them a while later,
    /// once most have been handed over, while shard 1's reaper is stopped four times: each
    /// timer runs at most once, a cancelled one never, and every payload is dropped once
    /// (run, cancelled, or handed back at shutdown), whichever reaper's pass took it.
    #[test]
    fn every_timer_ends_once_across_rescues() {
        const TIMERS: usize = 20_000;
        const LAG: usize = 64;
        let timer = Timer::builder().shards(2).build().unwrap();
        let (fired, fires) = mpsc::channel();
        on_shard(&timer, 1, Duration::ZERO, &fired, "shard 1's reaper");
        let (_, _, reaper) = fires.recv().unwrap();
        let counters = || (0..TIMERS).map(|_| AtomicU32::new(0)).collect();
        let tally = Arc::new(Tally {
            runs: counters(),
            drops: counters(),
        });
        let cancelled: Vec<usize> = std::thread::scope(|s| {
            let producers: Vec<_> = (0..2)
                .map(|producer| {
                    let (timer, tally) = (&timer, &tally);
                    s.spawn(move || {
                        keep_to_shard(producer);
                        let mut random = 0x9e37_79b9_7f4a_7c15_u64 ^ producer as u64;
                        let mut handles = std::collections::VecDeque::new();
                        let mut cancelled = Vec::new();
                        for n in 0..TIMERS / 2 {
                            let id = producer * TIMERS / 2 + n;
                            random ^= random << 13;
                            random ^= random >> 7;
                            random ^= random << 17;
                            let token = Token(Arc::clone(tally), id);
                            let delay = Duration::from_micros(random % 30_000);
                            let handle = timer
                                .schedule(delay, move || {
                                    token.0.runs[token.1].fetch_add(1, Relaxed);
                                })
                                .unwrap();
                            handles.push_back((id, handle, random.is_multiple_of(2)));
                            if handles.len() > LAG {
                                let (id, handle, cancel) = handles.pop_front().unwrap();
                                if cancel && timer.cancel(handle) {
                                    cancelled.push(id);
                                }
                            }
                            if n.is_multiple_of(50) {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                        }
                        cancelled
                    })
                })
                .collect();
            for _ in 0..4 {
                std::thread::sleep(Duration::from_millis(20));
                stop_thread(reaper, Duration::from_millis(30));
                std::thread::sleep(Duration::from_millis(30));
            }
            producers
                .into_iter()
                .flat_map(|producer| producer.join().unwrap())
                .collect()
        });
        // Everything due has come due, and shard 1's reaper is back.
        std::thread::sleep(Duration::from_millis(100));
        let rescued = timer.shard_counts(1).unwrap().rescued;
        let handed_back = timer.shutdown().len();
        drop(timer);
        let runs: u32 = tally.runs.iter().map(|runs| runs.load(Relaxed)).sum();
        assert_eq!(runs as usize + cancelled.len() + handed_back, TIMERS);
        for id in 0..TIMERS {
            assert!(tally.runs[id].load(Relaxed) <= 1, "timer {id} ran twice");
            assert_eq!(tally.drops[id].load(Relaxed), 1, "timer {id}'s payload");
        }
        for &id in &cancelled {
            assert_eq!(tally.runs[id].load(Relaxed), 0, "timer {id} ran, cancelled");
        }
        assert!(rescued > 0);
    }
}
