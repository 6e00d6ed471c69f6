//! What the engine tells the observability crates, each behind its own feature.
//!
//! - `metrics`: [`Timer::record_metrics`] sets the `metrics` facade's counters and gauges
//!   to the engine's counts and lateness, shard by shard, when called. The engine's
//!   counters are totals kept by the reapers anyway, so the facade's counters are set to
//!   them (`Counter::absolute`) rather than bumped at each event: the reapers' passes pay
//!   nothing for it, and calls may come at any rate (a scrape, a period).
//! - `tracing`: a reaper that catches a callback's panic logs it as an event at error
//!   level, with the panic's message (the payload, when it is a string); a reaper's start
//!   and stop (with the timers it handed back) at info level; memory a shard gives back
//!   after a spike at debug level. Without the feature these are empty functions.

#[cfg(feature = "metrics")]
use crate::stats::{Counts, Stats};
#[cfg(feature = "metrics")]
use crate::timer::Timer;

/// The lateness quantiles recorded, as their label and value.
#[cfg(feature = "metrics")]
const QUANTILES: [(&str, f64); 5] = [
    ("0.5", 0.5),
    ("0.9", 0.9),
    ("0.99", 0.99),
    ("0.999", 0.999),
    ("1", 1.0),
];

#[cfg(feature = "metrics")]
impl<T: Send + 'static> Timer<T> {
    /// Sets the `metrics` facade's metrics to this timer's counts and lateness, for each
    /// shard, labelled `timer` (with `name`) and `shard` (its index): counters
    /// `shardwheel_scheduled_total`, `_fired_total`, `_cancelled_total`, `_reset_total`,
    /// `_panicked_total`, `_cascaded_total`, `_passes_total`, `_yielded_total` and
    /// `_rescued_total` (each
    /// set to the total, see [`Counts`]), gauges `shardwheel_pending` and `shardwheel_slots`, and the gauge
    /// `shardwheel_lateness_seconds` with a `quantile` label (0.5, 0.9, 0.99, 0.999 and
    /// 1, the maximum; see [`Stats::lateness`]).
    ///
    /// Call it periodically (each second, say) or before each scrape; it reads each
    /// shard's [`stats`](Self::stats), histograms included, so it costs some
    /// microseconds a shard. The recorder is whatever the `metrics` crate has installed.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().manual().build_with(|_: u32| {}).unwrap();
    /// timer.insert(Duration::from_millis(5), 1).unwrap();
    /// timer.advance(Duration::from_millis(10)).unwrap();
    /// timer.record_metrics("jobs"); // no recorder installed here: nothing is recorded
    /// ```
    pub fn record_metrics(&self, name: &str) {
        for (index, shard) in self.scheduler().shards().iter().enumerate() {
            let mut stats = Stats::new();
            stats.merge(&shard.stats());
            let labels = [("timer", name.to_owned()), ("shard", index.to_string())];
            record_named(
                "shardwheel",
                stats.counts().named(),
                Counts::is_level,
                &labels,
            );
            for (quantile, value) in QUANTILES {
                let labels = [
                    labels[0].clone(),
                    labels[1].clone(),
                    ("quantile", quantile.into()),
                ];
                metrics::gauge!("shardwheel_lateness_seconds", &labels)
                    .set(stats.lateness(value).as_secs_f64());
            }
        }
    }
}

/// Sets a gauge `{prefix}_{name}` for each count of `named` that `is_level` says is a
/// level, and a counter `{prefix}_{name}_total` to each other one, with `labels`.
#[cfg(feature = "metrics")]
pub(crate) fn record_named<const N: usize>(
    prefix: &str,
    named: [(&'static str, u64); N],
    is_level: fn(&str) -> bool,
    labels: &[(&'static str, String)],
) {
    for (count, value) in named {
        if is_level(count) {
            metrics::gauge!(format!("{prefix}_{count}"), labels).set(value as f64);
        } else {
            metrics::counter!(format!("{prefix}_{count}_total"), labels).absolute(value);
        }
    }
}

pub(crate) use events::*;

#[cfg(feature = "tracing")]
mod events {
    use std::any::Any;

    /// A reaper caught `panic` from a timer's callback (or handler, or a payload's drop).
    pub(crate) fn callback_panicked(panic: &(dyn Any + Send)) {
        let message = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(a panic payload that is not a string)");
        tracing::error!(
            panic = message,
            "a timer's callback panicked; its shard goes on"
        );
    }

    /// Shard `shard`'s reaper started.
    pub(crate) fn reaper_started(shard: usize) {
        tracing::info!(shard, "shardwheel reaper started");
    }

    /// Shard `shard`'s reaper stopped, handing back `unfired` timers.
    pub(crate) fn reaper_stopped(shard: usize, unfired: usize) {
        tracing::info!(shard, unfired, "shardwheel reaper stopped");
    }

    /// A shard gave memory back: it holds `slots` timer slots, `before` before.
    pub(crate) fn gave_back(before: u32, slots: u32) {
        if slots < before {
            tracing::debug!(before, slots, "shardwheel shard gave timer slots back");
        }
    }

    /// The kernel refused a `membarrier` it had accepted the registration for (a seccomp
    /// filter installed since): the stages' fences are full fences on both sides now.
    #[cfg_attr(any(not(target_os = "linux"), loom, miri), allow(dead_code))]
    pub(crate) fn fences_fell_back() {
        tracing::warn!(
            "membarrier was refused after its registration (a seccomp filter?): shardwheel \
             falls back to full fences on every schedule and cancel"
        );
    }
}

/// Without `tracing`, nothing to tell.
#[cfg(not(feature = "tracing"))]
mod events {
    pub(crate) fn callback_panicked(_: &(dyn std::any::Any + Send)) {}
    pub(crate) fn reaper_started(_: usize) {}
    pub(crate) fn reaper_stopped(_: usize, _: usize) {}
    pub(crate) fn gave_back(_: u32, _: u32) {}
    #[cfg_attr(any(not(target_os = "linux"), loom, miri), allow(dead_code))]
    pub(crate) fn fences_fell_back() {}
}
