//! The soak: the mixed workload at a fixed rate for a long time (`--duration`), with
//! cancels, resets, periodic timers and a share of panicking callbacks, printing RSS and the
//! counts every 10 s; then every timer is accounted for, caught panics must have printed
//! nothing, and RSS must have stayed within 10 % of its value after the first minute.
//!
//! One-shot timers are counted where they end: the producers count what they scheduled and
//! the cancels that won, each callback counts its run, and a payload dropped unrun (cancelled,
//! or handed back by `shutdown`) counts that. Periodic series keep their own tally: runs
//! counted in the closure against [`Periodic::runs`], and the closure's drop.

use crate::config::{Config, Delays};
use crate::run::{Random, pace, process_cpu, resident_bytes};
use shardwheel::{Period, Periodic, Timer, TimerHandle};
use std::panic;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

mod outcome;
mod quiet;

pub use outcome::Outcome;
use quiet::{Planned, QuietPanics};

/// A soak's settings, all resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long the producers run.
    pub duration: Duration,
    /// Time between two progress lines.
    pub interval: Duration,
    /// RSS is compared with its value this long into the run (if the run lasts longer).
    pub settle: Duration,
    /// Producer threads.
    pub producers: usize,
    /// One-shot timers scheduled a second, per producer.
    pub rate: u64,
    /// One-shot timers' delays (and their resets').
    pub delays: Delays,
    /// Share of one-shot timers cancelled shortly after they are scheduled.
    pub cancel: f64,
    /// Resets per one-shot timer scheduled (of a timer scheduled a little earlier).
    pub reset: f64,
    /// Share of callbacks (one-shot and periodic runs) that panic.
    pub panic: f64,
    /// Periodic series each producer keeps running.
    pub series: usize,
    /// One-shot timers a producer schedules between replacing one of its series.
    pub replace_every: u64,
    /// Shards (reaper threads).
    pub shards: usize,
    /// The wheel's tick.
    pub tick: Duration,
}

impl Settings {
    /// The soak `config` describes, with its fixed shares: 0.25 resets per timer, 0.1 %
    /// panicking callbacks, 32 periodic series per producer, one replaced every 5,000 timers.
    pub fn new(config: &Config) -> Settings {
        Settings {
            duration: config.duration.unwrap_or(Duration::from_secs(600)),
            interval: Duration::from_secs(10),
            settle: Duration::from_secs(60),
            producers: config.producers,
            rate: config.rate.unwrap_or(50_000),
            delays: config.delays,
            cancel: config.cancel,
            reset: 0.25,
            panic: 0.001,
            series: 32,
            replace_every: 5_000,
            shards: config.shards,
            tick: config.tick,
        }
    }
}

/// A counter on its own cache line: producers and reapers bump different ones.
#[derive(Default)]
#[repr(align(128))]
struct Count(AtomicU64);

impl Count {
    fn add(&self, n: u64) {
        // Relaxed: read for progress lines, and at the end after the threads are joined.
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What the producers, the callbacks and the payloads' drops count.
#[derive(Default)]
struct Counts {
    scheduled: Count,
    cancelled: Count,
    reset: Count,
    stale_resets: Count,
    fired: Count,
    /// One-shot payloads dropped without having run.
    unrun: Count,
    /// Panics the callbacks raised on purpose, one-shot and periodic.
    planned: Count,
    periodic_started: Count,
    periodic_runs: Count,
}

/// A one-shot timer's callback state: counts its run, or its drop unrun.
struct Shot {
    counts: Arc<Counts>,
    panics: bool,
    ran: bool,
}

impl Shot {
    fn fire(mut self) {
        self.ran = true;
        self.counts.fired.add(1);
        if self.panics {
            self.counts.planned.add(1);
            panic::panic_any(Planned);
        }
    }
}

impl Drop for Shot {
    fn drop(&mut self) {
        if !self.ran {
            self.counts.unrun.add(1);
        }
    }
}

/// One periodic series' own count of its runs, and whether its closure was dropped.
#[derive(Default)]
struct Tally {
    runs: AtomicU64,
    dropped: AtomicBool,
}

/// A periodic series' closure state.
struct Beat {
    counts: Arc<Counts>,
    tally: Arc<Tally>,
    random: Random,
    panic: f64,
}

impl Beat {
    fn run(&mut self) {
        self.tally.runs.fetch_add(1, Ordering::Relaxed);
        self.counts.periodic_runs.add(1);
        if self.random.unit() < self.panic {
            self.counts.planned.add(1);
            panic::panic_any(Planned);
        }
    }
}

impl Drop for Beat {
    fn drop(&mut self) {
        // Release: whoever sees the flag sees the last run's count, and `Periodic::runs`,
        // which the engine bumps before it drops the closure, final.
        self.tally.dropped.store(true, Ordering::Release);
    }
}

/// A series a producer started, and its tally.
struct Series {
    periodic: Periodic,
    tally: Arc<Tally>,
}

/// What the series that have been looked at came to.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesTotals {
    /// Series looked at.
    pub series: u64,
    /// Series no longer active (cancelled, or ended by the shutdown).
    pub ended: u64,
    /// Series whose closure was dropped.
    pub dropped: u64,
    /// Runs counted in the closures.
    pub counted: u64,
    /// Runs by [`Periodic::runs`].
    pub runs: u64,
}

impl SeriesTotals {
    fn add(&mut self, series: &Series) {
        self.series += 1;
        self.ended += u64::from(!series.periodic.is_active());
        self.dropped += u64::from(series.tally.dropped.load(Ordering::Acquire));
        self.counted += series.tally.runs.load(Ordering::Relaxed);
        self.runs += series.periodic.runs();
    }

