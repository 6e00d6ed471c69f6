//! Drives the engine through a run and measures it.

use crate::config::{Config, Delays};
use indicatif::{ProgressBar, ProgressStyle};
use shardwheel::{Stats, Timer, TimerHandle};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

/// What a run measured.
pub struct Report {
    pub config: Config,
    /// Schedules and cancels the producers made.
    pub operations: u64,
    /// From the first schedule to the last producer's last cancel.
    pub producing: Duration,
    /// From the first schedule until every timer had fired or been cancelled (or the idle
    /// time ended).
    pub wall: Duration,
    pub pending_peak: usize,
    /// Peak resident memory minus resident memory before the run, per pending timer at the
    /// peak.
    pub bytes_per_timer: Option<f64>,
    /// CPU time all the process's threads used during the run (during the idle time only,
    /// for an idle run).
    pub cpu: Duration,
    /// Timers the engine still held when the run stopped, handed back by `shutdown`.
    pub handed_back: usize,
    pub stats: Stats,
}

impl Report {
    pub fn operations_per_s(&self) -> f64 {
        self.operations as f64 / self.producing.as_secs_f64().max(1e-9)
    }

    /// CPU time over the wall time it was measured over, in cores.
    pub fn cores_busy(&self) -> f64 {
        let span = self.config.idle.unwrap_or(self.wall);
        self.cpu.as_secs_f64() / span.as_secs_f64().max(1e-9)
    }
}

/// SplitMix64: every producer draws its own reproducible stream.
pub(crate) struct Random(pub(crate) u64);

impl Random {
    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A delay drawn from `delays`.
    pub(crate) fn delay(&mut self, delays: Delays) -> Duration {
        match delays {
            Delays::Fixed(delay) => delay,
            Delays::Uniform(min, max) => min + (max - min).mul_f64(self.unit()),
            Delays::Exponential(mean) => mean.mul_f64(-(1.0 - self.unit()).ln()),
        }
    }
}

/// What each timer carries: 16 bytes, as W4 has it (a request id and a connection, say).
type Payload = [u8; 16];

/// Timers each producer keeps waiting to be cancelled: a new one replaces a random one,
/// which is cancelled, so each lives a random thousand operations or so.
const RING: usize = 1024;

/// Runs `config` and measures it; draws progress bars if `progress`.
pub fn run(config: &Config, progress: bool) -> Report {
    let rss_before = resident_bytes("VmRSS");
    let timer = Timer::builder()
        .shards(config.shards)
        .tick(config.tick)
        .build_with(|_: Payload| {})
        .expect("the configuration was checked");
    let scheduled = AtomicU64::new(0);
    let operations = AtomicU64::new(0);
    let done = AtomicUsize::new(0);
    let bar = progress_bar(progress, config.timers, "scheduling");
    let cpu_before = process_cpu();
    let start = Instant::now();
    let mut pending_peak = 0;
    thread::scope(|s| {
        for producer in 0..config.producers {
            let (timer, scheduled, operations, done) = (&timer, &scheduled, &operations, &done);
            s.spawn(move || {
                let share = config.timers / config.producers as u64
                    + u64::from((producer as u64) < config.timers % config.producers as u64);
                let ops = produce(timer, config, producer, share, scheduled);
                operations.fetch_add(ops, Relaxed);
                done.fetch_add(1, Relaxed);
            });
        }
        while done.load(Relaxed) < config.producers {
            pending_peak = pending_peak.max(timer.pending());
            bar.set_position(scheduled.load(Relaxed));
            thread::sleep(Duration::from_millis(1));
        }
    });
    pending_peak = pending_peak.max(timer.pending());
    let producing = start.elapsed();
    bar.finish_and_clear();
    let cpu = match config.idle {
        Some(idle) => {
            let bar = spinner(progress, "idle, measuring CPU");
            let before = process_cpu();
            thread::sleep(idle);
            bar.finish_and_clear();
            process_cpu() - before
        }
        None => {
            let bar = progress_bar(progress, timer.pending() as u64, "firing");
            let firing = timer.pending() as u64;
            while timer.pending() > 0 {
                bar.set_position(firing.saturating_sub(timer.pending() as u64));
                thread::sleep(Duration::from_millis(10));
            }
            bar.finish_and_clear();
            process_cpu() - cpu_before
        }
    };
    let wall = start.elapsed();
    let peak = resident_bytes("VmHWM");
    let handed_back = timer.shutdown().len();
    let stats = timer.stats();
    Report {
        config: config.clone(),
        operations: operations.load(Relaxed),
        producing,
        wall,
        pending_peak,
        bytes_per_timer: match (rss_before, peak) {
            (Some(before), Some(peak)) if pending_peak > 0 => {
                Some(peak.saturating_sub(before) as f64 / pending_peak as f64)
            }
            _ => None,
        },
        cpu,
        handed_back,
        stats,
    }
}

