//! What the engine counts, and how late its timers fire.
//!
//! Each shard's reaper records into its own `ShardStats`, behind a lock that nothing else
//! takes except [`Timer::stats`](crate::Timer::stats), so recording costs no contention with
//! producers: lateness once per fired timer, the other counts once per pass. Producers
//! count schedules, cancels and resets themselves (a timer cancelled while staged never
//! reaches the reaper) beside the pending count they keep anyway.
//! A snapshot merges the shards. [`Timer::counts`](crate::Timer::counts) reads the counts
//! alone, without copying the histograms (two of some 30 KiB a shard), for a scrape.

use crate::shard::Shard;
use crate::timer::Timer;
use hdrhistogram::Histogram;
use std::fmt;
use std::io;
use std::iter::Sum;
use std::ops::{AddAssign, Deref, DerefMut};
use std::time::Duration;

/// Histograms hold 1 ns to an hour (longer is recorded as an hour), to 2 significant
/// digits: 1 % precision at every scale, about 30 KiB each.
const HIGHEST_NANOS: u64 = 3_600_000_000_000;
const SIGNIFICANT_DIGITS: u8 = 2;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_NANOS, SIGNIFICANT_DIGITS)
        .expect("the bounds are valid constants")
}

/// One shard's counts and histograms, kept by its reaper. The counts are reached through
/// it as if they were its own fields (`stats.fired += 1`).
#[derive(Clone)]
pub(crate) struct ShardStats {
    /// Nanoseconds from each fired timer's deadline to the start of its callback.
    lateness: Histogram<u64>,
    /// Arrivals and changes taken from the inboxes, per pass that took any.
    drained: Histogram<u64>,
    /// The reaper's counts; `scheduled`, `cancelled`, `reset`, `pending`, `panicked` and
    /// `slots` are the producers' and are filled in when read.
    pub(crate) counts: Counts,
}

impl Deref for ShardStats {
    type Target = Counts;

    fn deref(&self) -> &Counts {
        &self.counts
    }
}

impl DerefMut for ShardStats {
    fn deref_mut(&mut self) -> &mut Counts {
        &mut self.counts
    }
}

impl ShardStats {
    pub(crate) fn new() -> Self {
        ShardStats {
            lateness: histogram(),
            drained: histogram(),
            counts: Counts::default(),
        }
    }

    /// A timer fired, `lateness_nanos` after its deadline if that was measured.
    pub(crate) fn fired(&mut self, lateness_nanos: Option<u64>) {
        self.counts.fired += 1;
        if let Some(late) = lateness_nanos {
            self.lateness.saturating_record(late.max(1));
        }
    }

    /// A pass took `arrivals` new timers and `changes` cancels and resets.
    pub(crate) fn pass(&mut self, arrivals: u64, changes: u64) {
        self.counts.passes += 1;
        if arrivals + changes > 0 {
            self.drained.saturating_record(arrivals + changes);
        }
    }
}

