//! W3 (request timeouts from T threads, 90 % cancelled) for `bench engine`: shardwheel
//! against tokio's timers, with and without lateness recording and exact deadlines, beside
//! the loop with no timer (`no-timer`, the floor: `vs_tokio-sleep_over_floor` compares
//! what each timer adds to it, paired round by round); and
//! `W3-slack`, W3 with exact deadlines against a 10 ms slack per timer
//! (`Timer::schedule_at_within`), in the same run: reaper passes (wake-ups, and passes made
//! without sleeping) and the CPU time not spent by the producers (the reapers'), each per
//! second of the round, from the timer's counts and `getrusage`.
//!
//! With `W3_TAKE_CORE` set (and the rights to a real-time thread: root), W3 runs with the
//! last CPU taken from everything on it for 20 ms of every 500 ms, as a hypervisor that
//! runs another guest on a virtual CPU takes it (`W3-taken` in the RESULT lines): the
//! rescue of a held-up reaper by its sibling against tokio's timers.

use super::{
    Engine, NoTimer, Probe, Run, Shardwheel, TokioSleep, lateness_fields, over_floor, paired,
    take_turns,
};
use crate::common::{SplitMix64, median};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// W3's window per round, and rounds per implementation (they take turns).
const W3_WINDOW: Duration = Duration::from_secs(1);
const W3_ROUNDS: usize = 5;
/// Timers waiting to be cancelled, per producer: a new one replaces a random one, which is
/// cancelled, so each lives a random ~1,000 operations (a millisecond or less).
const W3_RING: usize = 1024;
/// Timers that time out and run, per implementation over its rounds, that its probe makes
/// room for beforehand: more than shardwheel's 0.44M at two threads.
const W3_FIRES: usize = 1_000_000;
/// With `W3_TAKE_CORE`: how long the real-time thread takes its CPU, and how often.
const TAKE_FOR: Duration = Duration::from_millis(20);
const TAKE_EVERY: Duration = Duration::from_millis(500);

/// One W3 round's counts.
#[derive(Default)]
struct W3Round {
    ops: usize,
    scheduled: usize,
    cancelled: usize,
    /// The window, and the time it took the engine to catch up after it.
    elapsed: Duration,
    /// The producer thread's CPU time.
    cpu: Duration,
}

/// One W3 round's figures: operations per second, the engine's reaper passes and the
/// CPU time that is not the producers' (its reapers', as the main thread waits), over the
/// round, where the engine can count passes, and the time the host took the machine's
/// CPUs away meanwhile.
struct W3Figures {
    rate: f64,
    passes: Option<u64>,
    rescued: Option<u64>,
    reaper_cpu: Duration,
    elapsed: Duration,
    steal: Duration,
}

/// One W3 round with `threads` producers for `W3_WINDOW`: operations per second,
/// counting the time the engine needs to catch up after the window (its reapers may lag),
/// after checking that every timer is accounted for (where the engine can tell).
fn w3_measured<E: Engine>(threads: usize, probe: &'static Probe) -> W3Figures {
    let engine = E::start();
    let (passes_before, cpu_before) = (engine.passes(), cpu(libc::RUSAGE_SELF));
    let rescued_before = engine.rescued();
    let steal_before = host_steal();
    let fired_before = probe.fired.load(Relaxed) + probe.unexpected.load(Relaxed);
    let rounds: Vec<W3Round> = thread::scope(|s| {
        let producers: Vec<_> = (0..threads)
            .map(|t| {
                let engine = &engine;
                s.spawn(move || engine.enter(|| w3_producer(engine, t, probe)))
            })
            .collect();
        producers.into_iter().map(|p| p.join().unwrap()).collect()
    });
    let ops: usize = rounds.iter().map(|r| r.ops).sum();
    let scheduled: usize = rounds.iter().map(|r| r.scheduled).sum();
    let cancelled: usize = rounds.iter().map(|r| r.cancelled).sum();
    let producers_cpu: Duration = rounds.iter().map(|r| r.cpu).sum();
    let reaper_cpu = (cpu(libc::RUSAGE_SELF) - cpu_before).saturating_sub(producers_cpu);
    let passes = engine
        .passes()
        .zip(passes_before)
        .map(|(after, before)| after - before);
    let rescued = engine
        .rescued()
        .zip(rescued_before)
        .map(|(after, before)| after - before);
    if let Some(handed_back) = engine.stop() {
        // The probe counts over all rounds; this engine's reapers have all stopped.
        let fired = probe.fired.load(Relaxed) + probe.unexpected.load(Relaxed) - fired_before;
        assert_eq!(
            fired + cancelled + handed_back,
            scheduled,
            "{}: timers lost or run twice (fired counts the requests that timed out)",
            E::NAME
        );
    }
    let elapsed = rounds.iter().map(|r| r.elapsed).max().unwrap_or(W3_WINDOW);
    W3Figures {
        rate: ops as f64 / elapsed.as_secs_f64(),
        passes,
        rescued,
        reaper_cpu,
        elapsed,
        steal: host_steal().saturating_sub(steal_before),
    }
}

