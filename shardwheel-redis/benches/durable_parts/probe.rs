//! The server probe: how long the server takes to answer a trivial command while an
//! implementation's workload runs, the floor under the lateness of any design that must
//! hear from the server after a job's due time (a start check at that time waits in the
//! same queue, then does more work than the probe's command).
//!
//! From the start of an implementation's phase to its end, a thread of its own sends `TIME`
//! and `PING` in turn on a connection of its own (blocking, not this process's tokio
//! runtime, so the figure is the server's queue and the OS's scheduling of one thread, not
//! our runtime's), one at a time with a 1 ms pause after each reply: at most about a
//! thousand trivial commands a second, nothing beside the workload's. Each sample keeps
//! when it was sent (Unix µs) and its round trip;
//! a `TIME` sample also keeps how long after its sending the server ran it (the same
//! machine, one clock), the part of the round trip spent before the server got to it.
//!
//! The RESULT figures weigh time, not commands, as the jobs' due times do: while the probe
//! waits 300 ms for a reply it sends nothing, so a stall would count once among hundreds of
//! quick replies. Each round trip is recorded as a command sent every millisecond would
//! have seen it (hdrhistogram's `record_correct` with a 1 ms interval: a reply after 300 ms
//! also stands for the commands that would have been sent 1, 2, ... ms later and waited
//! 299, 298, ... ms), which is what a start check sent at a due time falling in that stall
//! would have waited at least. The notes' per-command figures are the raw round trips.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;

use super::{histogram, quantiles, unix_us};

/// The pause after each reply.
const PAUSE: Duration = Duration::from_millis(1);

/// One command's round trip.
struct Sample {
    /// When it was sent (Unix µs).
    sent_us: u64,
    rtt_us: u64,
    /// For `TIME`: from its sending to the server's clock in the reply (µs); `None` for `PING`.
    ran_after_us: Option<u64>,
}

/// A running probe; [`Probe::stop`] ends it.
pub(super) struct Probe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Sample>>,
}

impl Probe {
    /// Starts probing the server at `url`.
    pub(super) fn start(url: &str) -> Probe {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            // Relaxed: the flag only ends the loop; the samples go back through `join`.
            while !stopped.load(Ordering::Relaxed) {
                let time = samples.len() % 2 == 0;
                let sent_us = unix_us(SystemTime::now());
                let sent = Instant::now();
                let ran_after_us = if time {
                    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
                    Some((s * 1_000_000 + us).saturating_sub(sent_us))
                } else {
                    redis::cmd("PING").query::<String>(&mut conn).unwrap();
                    None
                };
                let rtt_us = sent.elapsed().as_micros() as u64;
                samples.push(Sample {
                    sent_us,
                    rtt_us,
                    ran_after_us,
                });
                std::thread::sleep(PAUSE);
            }
            samples
        });
        Probe { stop, thread }
    }

    /// Ends the probe (after its command under way) and returns its samples.
    pub(super) async fn stop(self) -> Samples {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread;
        let samples = tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap();
        Samples(samples)
    }
}

/// A finished probe's round trips.
pub(super) struct Samples(Vec<Sample>);

impl Samples {
    /// The histogram (µs) of `value` over the samples sent `during` (Unix µs) that have one;
    /// `by_time`: weighed by time (see the module doc), else one count a sample.
    fn histogram(
        &self,
        during: &Range<u64>,
        by_time: bool,
        value: impl Fn(&Sample) -> Option<u64>,
    ) -> Histogram<u64> {
        let mut histogram = histogram();
        for sample in self.0.iter().filter(|s| during.contains(&s.sent_us)) {
            if let Some(us) = value(sample) {
                let us = us.clamp(1, histogram.high());
                if by_time {
                    let interval = PAUSE.as_micros() as u64;
                    histogram.record_correct(us, interval).unwrap();
                } else {
                    histogram.saturating_record(us);
                }
            }
        }
        histogram
    }

    /// `server_rtt_p50_ms=.. server_rtt_p99_ms=.. server_rtt_max_ms=..` of the round trips
    /// sent `during` (Unix µs), both commands, weighed by time.
    pub(super) fn figures(&self, during: Range<u64>) -> String {
        let rtt = self.histogram(&during, true, |s| Some(s.rtt_us));
        quantiles("server_rtt", &rtt)
    }

    /// The same weighed by time, then the raw round trips per command, with how long after
    /// its sending the server ran each `TIME`.
    pub(super) fn detail(&self, during: Range<u64>) -> String {
        let time = self.histogram(&during, false, |s| {
            s.ran_after_us.is_some().then_some(s.rtt_us)
        });
        let ping = self.histogram(&during, false, |s| {
            s.ran_after_us.is_none().then_some(s.rtt_us)
        });
        let ran = self.histogram(&during, false, |s| s.ran_after_us);
        format!(
            "{}; {} round trips, 1 ms apart: TIME {}; PING {}; the server ran TIME {} after its sending",
            self.figures(during.clone()),
            time.len() + ping.len(),
            quantiles("rtt", &time),
            quantiles("rtt", &ping),
            quantiles("ran", &ran)
        )
    }
}