/// A [`Timer`]'s counts, or one shard's, without the lateness histograms: from
/// [`Timer::counts`] and [`Timer::shard_counts`]. Reading them takes each shard's
/// statistics lock for as long as a copy of a few words takes, so they can be read as
/// often as a metrics scrape wants.
///
/// Schedules, cancels and resets are counted by the threads that make them, fires by the
/// reapers. Once the timer is quiet, `scheduled == fired + cancelled + pending`.
///
/// ```
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder().manual().shards(2).build_with(|_: u32| {}).unwrap();
/// timer.insert(Duration::from_millis(5), 1).unwrap();
/// timer.insert(Duration::from_secs(60), 2).unwrap();
/// timer.advance(Duration::from_millis(10)).unwrap();
/// let counts = timer.counts();
/// assert_eq!((counts.scheduled, counts.fired, counts.pending), (2, 1, 1));
/// let per_shard: u64 = (0..timer.shards()).map(|s| timer.shard_counts(s).unwrap().fired).sum();
/// assert_eq!(per_shard, 1);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Timers scheduled.
    pub scheduled: u64,
    /// Timers cancelled.
    pub cancelled: u64,
    /// Successful resets.
    pub reset: u64,
    /// Timers fired (their callback or handler ran, or started to).
    pub fired: u64,
    /// Callbacks, handler calls and payload drops that panicked (each was caught).
    pub panicked: u64,
    /// Timers scheduled and neither fired nor cancelled, as producers count them.
    pub pending: usize,
    /// Times a timer moved down a level of a wheel, on its way to fire.
    pub cascaded: u64,
    /// Reaper passes: wake-ups, plus the passes a busy reaper makes without sleeping, and
    /// those another shard's reaper made for this one's while it was held up (`rescued`).
    pub passes: u64,
    /// Times a producer gave this shard's reaper the rest of its time slice (see
    /// [`Timer`]'s "Hand-over"): a [`Timer::schedule`] or [`Timer::cancel`] that found
    /// the reaper awake but behind (thousands of timers or cancels waiting for it), or a
    /// thread's look, every 256 timers it schedules, that found the reaper pinned to its
    /// core awake or overdue. Steady growth means producers outrun the reapers: the cores
    /// are saturated.
    pub yielded: u64,
    /// Passes another shard's reaper made for this shard's, which was more than 2 ms past
    /// the time it planned to wake, or was woken for, without starting its pass (its core
    /// taken by the hypervisor or a real-time task, say): see [`Timer`]'s "Hand-over".
    /// Such a pass fires what is due on the other reaper's thread. Frequent rescues mean
    /// the reapers' cores are often taken from them.
    pub rescued: u64,
    /// Timer slots the shards hold, pending or free: their memory, which grows with the
    /// most timers pending at once and falls back after a spike (see [`Timer`]'s
    /// "Memory").
    pub slots: u64,
}

impl Counts {
    /// Each count with its field's name, in the order of the fields: for exporters that
    /// write every count the same way. `pending` and `slots` are levels (a gauge's
    /// values); the others only grow (a counter's).
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().manual().build().unwrap();
    /// let named = timer.counts().named();
    /// assert_eq!(named[0], ("scheduled", 0));
    /// assert!(named.iter().any(|&(name, _)| name == "pending"));
    /// ```
    pub fn named(&self) -> [(&'static str, u64); 11] {
        [
            ("scheduled", self.scheduled),
            ("cancelled", self.cancelled),
            ("reset", self.reset),
            ("fired", self.fired),
            ("panicked", self.panicked),
            ("pending", self.pending as u64),
            ("cascaded", self.cascaded),
            ("passes", self.passes),
            ("yielded", self.yielded),
            ("rescued", self.rescued),
            ("slots", self.slots),
        ]
    }

    /// Whether the count named `name` (by [`named`](Self::named)) is a level, which goes
    /// up and down (`pending`, `slots`), rather than a total, which only grows.
    ///
    /// ```
    /// use shardwheel::Counts;
    ///
    /// assert!(Counts::is_level("pending"));
    /// assert!(!Counts::is_level("fired"));
    /// ```
    pub fn is_level(name: &str) -> bool {
        matches!(name, "pending" | "slots")
    }
}

impl AddAssign for Counts {
    fn add_assign(&mut self, other: Counts) {
        self.scheduled += other.scheduled;
        self.cancelled += other.cancelled;
        self.reset += other.reset;
        self.fired += other.fired;
        self.panicked += other.panicked;
        self.pending += other.pending;
        self.cascaded += other.cascaded;
        self.passes += other.passes;
        self.yielded += other.yielded;
        self.rescued += other.rescued;
        self.slots += other.slots;
    }
}

impl Sum for Counts {
    fn sum<I: Iterator<Item = Counts>>(counts: I) -> Counts {
        counts.fold(Counts::default(), |mut total, shard| {
            total += shard;
            total
        })
    }
}

impl<T: Send + 'static> Timer<T> {
    /// The counts of [`stats`](Self::stats), summed over the shards, without copying its
    /// histograms (see [`Counts`]).
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().manual().build().unwrap();
    /// let handle = timer.schedule(std::time::Duration::from_secs(1), || {}).unwrap();
    /// assert!(timer.cancel(handle));
    /// assert_eq!(timer.counts().pending, 0);
    /// ```
    pub fn counts(&self) -> Counts {
        self.scheduler().shards().iter().map(Shard::counts).sum()
    }

