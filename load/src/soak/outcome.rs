//! What a soak did, and what it found: the checks of the timers' accounting, of the panics
//! and of memory, and the closing lines (the checks, RESULT lines, the verdict).

use super::{SeriesTotals, Settings};
use shardwheel::Stats;
use std::time::Duration;

/// What a soak did, and what it found.
#[derive(Clone)]
pub struct Outcome {
    /// What the soak ran.
    pub settings: Settings,
    /// How long the producers ran.
    pub elapsed: Duration,
    /// CPU time the process used while the producers ran.
    pub cpu: Duration,
    /// The machine's load average (1, 5, 15 minutes) when the producers stopped.
    pub load_average: Option<String>,
    /// One-shot timers, as the producers and callbacks counted them.
    pub scheduled: u64,
    /// One-shot callbacks that ran (the panicking ones too).
    pub fired: u64,
    /// Cancels that won (`Timer::cancel` returned true).
    pub cancelled: u64,
    /// One-shot timers among those `shutdown` handed back.
    pub handed_back: u64,
    /// Resets that moved their timer.
    pub resets: u64,
    /// Resets that found their timer gone (fired).
    pub stale_resets: u64,
    /// One-shot payloads dropped unrun, counted once the timer was dropped.
    pub unrun: u64,
    /// Everything `shutdown` handed back: one-shot timers and periodic runs.
    pub handed_back_all: u64,
    /// The engine's counts after the shutdown (one-shot timers and periodic runs).
    pub engine: Stats,
    /// `Timer::pending` after the shutdown.
    pub pending_after: usize,
    /// Caught panics, by `Timer::panicked`.
    pub panicked: u64,
    /// Panics the callbacks raised on purpose.
    pub planned: u64,
    /// Planned panics the hook kept quiet.
    pub quieted: u64,
    /// Other panics, which the previous hook printed.
    pub other_panics: u64,
    /// Periodic series the producers started.
    pub periodic_started: u64,
    /// What the series came to, each looked at once its closure was dropped (or at the end).
    pub series: SeriesTotals,
    /// RSS `settle` into the run (none if the run was not longer).
    pub rss_settled: Option<u64>,
    /// RSS when the producers stopped, before the shutdown.
    pub rss_end: Option<u64>,
    /// The most RSS had been until then (VmHWM).
    pub rss_peak: Option<u64>,
    /// The slots the shards held `settle` into the run (as `rss_settled`), and at its end.
    pub slots_settled: Option<u64>,
    /// The slots the shards held when the producers stopped.
    pub slots_end: u64,
    /// The most timers pending at once (looked at every few milliseconds).
    pub pending_peak: usize,
}

/// RSS may end this far above or below its value after the first minute.
const RSS_TOLERANCE_PCT: f64 = 10.0;

impl Outcome {
    /// RSS at the end over RSS after the first minute, minus one, in percent.
    pub fn rss_growth_pct(&self) -> Option<f64> {
        let (settled, end) = (self.rss_settled?, self.rss_end?);
        Some((end as f64 / settled.max(1) as f64 - 1.0) * 100.0)
    }

    /// The checks of the timers' accounting, each a verdict and a line that says it.
    pub fn accounting(&self) -> Vec<(bool, String)> {
        let ok = |pass: bool| if pass { "ok" } else { "MISMATCH" };
        let e = &self.engine;
        let one_shots = self.scheduled == self.fired + self.cancelled + self.handed_back;
        let engine = e.scheduled == e.fired + e.cancelled + self.handed_back_all
            && e.pending == 0
            && self.pending_after == 0;
        let resets = self.resets == e.reset;
        let panics =
            self.planned == self.panicked && self.quieted == self.planned && self.other_panics == 0;
        let s = &self.series;
        let periodic = s.counted == s.runs
            && s.series == self.periodic_started
            && s.ended == s.series
            && s.dropped == s.series;
        let payloads = self.unrun == self.cancelled + self.handed_back;
        vec![
            (
                one_shots,
                format!(
                    "one-shot timers: scheduled {} = fired {} + cancelled {} + handed back {}: {}",
                    self.scheduled,
                    self.fired,
                    self.cancelled,
                    self.handed_back,
                    ok(one_shots)
                ),
            ),
            (
                engine,
                format!(
                    "engine (one-shots and periodic runs): scheduled {} = fired {} + cancelled {} + handed back {}, pending {} after the shutdown: {}",
                    e.scheduled,
                    e.fired,
                    e.cancelled,
                    self.handed_back_all,
                    self.pending_after,
                    ok(engine)
                ),
            ),
            (
                resets,
                format!(
                    "resets: {} by the producers ({} found their timer gone), {} by the engine: {}",
                    self.resets,
                    self.stale_resets,
                    e.reset,
                    ok(resets)
                ),
            ),
            (
                panics,
                format!(
                    "panics: {} raised by callbacks, {} caught by the engine, {} kept quiet, {} others printed: {}",
                    self.planned,
                    self.panicked,
                    self.quieted,
                    self.other_panics,
                    ok(panics)
                ),
            ),
            (
                periodic,
                format!(
                    "periodic: {} series started, {} ended, {} closures dropped; runs {} counted in the closures, {} by Periodic::runs: {}",
                    self.periodic_started,
                    s.ended,
                    s.dropped,
                    s.counted,
                    s.runs,
                    ok(periodic)
                ),
            ),
            (
                payloads,
                format!(
                    "payloads: {} one-shot payloads dropped unrun = cancelled + handed back {}: {}",
                    self.unrun,
                    self.cancelled + self.handed_back,
                    ok(payloads)
                ),
            ),
        ]
    }