/// One producer's share: schedules `share` timers, cancels `config.cancel` of them a
/// little later; returns its operations.
fn produce(
    timer: &Timer<Payload>,
    config: &Config,
    producer: usize,
    share: u64,
    scheduled: &AtomicU64,
) -> u64 {
    let mut random = Random(42 + producer as u64);
    let mut ring: Vec<Option<TimerHandle>> = vec![None; RING];
    let mut operations = 0;
    let start = Instant::now();
    for i in 0..share {
        if let Some(rate) = config.rate {
            pace(start, i, rate);
        }
        let mut payload = [0; 16];
        payload[..8].copy_from_slice(&i.to_le_bytes());
        payload[8..].copy_from_slice(&(producer as u64).to_le_bytes());
        let handle = timer
            .insert(random.delay(config.delays), payload)
            .expect("no bound was set, and the timer runs until the end");
        operations += 1;
        if random.unit() < config.cancel {
            let at = (random.next() % RING as u64) as usize;
            if let Some(old) = ring[at].replace(handle) {
                timer.cancel(old);
                operations += 1;
            }
        }
        if i % 1024 == 1023 {
            scheduled.fetch_add(1024, Relaxed);
        }
    }
    scheduled.fetch_add(share % 1024, Relaxed);
    for handle in ring.into_iter().flatten() {
        timer.cancel(handle);
        operations += 1;
    }
    operations
}

/// Waits until operation `i` of a producer that started at `start` and makes `rate`
/// operations a second is due (at once if it is behind).
pub(crate) fn pace(start: Instant, i: u64, rate: u64) {
    let at = start + Duration::from_secs_f64(i as f64 / rate as f64);
    if let Some(wait) = at.checked_duration_since(Instant::now()) {
        thread::sleep(wait);
    }
}

fn progress_bar(progress: bool, length: u64, message: &'static str) -> ProgressBar {
    if !progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(length).with_message(message);
    bar.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {human_pos}/{human_len} ({eta})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}

fn spinner(progress: bool, message: &'static str) -> ProgressBar {
    if !progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner().with_message(message);
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// A `Vm*` line of /proc/self/status, in bytes (Linux only).
pub(crate) fn resident_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// CPU time the process has used, all its threads included, ended ones too (zero where
/// `getrusage` is missing).
pub(crate) fn process_cpu() -> Duration {
    #[cfg(unix)]
    {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `usage` is a valid, writable `rusage`, which is all `getrusage` writes;
        // RUSAGE_SELF is a valid `who`. On success it is fully initialised (it was zeroed
        // before in any case, and all-zero is a valid `rusage`).
        let usage = unsafe {
            if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
                return Duration::ZERO;
            }
            usage.assume_init()
        };
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        time(usage.ru_utime) + time(usage.ru_stime)
    }
    #[cfg(not(unix))]
    Duration::ZERO
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Scenario;

    #[test]
    fn a_small_run_accounts_for_every_timer() {
        let config = Config {
            scenario: Scenario::Mixed,
            timers: 20_000,
            producers: 2,
            // Long enough that every cancel comes before its timer is due.
            delays: Delays::Uniform(Duration::from_millis(200), Duration::from_millis(300)),
            cancel: 0.5,
            rate: None,
            idle: None,
            tick: Duration::from_millis(1),
            shards: 2,
            duration: None,
            redis_url: None,
        };
        let report = run(&config, false);
        let stats = &report.stats;
        // Every timer was taken in by a pass or by the shutdown, and ended once.
        assert_eq!(stats.scheduled, 20_000);
        assert_eq!(stats.fired + stats.cancelled, 20_000);
        assert!(
            stats.cancelled > 5_000 && stats.cancelled < 15_000,
            "{stats}"
        );
        assert_eq!(report.handed_back, 0);
        // Every cancel is an operation; one that came too late cancelled nothing.
        assert!(report.operations >= 20_000 + stats.cancelled);
        assert!(report.pending_peak > 0);
    }

    #[test]
    fn delays_stay_in_their_range() {
        let mut random = Random(7);
        let (min, max) = (Duration::from_millis(3), Duration::from_millis(9));
        for _ in 0..10_000 {
            let delay = random.delay(Delays::Uniform(min, max));
            assert!(delay >= min && delay <= max);
        }
        let mean = Duration::from_millis(10);
        let total: Duration = (0..10_000)
            .map(|_| random.delay(Delays::Exponential(mean)))
            .sum();
        let average = total / 10_000;
        assert!(
            average > mean.mul_f64(0.9) && average < mean.mul_f64(1.1),
            "{average:?}"
        );
    }
}