    /// Shard `shard`'s counts (shards are numbered from 0 to
    /// [`shards`](Self::shards)` - 1`); `None` past the last.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().manual().shards(2).build().unwrap();
    /// assert_eq!(timer.shard_counts(1).map(|counts| counts.fired), Some(0));
    /// assert_eq!(timer.shard_counts(2), None);
    /// ```
    pub fn shard_counts(&self, shard: usize) -> Option<Counts> {
        self.scheduler().shards().get(shard).map(Shard::counts)
    }
}

/// A snapshot of a [`Timer`](crate::Timer)'s counts and lateness, merged over its shards;
/// from [`Timer::stats`](crate::Timer::stats).
///
/// Its counts are a [`Counts`], read as the snapshot's own fields (`stats.fired`).
///
/// ```
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder().manual().build_with(|_: u32| {}).unwrap();
/// timer.insert(Duration::from_millis(5), 1).unwrap();
/// let cancelled = timer.insert(Duration::from_secs(60), 2).unwrap();
/// assert!(timer.cancel(cancelled));
/// timer.advance(Duration::from_millis(10)).unwrap();
/// let stats = timer.stats();
/// assert_eq!((stats.scheduled, stats.fired, stats.cancelled, stats.pending), (2, 1, 1, 0));
/// // Manual time: due at 5 ms, run at 10 ms; histograms keep 2 significant digits.
/// let late = stats.lateness(1.0);
/// assert!(late >= Duration::from_millis(5) && late < Duration::from_micros(5_050));
/// println!("{stats}");
/// ```
#[derive(Clone)]
pub struct Stats {
    counts: Counts,
    lateness: Histogram<u64>,
    drained: Histogram<u64>,
}

/// The snapshot's counts are read as its own fields (`stats.fired`).
impl Deref for Stats {
    type Target = Counts;

    fn deref(&self) -> &Counts {
        &self.counts
    }
}

impl Stats {
    pub(crate) fn new() -> Self {
        Stats {
            counts: Counts::default(),
            lateness: histogram(),
            drained: histogram(),
        }
    }

    /// The snapshot's counts, as [`Timer::counts`](crate::Timer::counts) gives them.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().manual().build().unwrap();
    /// let stats = timer.stats();
    /// assert_eq!(stats.counts(), timer.counts());
    /// ```
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Adds one shard's counts.
    pub(crate) fn merge(&mut self, shard: &ShardStats) {
        self.counts += shard.counts;
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.lateness.add(&shard.lateness);
        let _ = self.drained.add(&shard.drained);
    }

    /// How late timers fired, at `quantile` (0.0 to 1.0; 0.99 is p99, 1.0 the maximum):
    /// the time from a timer's deadline to the start of its callback, to within 1 %. Zero
    /// when nothing has fired, or with [`record_lateness`](crate::Builder::record_lateness)
    /// off.
    pub fn lateness(&self, quantile: f64) -> Duration {
        Duration::from_nanos(self.lateness.value_at_quantile(quantile.clamp(0.0, 1.0)))
    }

    /// How many messages (new timers, cancels, resets) a reaper took from its inboxes in
    /// one pass, at `quantile`, counting only passes that took any.
    pub fn drained_per_pass(&self, quantile: f64) -> u64 {
        self.drained.value_at_quantile(quantile.clamp(0.0, 1.0))
    }