    /// Whether every timer, run and panic was accounted for.
    pub fn accounted(&self) -> bool {
        self.accounting().iter().all(|(pass, _)| *pass)
    }

    /// Whether RSS stayed within its tolerance; `None` if the run was too short to tell.
    pub fn rss_held(&self) -> Option<bool> {
        self.rss_growth_pct()
            .map(|growth| growth.abs() <= RSS_TOLERANCE_PCT)
    }

    /// Whether the soak passed: accounted for, and RSS held (or could not be told).
    pub fn passed(&self) -> bool {
        self.accounted() && self.rss_held() != Some(false)
    }

    /// The closing lines: the checks, RESULT lines, the verdict.
    pub fn summary(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.accounting().into_iter().map(|(_, l)| l).collect();
        let mb =
            |bytes: Option<u64>| bytes.map_or("na".into(), |b| format!("{:.1}", b as f64 / 1e6));
        let growth = self
            .rss_growth_pct()
            .map_or("na".into(), |g| format!("{g:+.1}"));
        lines.push(match self.rss_held() {
            Some(held) => format!(
                "rss: {} MB after {:?}, {} MB at the end (peak {} MB): {growth} %: {}",
                mb(self.rss_settled),
                self.settings.settle,
                mb(self.rss_end),
                mb(self.rss_peak),
                if held {
                    "ok (within 10 %)"
                } else {
                    "GREW (beyond 10 %)"
                }
            ),
            None => format!(
                "rss: {} MB at the end (peak {} MB); not checked (the run was not longer than {:?})",
                mb(self.rss_end),
                mb(self.rss_peak),
                self.settings.settle
            ),
        });
        lines.push(format!(
            "slots: {} after {:?}, {} at the end; at most {} timers pending at once",
            self.slots_settled
                .map_or("na".into(), |slots| slots.to_string()),
            self.settings.settle,
            self.slots_end,
            self.pending_peak
        ));
        lines.push(format!(
            "rate: {:.0} one-shot timers a second (set: {}); cpu: {:.1} s over {:.1} s ({:.2} cores busy); load average {}",
            self.scheduled as f64 / self.elapsed.as_secs_f64().max(1e-9),
            self.settings.rate * self.settings.producers as u64,
            self.cpu.as_secs_f64(),
            self.elapsed.as_secs_f64(),
            self.cpu.as_secs_f64() / self.elapsed.as_secs_f64().max(1e-9),
            self.load_average.as_deref().unwrap_or("na")
        ));
        lines.push(format!(
            "RESULT soak shardwheel duration_s={:.0} scheduled={} fired={} cancelled={} handed_back={} panicked={} rss_1min_mb={} rss_end_mb={} rss_growth_pct={} accounted={}",
            self.elapsed.as_secs_f64(), self.scheduled, self.fired, self.cancelled, self.handed_back,
            self.panicked, mb(self.rss_settled), mb(self.rss_end), growth, self.accounted()
        ));
        let slots = self
            .slots_settled
            .map_or("na".into(), |slots| slots.to_string());
        lines.push(format!(
            "RESULT soak-memory shardwheel rss_peak_mb={} slots_1min={slots} slots_end={} pending_peak={}",
            mb(self.rss_peak),
            self.slots_end,
            self.pending_peak
        ));
        lines.push(format!(
            "RESULT soak-periodic shardwheel series={} runs={} runs_counted={} ended={} dropped={}",
            self.series.series,
            self.series.runs,
            self.series.counted,
            self.series.ended,
            self.series.dropped
        ));
        lines.push(format!(
            "soak: {}",
            if self.passed() { "PASS" } else { "FAIL" }
        ));
        lines
    }
}