fn w3_producer<E: Engine>(engine: &E, thread: usize, probe: &'static Probe) -> W3Round {
    let mut rng = SplitMix64(42 + thread as u64);
    let mut ring: Vec<Option<E::Armed>> = (0..W3_RING).map(|_| None).collect();
    let mut round = W3Round::default();
    let (start, cpu_start) = (Instant::now(), cpu(libc::RUSAGE_THREAD));
    while start.elapsed() < W3_WINDOW {
        for _ in 0..256 {
            let delay = Duration::from_millis(rng.between(100, 10_000));
            round.scheduled += 1;
            round.ops += 1;
            if rng.between(0, 9) == 0 {
                // A timeout that will run: its lateness is measured from a deadline.
                engine.fire_at(Instant::now() + delay, probe);
                continue;
            }
            let at = rng.between(0, W3_RING as u64 - 1) as usize;
            if let Some(old) = ring[at].replace(engine.arm(delay, probe)) {
                // False only if the request outlived its timeout: a producer stalled for
                // 100 ms (it then ran as a timeout; counted in the probe's `unexpected`).
                round.cancelled += usize::from(engine.cancel(old));
                round.ops += 1;
            }
        }
    }
    // The requests still waiting finish too (before any can come due).
    for armed in ring.into_iter().flatten() {
        round.cancelled += usize::from(engine.cancel(armed));
        round.ops += 1;
    }
    // The engine may have taken work in faster than its reaper did it: a timer due now,
    // on this producer's shard, fires only once the reaper has caught up with it all.
    engine.catch_up();
    round.elapsed = start.elapsed();
    round.cpu = cpu(libc::RUSAGE_THREAD) - cpu_start;
    round
}