    /// Writes the lateness distribution in HdrHistogram's percentile-distribution text
    /// format (the `.hgrm` files of `HistogramLogProcessor`, wrk2 and the online plotters),
    /// values in milliseconds.
    ///
    /// # Errors
    ///
    /// What `out` returns.
    pub fn write_hgrm(&self, out: &mut impl io::Write) -> io::Result<()> {
        const NANOS_PER_MS: f64 = 1e6;
        // As HdrHistogram's own `outputPercentileDistribution` writes it, so that whatever
        // reads those reads this: values to as many decimals as the histogram has
        // significant digits, and its sub-bucket count defined as that code defines it.
        let digits = usize::from(SIGNIFICANT_DIGITS);
        let sub_buckets = (2 * 10u32.pow(SIGNIFICANT_DIGITS.into())).next_power_of_two();
        let histogram = &self.lateness;
        writeln!(
            out,
            "{:>12} {:>14} {:>10} {:>14}\n",
            "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
        )?;
        let mut total = 0;
        for step in histogram.iter_quantiles(5) {
            total += step.count_since_last_iteration();
            let value = step.value_iterated_to() as f64 / NANOS_PER_MS;
            let quantile = step.quantile_iterated_to();
            write!(out, "{value:12.digits$} {quantile:2.12} {total:10}")?;
            if quantile < 1.0 {
                write!(out, " {:14.2}", 1.0 / (1.0 - quantile))?;
            }
            writeln!(out)?;
        }
        let (mean, deviation, max) = (
            histogram.mean() / NANOS_PER_MS,
            histogram.stdev() / NANOS_PER_MS,
            histogram.max() as f64 / NANOS_PER_MS,
        );
        writeln!(
            out,
            "#[Mean    = {mean:12.digits$}, StdDeviation   = {deviation:12.digits$}]"
        )?;
        writeln!(
            out,
            "#[Max     = {max:12.digits$}, Total count    = {:12}]",
            histogram.len()
        )?;
        writeln!(
            out,
            "#[Buckets = {:12}, SubBuckets     = {sub_buckets:12}]",
            histogram.buckets()
        )
    }
}

impl fmt::Debug for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stats")
            .field("scheduled", &self.scheduled)
            .field("cancelled", &self.cancelled)
            .field("reset", &self.reset)
            .field("fired", &self.fired)
            .field("panicked", &self.panicked)
            .field("pending", &self.pending)
            .field("cascaded", &self.cascaded)
            .field("passes", &self.passes)
            .field("rescued", &self.rescued)
            .field("lateness_p99", &self.lateness(0.99))
            .finish()
    }
}

impl fmt::Display for Stats {
    /// Counts on one line, lateness percentiles on the next.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "scheduled {} fired {} cancelled {} reset {} pending {} panicked {} cascaded {} passes {} rescued {} slots {}",
            self.scheduled,
            self.fired,
            self.cancelled,
            self.reset,
            self.pending,
            self.panicked,
            self.cascaded,
            self.passes,
            self.rescued,
            self.slots
        )?;
        write!(f, "lateness")?;
        for (name, quantile) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)] {
            write!(f, " {name} {:?}", self.lateness(quantile))?;
        }
        write!(f, " max {:?}", self.lateness(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // What HdrHistogram's Java `outputPercentileDistribution(out, 5, 1e6)` (2.1.11, the
    // format's reference) prints for these values in a histogram with the same bounds.
    const JAVA_OUTPUT: &str = concat!(
        "       Value     Percentile TotalCount 1/(1-Percentile)\n",
        "\n",
        "        0.25 0.000000000000          1           1.00\n",
        "        0.25 0.100000000000          1           1.11\n",
        "        0.50 0.200000000000          2           1.25\n",
        "        1.00 0.300000000000          3           1.43\n",
        "        1.00 0.400000000000          3           1.67\n",
        "        1.51 0.500000000000          4           2.00\n",
        "        1.51 0.550000000000          4           2.22\n",
        "        2.01 0.600000000000          5           2.50\n",
        "        2.01 0.650000000000          5           2.86\n",
        "        2.01 0.700000000000          5           3.33\n",
        "        4.01 0.750000000000          6           4.00\n",
        "        4.01 0.775000000000          6           4.44\n",
        "        4.01 0.800000000000          6           5.00\n",
        "        4.01 0.825000000000          6           5.71\n",
        "        4.01 0.850000000000          6           6.67\n",
        "       12.39 0.875000000000          7           8.00\n",
        "       12.39 1.000000000000          7\n",
        "#[Mean    =         3.09, StdDeviation   =         3.95]\n",
        "#[Max     =        12.39, Total count    =            7]\n",
        "#[Buckets =           35, SubBuckets     =          256]\n",
    );

    #[test]
    fn hgrm_output_is_what_hdrhistograms_reference_implementation_writes() {
        let mut shard = ShardStats::new();
        for nanos in [
            250_000, 500_000, 1_000_000, 1_500_000, 2_000_000, 4_000_000, 12_345_678,
        ] {
            shard.fired(Some(nanos));
        }
        let mut stats = Stats::new();
        stats.merge(&shard);
        let mut out = Vec::new();
        stats.write_hgrm(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), JAVA_OUTPUT);
    }
}