    fn merge(&mut self, other: SeriesTotals) {
        self.series += other.series;
        self.ended += other.ended;
        self.dropped += other.dropped;
        self.counted += other.counted;
        self.runs += other.runs;
    }
}

/// Adds up the retired series whose closure has been dropped (their counts are final), and
/// keeps the others.
fn sweep(retired: &mut Vec<Series>, totals: &mut SeriesTotals) {
    retired.retain(|series| {
        let done = series.tally.dropped.load(Ordering::Acquire);
        if done {
            totals.add(series);
        }
        !done
    });
}

/// Timers each producer keeps within reach for a cancel or a reset.
const RING: usize = 1024;

/// How often the timers pending are looked at, for their peak.
const PEAK_EVERY: Duration = Duration::from_millis(5);

/// Operations between two looks at the clock for the rate.
const PACE_EVERY: u64 = 32;

/// How long one producer thread produces before it exits and a new thread takes its work
/// over: each exits with timers still staged, which the reaper must collect from the stage
/// it leaves (and count exactly, `pending` included).
const THREAD_LIFE: Duration = Duration::from_secs(2);

/// One producer thread's state.
struct Producer<'a> {
    timer: &'a Timer,
    settings: &'a Settings,
    counts: &'a Arc<Counts>,
    random: Random,
    /// Timers within reach for a cancel or a reset.
    ring: Vec<Option<TimerHandle>>,
}

impl Producer<'_> {
    /// Schedules a one-shot timer into the ring; the timer it pushes out is cancelled (at
    /// the cancel share) or left to fire, and a timer of the ring is reset (at the reset
    /// share).
    fn shot(&mut self) {
        let (timer, settings, random) = (self.timer, self.settings, &mut self.random);
        let shot = Shot {
            counts: Arc::clone(self.counts),
            panics: random.unit() < settings.panic,
            ran: false,
        };
        let handle = timer
            .schedule(random.delay(settings.delays), move || shot.fire())
            .expect("no bound was set, and the timer runs until the end");
        self.counts.scheduled.add(1);
        let evicted = self.ring[(random.next() % RING as u64) as usize].replace(handle);
        if random.unit() < settings.cancel
            && let Some(evicted) = evicted
            && timer.cancel(evicted)
        {
            self.counts.cancelled.add(1);
        }
        if random.unit() < settings.reset
            && let Some(handle) = self.ring[(random.next() % RING as u64) as usize]
        {
            match timer.reset(handle, random.delay(settings.delays)) {
                Ok(()) => self.counts.reset.add(1),
                Err(_) => self.counts.stale_resets.add(1),
            }
        }
    }

    /// Starts a periodic series of a random kind, period 10 to 100 ms, its first run within
    /// a period.
    fn start_series(&mut self) -> Series {
        let random = &mut self.random;
        let period = Duration::from_millis(10 + random.next() % 91);
        let kind = match random.next() % 3 {
            0 => Period::FixedRate(period),
            1 => Period::FixedRateBurst(period),
            _ => Period::FixedDelay(period),
        };
        let tally = Arc::new(Tally::default());
        let mut beat = Beat {
            counts: Arc::clone(self.counts),
            tally: Arc::clone(&tally),
            random: Random(random.next()),
            panic: self.settings.panic,
        };
        let periodic = self
            .timer
            .schedule_periodic(period.mul_f64(random.unit()), kind, move || beat.run())
            .expect("a period of 10 ms or more, no bound, and the timer runs until the end");
        self.counts.periodic_started.add(1);
        Series { periodic, tally }
    }
}