pub(super) fn w3() {
    let taken = take_core();
    let workload = if taken.is_some() { "W3-taken" } else { "W3" };
    type Rounded = Shardwheel<true, false>;
    let runs: [Run<W3Figures>; 5] = [
        (Shardwheel::<true>::NAME, w3_measured::<Shardwheel<true>>),
        (Shardwheel::<false>::NAME, w3_measured::<Shardwheel<false>>),
        (TokioSleep::NAME, w3_measured::<TokioSleep>),
        (Rounded::NAME, w3_measured::<Rounded>),
        (NoTimer::NAME, w3_measured::<NoTimer>),
    ];
    for threads in [1, 2] {
        let probes = runs.map(|_| Probe::leak(W3_FIRES));
        let turns = take_turns(
            &format!("{workload} T={threads}"),
            W3_ROUNDS,
            &runs,
            threads,
            probes,
        );
        let (figures, same) = (&turns.figures, &turns.same_load);
        let rates = figures
            .each_ref()
            .map(|figures| figures.iter().map(|f| f.rate).collect::<Vec<_>>());
        for ((name, _), ((rates, figures), probe)) in
            runs.iter().zip(rates.iter().zip(figures).zip(probes))
        {
            if *name == NoTimer::NAME {
                let rate = median(rates.clone());
                println!("RESULT {workload} T={threads} {name} ops_per_s={rate:.0}");
                continue;
            }
            let lateness = probe.sorted_lateness();
            let steal: Duration = figures.iter().map(|f| f.steal).sum();
            let rescued: Option<u64> = figures.iter().map(|f| f.rescued).sum();
            let rescued = rescued.map_or(String::new(), |n| format!(" rescued={n}"));
            println!(
                "RESULT {workload} T={threads} {name} ops_per_s={:.0} {} fired={} early={} timed_out={} host_steal_ms={}{rescued}",
                median(rates.clone()),
                lateness_fields(
                    &lateness,
                    &[("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)]
                ),
                lateness.len(),
                probe.early.load(Relaxed),
                probe.unexpected.load(Relaxed),
                steal.as_millis(),
            );
        }
        println!(
            "RESULT {workload} T={threads} shardwheel vs_tokio-sleep={:.2} vs_tokio-sleep_over_floor={:.2} lateness_recording_cost_pct={:.1} exact_deadlines_cost_pct={:.1} {}",
            paired(&rates[0], &rates[2], same),
            over_floor(&rates[0], &rates[2], &rates[4], same),
            100.0 * (1.0 - paired(&rates[0], &rates[1], same)),
            100.0 * (1.0 - paired(&rates[0], &rates[3], same)),
            turns.same_load_rounds(),
        );
    }
}

/// A real-time thread that takes a CPU from everything else on it for `TAKE_FOR` of every
/// `TAKE_EVERY`, until dropped (see the module doc).
struct TakenCore {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for TakenCore {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// With `W3_TAKE_CORE` set, takes the last CPU (see `TakenCore`), if a real-time thread
/// is allowed; says which, or why not.
fn take_core() -> Option<TakenCore> {
    std::env::var_os("W3_TAKE_CORE")?;
    let core = *core_affinity::get_core_ids()?.last()?;
    let stop = Arc::new(AtomicBool::new(false));
    let (ready, is_ready) = mpsc::channel();
    let thread = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let param = libc::sched_param { sched_priority: 50 };
            // SAFETY: sets the calling thread's (0) policy; `param` is valid for the call.
            let real_time = core_affinity::set_for_current(core)
                && unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0;
            let _ = ready.send(real_time);
            while real_time && !stop.load(Relaxed) {
                thread::sleep(TAKE_EVERY - TAKE_FOR);
                let start = Instant::now();
                while start.elapsed() < TAKE_FOR {
                    std::hint::spin_loop();
                }
            }
        })
    };
    if !is_ready.recv().unwrap_or(false) {
        println!("# W3_TAKE_CORE: no real-time thread allowed (it needs root): no CPU taken");
        let _ = thread.join();
        return None;
    }
    println!(
        "# W3_TAKE_CORE: a real-time thread takes CPU {} for {TAKE_FOR:?} of every {TAKE_EVERY:?}",
        core.id
    );
    Some(TakenCore {
        stop,
        thread: Some(thread),
    })
}

/// CPU time used by `who` (`RUSAGE_SELF`: the process; `RUSAGE_THREAD`: the calling
/// thread), user and system, from `getrusage`.
fn cpu(who: libc::c_int) -> Duration {
    // SAFETY: `getrusage` writes a `rusage` into the zeroed one it is given, nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// CPU time the host has taken from this machine's CPUs (all of them) while they had work,
/// as Linux counts it in a virtual machine (the `steal` column of `/proc/stat`, in clock
/// ticks of 10 ms): this VM's CPUs, one or both, stop for 10 to 20 ms at times, and such
/// stops show here. Zero where the host does not report it.
fn host_steal() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = stat
        .lines()
        .next()
        .and_then(|all| all.split_whitespace().nth(8)?.parse().ok())
        .unwrap_or(0);
    // SAFETY: `sysconf` reads a constant of the system; it takes no pointer.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

/// W3-slack: W3's producers on a timer with exact deadlines and on one whose timers each
/// have 10 ms of slack, taking turns in one run.
pub(super) fn w3_slack() {
    type Slack = Shardwheel<true, true, 1000, 0, 10>;
    let runs: [Run<W3Figures>; 2] = [
        (Shardwheel::<true>::NAME, w3_measured::<Shardwheel<true>>),
        (Slack::NAME, w3_measured::<Slack>),
    ];
    for threads in [1, 2] {
        let probes = runs.map(|_| Probe::leak(W3_FIRES));
        let label = format!("W3-slack T={threads}");
        let figures = take_turns(&label, W3_ROUNDS, &runs, threads, probes).figures;
        let per_second = |figures: &[W3Figures], of: fn(&W3Figures) -> f64| {
            median(
                figures
                    .iter()
                    .map(|f| of(f) / f.elapsed.as_secs_f64())
                    .collect(),
            )
        };
        let passes = |f: &W3Figures| f.passes.unwrap_or(0) as f64;
        let cpu_ms = |f: &W3Figures| f.reaper_cpu.as_secs_f64() * 1e3;
        for ((name, _), (figures, probe)) in runs.iter().zip(figures.iter().zip(probes)) {
            let lateness = probe.sorted_lateness();
            println!(
                "RESULT W3-slack T={threads} {name} ops_per_s={:.0} passes_per_s={:.0} reaper_cpu_ms_per_s={:.1} {} fired={} early={}",
                median(figures.iter().map(|f| f.rate).collect()),
                per_second(figures, passes),
                per_second(figures, cpu_ms),
                lateness_fields(&lateness, &[("p50", 0.5), ("p99", 0.99), ("max", 1.0)]),
                lateness.len(),
                probe.early.load(Relaxed),
            );
        }
    }
}
