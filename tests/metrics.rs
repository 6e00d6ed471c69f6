//! `Timer::record_metrics` (feature `metrics`): a recorder sees each shard's counts and
//! lateness.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use std::time::Duration;

/// One series the recorder holds: its name, its labels and its value as a number.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Sample {
    fn has(&self, label: &str, value: &str) -> bool {
        self.labels.contains(&(label.to_owned(), value.to_owned()))
    }
}

fn recorded(recorder: &DebuggingRecorder) -> Vec<Sample> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let labels = key
                .key()
                .labels()
                .map(|label| (label.key().to_owned(), label.value().to_owned()))
                .collect();
            let value = match value {
                DebugValue::Counter(count) => count as f64,
                DebugValue::Gauge(level) => level.into_inner(),
                DebugValue::Histogram(_) => f64::NAN,
            };
            Sample {
                name: key.key().name().to_owned(),
                labels,
                value,
            }
        })
        .collect()
}

/// The sum over the shards of metric `name` for timer "jobs" (and `quantile`, if given).
fn total(metrics: &[Sample], name: &str) -> f64 {
    metrics
        .iter()
        .filter(|sample| sample.name == name && sample.has("timer", "jobs"))
        .map(|sample| sample.value)
        .sum()
}

#[test]
fn a_recorder_sees_the_counts_and_the_lateness_of_each_shard() {
    let recorder = DebuggingRecorder::new();
    let timer = shardwheel::Timer::builder()
        .manual()
        .shards(2)
        .build_with(|fail: bool| assert!(!fail, "a failing handler"))
        .unwrap();
    for i in 0..10 {
        timer.insert(Duration::from_millis(5), i == 3).unwrap();
    }
    let cancelled = timer.insert(Duration::from_secs(60), false).unwrap();
    timer.insert(Duration::from_secs(60), false).unwrap();
    assert!(timer.cancel(cancelled));
    timer.advance(Duration::from_millis(10)).unwrap();

    metrics::with_local_recorder(&recorder, || timer.record_metrics("jobs"));
    let metrics = recorded(&recorder);
    assert_eq!(total(&metrics, "shardwheel_scheduled_total"), 12.0);
    assert_eq!(total(&metrics, "shardwheel_fired_total"), 10.0);
    assert_eq!(total(&metrics, "shardwheel_cancelled_total"), 1.0);
    assert_eq!(total(&metrics, "shardwheel_panicked_total"), 1.0);
    assert_eq!(total(&metrics, "shardwheel_pending"), 1.0);
    let shards = metrics
        .iter()
        .filter(|sample| sample.name == "shardwheel_fired_total")
        .filter(|sample| sample.has("shard", "0") || sample.has("shard", "1"))
        .count();
    assert_eq!(shards, 2, "one series a shard");

    // Due at 5 ms, run at 10 ms of manual time: 5 ms late, to the histogram's 1 %.
    let max_lateness: Vec<f64> = metrics
        .iter()
        .filter(|sample| {
            sample.name == "shardwheel_lateness_seconds" && sample.has("quantile", "1")
        })
        .map(|sample| sample.value)
        .collect();
    assert_eq!(max_lateness.len(), 2);
    let worst = max_lateness.iter().copied().fold(0.0, f64::max);
    assert!((0.005..0.00505).contains(&worst), "{worst} s");

    // Called again, the counters are set to the new totals, not added to.
    timer.insert(Duration::from_millis(1), false).unwrap();
    timer.advance(Duration::from_millis(10)).unwrap();
    metrics::with_local_recorder(&recorder, || timer.record_metrics("jobs"));
    assert_eq!(total(&recorded(&recorder), "shardwheel_fired_total"), 11.0);
}

/// Never completes by itself: it expires, unless its key's event finds it ready.
struct Fetch(bool);

impl shardwheel::purgatory::DelayedOperation for Fetch {
    fn delay(&self) -> Duration {
        Duration::from_millis(10)
    }

    fn try_complete(&self) -> bool {
        self.0
    }

    fn on_complete(&self) {}
}

#[test]
fn a_recorder_sees_the_purgatorys_counts_and_its_timers() {
    use shardwheel::purgatory::Purgatory;

    let recorder = DebuggingRecorder::new();
    let builder = shardwheel::Timer::builder().manual().shards(1);
    let purgatory: Purgatory<&str, Fetch> = Purgatory::new(builder).unwrap();
    purgatory
        .try_complete_else_watch(Fetch(true), ["a"])
        .unwrap();
    purgatory
        .try_complete_else_watch(Fetch(false), ["a"])
        .unwrap();
    purgatory
        .try_complete_else_watch(Fetch(false), ["b"])
        .unwrap();
    purgatory.advance(Duration::from_millis(10)).unwrap();
    purgatory
        .try_complete_else_watch(Fetch(false), ["c"])
        .unwrap();

    metrics::with_local_recorder(&recorder, || purgatory.record_metrics("jobs"));
    let metrics = recorded(&recorder);
    let value = |name: &str| {
        let samples: Vec<f64> = metrics
            .iter()
            .filter(|sample| sample.name == name && sample.has("purgatory", "jobs"))
            .map(|sample| sample.value)
            .collect();
        assert_eq!(samples.len(), 1, "{name}: one series");
        samples[0]
    };
    assert_eq!(value("shardwheel_purgatory_completed_total"), 1.0);
    assert_eq!(value("shardwheel_purgatory_expired_total"), 2.0);
    assert_eq!(value("shardwheel_purgatory_delayed"), 1.0);
    assert_eq!(value("shardwheel_purgatory_watched"), 3.0);
    assert_eq!(value("shardwheel_purgatory_purges_total"), 0.0);
    // Its timer's, as a timer's: three timers scheduled (one completed at once needs none).
    assert_eq!(total(&metrics, "shardwheel_scheduled_total"), 3.0);
    assert_eq!(total(&metrics, "shardwheel_fired_total"), 2.0);
}