/// One producer: one-shot timers at the rate, cancels and resets among them, periodic series
/// replaced now and then, until `stop`. Returns its series not yet added up, and the totals
/// of those that were.
fn produce(
    mut producer: Producer<'_>,
    started: &Barrier,
    stop: &AtomicBool,
) -> (Vec<Series>, SeriesTotals) {
    let settings = producer.settings;
    // A thread keeps the shard it is given at its first timer, first come first served.
    // Every producer takes its own before the first periodic run can come due: a reaper
    // that reschedules one takes a shard then, and would otherwise push two producers onto
    // one shard.
    producer.shot();
    started.wait();
    let mut live: Vec<Series> = (0..settings.series)
        .map(|_| producer.start_series())
        .collect();
    let mut retired = Vec::new();
    let mut totals = SeriesTotals::default();
    let start = Instant::now();
    let mut i = 0;
    // Relaxed: a flag; the scope's join orders everything after it.
    while !stop.load(Ordering::Relaxed) {
        // The work goes on in a new thread for `THREAD_LIFE`, which then exits, leaving its
        // stage to the reaper.
        let life_end = Instant::now() + THREAD_LIFE;
        let mut work = (producer, live, retired, totals, i);
        work = thread::scope(|s| {
            s.spawn(move || {
                let (producer, live, retired, totals, i) = &mut work;
                while !stop.load(Ordering::Relaxed) {
                    if *i % PACE_EVERY == 0 {
                        if Instant::now() >= life_end {
                            break;
                        }
                        pace(start, *i, settings.rate);
                    }
                    producer.shot();
                    *i += 1;
                    if *i % settings.replace_every == 0 && !live.is_empty() {
                        let at = (producer.random.next() % live.len() as u64) as usize;
                        let old = std::mem::replace(&mut live[at], producer.start_series());
                        old.periodic.cancel();
                        retired.push(old);
                        sweep(retired, totals);
                    }
                }
                work
            })
            .join()
            .expect("a producer panicked")
        });
        (producer, live, retired, totals, i) = work;
    }
    // The ring's timers are left pending: some fire, the rest are handed back.
    live.append(&mut retired);
    (live, totals)
}

/// Runs the soak; `print` gets the opening line and a progress line every interval.
pub fn soak(settings: &Settings, print: &mut dyn FnMut(&str)) -> Outcome {
    print(&format!(
        "shardwheel-load: soak for {:?}: {} producers at {} timers/s each, {} shards, tick {:?}, delays {}, {:.0} % cancelled, {} resets a timer, {} % of callbacks panic, {} periodic series a producer",
        settings.duration,
        settings.producers,
        settings.rate,
        settings.shards,
        settings.tick,
        settings.delays,
        settings.cancel * 100.0,
        settings.reset,
        settings.panic * 100.0,
        settings.series
    ));
    let quiet = QuietPanics::install();
    let timer = Timer::builder()
        .shards(settings.shards)
        .tick(settings.tick)
        .build()
        .expect("the configuration was checked");
    let counts = Arc::new(Counts::default());
    let stop = AtomicBool::new(false);
    let (mut rss_settled, mut rss_end, mut rss_peak) = (None, None, None);
    let (mut slots_settled, mut slots_end, mut pending_peak) = (None, 0, 0);
    let cpu_before = process_cpu();
    let start = Instant::now();
    let mut series = Vec::new();
    let mut totals = SeriesTotals::default();
    let started = Barrier::new(settings.producers);
    thread::scope(|s| {
        let producers: Vec<_> = (0..settings.producers)
            .map(|index| {
                let producer = Producer {
                    timer: &timer,
                    settings,
                    counts: &counts,
                    random: Random(0x50a4 + index as u64),
                    ring: vec![None; RING],
                };
                let (started, stop) = (&started, &stop);
                s.spawn(move || produce(producer, started, stop))
            })
            .collect();
        let mut next = settings.interval.min(settings.duration);
        loop {
            // The timers pending at their most since the last line: a backlog the reapers
            // caught up with in between leaves its slots behind.
            let mut peak = timer.pending();
            while let Some(wait) = (start + next).checked_duration_since(Instant::now()) {
                thread::sleep(wait.min(PEAK_EVERY));
                peak = peak.max(timer.pending());
            }
            pending_peak = pending_peak.max(peak);
            let rss = resident_bytes("VmRSS");
            let slots = timer.stats().slots;
            print(&progress(
                start.elapsed(),
                rss,
                &counts,
                &timer,
                peak,
                slots,
            ));
            if next >= settings.duration {
                (rss_end, slots_end) = (rss, slots);
                rss_peak = resident_bytes("VmHWM");
                break;
            }
            if rss_settled.is_none() && next >= settings.settle {
                (rss_settled, slots_settled) = (rss, Some(slots));
            }
            next = (next + settings.interval).min(settings.duration);
        }
        stop.store(true, Ordering::Relaxed);
        for producer in producers {
            let (left, done) = producer.join().expect("a producer panicked");
            series.extend(left);
            totals.merge(done);
        }
    });
    let elapsed = start.elapsed();
    let cpu = process_cpu() - cpu_before;
    let load_average = std::fs::read_to_string("/proc/loadavg").ok().map(|text| {
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    });
    let handed_back = timer.shutdown();
    let handed_back_all = handed_back.len() as u64;
    // Nothing else drops payloads now: the reapers are gone, and the producers too.
    let unrun_before = counts.unrun.get();
    drop(handed_back);
    let handed_back = counts.unrun.get() - unrun_before;
    let (engine, pending_after, panicked) = (timer.stats(), timer.pending(), timer.panicked());
    for series in &series {
        totals.add(series);
    }
    // The series hold the shards; with them and the timer gone, every payload is dropped.
    drop(series);
    drop(timer);
    let (quieted, other_panics) = quiet.uninstall();
    Outcome {
        settings: settings.clone(),
        elapsed,
        cpu,
        load_average,
        scheduled: counts.scheduled.get(),
        fired: counts.fired.get(),
        cancelled: counts.cancelled.get(),
        handed_back,
        resets: counts.reset.get(),
        stale_resets: counts.stale_resets.get(),
        unrun: counts.unrun.get(),
        handed_back_all,
        engine,
        pending_after,
        panicked,
        planned: counts.planned.get(),
        quieted,
        other_panics,
        periodic_started: counts.periodic_started.get(),
        series: totals,
        rss_settled,
        rss_end,
        rss_peak,
        slots_settled,
        slots_end,
        pending_peak,
    }
}

/// A progress line: elapsed, RSS, the counts so far (and the most timers pending since the
/// last line), and the slots the shards hold (what of RSS the engine's own memory is).
fn progress(
    elapsed: Duration,
    rss: Option<u64>,
    counts: &Counts,
    timer: &Timer,
    peak: usize,
    slots: u64,
) -> String {
    format!(
        "{:>6.0} s  rss {:>7} MB  scheduled {:>11}  fired {:>11}  cancelled {:>11}  reset {:>10}  pending {:>8} (peak {:>8})  panicked {:>7}  periodic runs {:>9}  slots {:>8}",
        elapsed.as_secs_f64(),
        rss.map_or("na".into(), |b| format!("{:.1}", b as f64 / 1e6)),
        counts.scheduled.get(),
        counts.fired.get(),
        counts.cancelled.get(),
        counts.reset.get(),
        timer.pending(),
        peak,
        timer.panicked(),
        counts.periodic_runs.get(),
        slots,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_soak_accounts_for_every_timer_and_panic() {
        let _hook = quiet::HOOK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let settings = Settings {
            duration: Duration::from_secs(3),
            interval: Duration::from_secs(1),
            settle: Duration::from_secs(1),
            producers: 2,
            rate: 5_000,
            // Up to 2 s: some timers are still pending when the soak stops.
            delays: Delays::Uniform(Duration::from_millis(1), Duration::from_secs(2)),
            cancel: 0.5,
            reset: 0.25,
            panic: 0.01,
            series: 8,
            replace_every: 500,
            shards: 2,
            tick: Duration::from_millis(1),
        };
        let mut lines = Vec::new();
        let outcome = soak(&settings, &mut |line| lines.push(line.to_owned()));
        for line in outcome.accounting().iter().map(|(_, line)| line) {
            println!("{line}");
        }
        assert!(outcome.accounted());
        // Every way a timer ends happened, so each term of the sums was exercised.
        assert!(outcome.fired > 0 && outcome.cancelled > 0 && outcome.handed_back > 0);
        assert!(outcome.resets > 0 && outcome.planned > 0);
        assert!(outcome.series.series > 16 && outcome.series.runs > 0);
        // An opening line, then one a second.
        assert_eq!(lines.len(), 4, "{lines:?}");
        let summary = outcome.summary();
        assert!(
            summary[..6].iter().all(|line| line.ends_with(": ok")),
            "{summary:?}"
        );
        assert!(
            summary
                .iter()
                .any(|line| line.starts_with("RESULT soak shardwheel ")
                    && line.ends_with(" accounted=true"))
        );
    }
}
