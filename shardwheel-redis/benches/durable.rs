//! The durable workloads D1-D3 of `benches/README.md` (at the top of the repository), for
//! shardwheel-redis and, in the same run and against the same kind of server, the naive
//! poller (ZRANGEBYSCORE due <= now LIMIT 1000, then ZREM, every 100 ms) and the script
//! poller (the same in one atomic Lua script).
//!
//! Each workload gets a fresh `redis-server` (unix socket, AOF, `appendfsync always`) from
//! the tests' fixture. Producers and workers are tasks in this process on a 2-thread tokio
//! runtime; Redis runs on the same machine, so the local wall clock is the server's clock
//! and a delivery's lateness is `SystemTime::now()` at the handler's start minus the job's
//! due time (an early start would be negative and is counted in `early`).
//!
//! shardwheel-redis runs three times: as a worker is by default, its jobs' starts checked on
//! the server at their due time; as `shardwheel-redis-ahead-250ms`, with a check ahead
//! (`WorkerBuilder::check_ahead`) of 250 ms, which takes the check's round trip off a job's
//! lateness while the server answers within it, at the price of cancels in the last 250 ms;
//! and as `shardwheel-redis-one-hash-ahead-250ms`, with that check ahead and one payload hash
//! a shard (`QueueBuilder::buckets(1)`), whose schedules store a call's jobs at once, at the
//! price of memory (D3).
//!
//! `DURABLE_ONLY=D2` (or `D1`, `D3`, and, comma-separated, implementations by name)
//! picks workloads and implementations; `DURABLE_WINDOW_MS` sets the workers' claim window
//! (default: the crate's, 10 s), `DURABLE_BUCKETS` the payload hashes a shard of the runs
//! that do not set theirs (default: the crate's, `DEFAULT_BUCKETS`). `DURABLE_SCALE=0.1`
//! runs a tenth of the jobs (and D1 over a tenth of its 60 s span, at least 6 s) for a
//! quick check; the figures to report come from the default, 1. `DURABLE_COMMANDSTATS=1` prints the server's command statistics
//! after each workload (and D1's for its scheduling phase alone); `DURABLE_SCRIPTSTATS=1`
//! splits D1's scheduling phase by script (the server's log of every command, which costs
//! it some time: see `server::script_log_start`). Notes give each side's
//! CPU time while scheduling, to show where the time went. D1 then schedules its jobs
//! twice more, each time on a fresh server with no consumers: through a bare script (the
//! floor) and through the queue (`alone`), which splits shardwheel-redis's gap to the floor
//! into the schedule path's own cost and the deliveries' share of the server.
//!
//! While each implementation's D1 and D2 run (from its consumers' start until its jobs are
//! all delivered), a probe (`durable_parts/probe.rs`) on a connection and a thread of its
//! own sends a trivial command (`TIME` and `PING` in turn) with a 1 ms pause after each
//! reply, and the RESULT line ends with its round trips: `server_rtt_p50_ms`,
//! `server_rtt_p99_ms`, `server_rtt_max_ms` (weighed by time, as the jobs' due times are:
//! see the probe's module doc). That is how long the server, busy with the workload, takes
//! to get to one more client's command: a design that must hear from the
//! server after a job's due time (a start check then) cannot deliver that job sooner, so
//! these figures are the floor under its lateness. Notes split them by command and, for
//! D1, into the scheduling phase and the rest (beside the lateness of the jobs due then),
//! for D2 from the burst second on.

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "durable_parts/baselines.rs"]
mod baselines;
#[path = "durable_parts/consumers.rs"]
mod consumers;
#[path = "durable_parts/probe.rs"]
mod probe;
#[path = "durable_parts/server.rs"]
mod server;

use baselines::{alone, floor, poller, produce_naive};
use consumers::{Consumers, Run, implementations, shardwheel};
use probe::Samples;
use server::{
    cpu_seconds, field, info, raw_conn, reset_stats, script_log_start, script_split, server_note,
};
use std::future::Future;

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use hdrhistogram::Histogram;
use shardwheel_redis::When;

const PAYLOAD: &[u8; 16] = b"0123456789abcdef";
const PRODUCERS: usize = 4;
const WORKERS: usize = 2;
const PRODUCER_BATCH: usize = 5_000;
/// Batches each producer keeps in flight (pipelined on its connection), for both
/// implementations: the server has the next batch while the reply to one travels back.
const IN_FLIGHT: usize = 2;

struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [low, high) milliseconds.
    fn ms(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low)
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// What deliveries looked like: per-job run counts and lateness.
struct Tally {
    runs: Vec<AtomicU8>,
    late: Mutex<Histogram<u64>>,
    /// Lateness of the jobs due after `quiet_from` (Unix µs): once scheduling has ended.
    late_quiet: Mutex<Histogram<u64>>,
    quiet_from: AtomicU64,
    early: AtomicU64,
    delivered: AtomicU64,
    /// Jobs delivered at least once.
    distinct: AtomicU64,
    first: AtomicU64,
    last: AtomicU64,
    /// The earliest and latest due time (Unix µs) of the deliveries.
    due_first: AtomicU64,
    due_last: AtomicU64,
}

impl Tally {
    fn new(n: usize) -> Arc<Tally> {
        Arc::new(Tally {
            runs: (0..n).map(|_| AtomicU8::new(0)).collect(),
            late: Mutex::new(histogram()),
            late_quiet: Mutex::new(histogram()),
            quiet_from: AtomicU64::new(u64::MAX),
            early: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            distinct: AtomicU64::new(0),
            first: AtomicU64::new(u64::MAX),
            last: AtomicU64::new(0),
            due_first: AtomicU64::new(u64::MAX),
            due_last: AtomicU64::new(0),
        })
    }

    /// A delivery of job `index`, due at `due_us` (Unix µs), seen at `now_us`.
    fn record(&self, index: usize, due_us: u64, now_us: u64) {
        let before = self.runs[index].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            Some(n.saturating_add(1))
        });
        if before == Ok(0) {
            self.distinct.fetch_add(1, Ordering::Relaxed);
        }
        if now_us < due_us {
            self.early.fetch_add(1, Ordering::Relaxed);
        }
        let late = now_us.saturating_sub(due_us).max(1);
        self.late.lock().unwrap().saturating_record(late);
        if due_us >= self.quiet_from.load(Ordering::Relaxed) {
            self.late_quiet.lock().unwrap().saturating_record(late);
        }
        self.delivered.fetch_add(1, Ordering::Relaxed);
        self.first.fetch_min(now_us, Ordering::Relaxed);
        self.last.fetch_max(now_us, Ordering::Relaxed);
        self.due_first.fetch_min(due_us, Ordering::Relaxed);
        self.due_last.fetch_max(due_us, Ordering::Relaxed);
    }

    /// The rate at which the delivered jobs came due: their count over the span of their due
    /// times. No consumer can deliver on time faster than this.
    fn due_per_s(&self) -> f64 {
        let span = self
            .due_last
            .load(Ordering::Relaxed)
            .saturating_sub(self.due_first.load(Ordering::Relaxed)) as f64
            / 1e6;
        self.distinct.load(Ordering::Relaxed) as f64 / span.max(1e-9)
    }

    fn lost_twice(&self) -> (usize, usize) {
        let lost = self
            .runs
            .iter()
            .filter(|n| n.load(Ordering::Relaxed) == 0)
            .count();
        let twice = self
            .runs
            .iter()
            .filter(|n| n.load(Ordering::Relaxed) > 1)
            .count();
        (lost, twice)
    }
}

/// A histogram of µs up to an hour, 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap()
}

fn unix_us(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64
}

/// Runs `batch` over job indices `0..jobs` from PRODUCERS concurrent tasks, each taking
/// every PRODUCERS-th index, PRODUCER_BATCH at a time with IN_FLIGHT batches under way, on
/// a client of its own (from `connect`); returns the seconds it took. Every producer of the
/// bench (shardwheel-redis's, the naive poller's, the floor's) schedules through it.
async fn fan_out<C, B, Done>(
    jobs: usize,
    connect: impl AsyncFn() -> C,
    batch: impl Fn(Arc<C>, Vec<usize>) -> B + Clone + Send + Sync + 'static,
) -> f64
where
    C: Send + Sync + 'static,
    B: Future<Output = Done> + Send,
{
    let start = Instant::now();
    let mut tasks = Vec::new();
    for producer in 0..PRODUCERS {
        let client = Arc::new(connect().await);
        let batch = batch.clone();
        tasks.push(tokio::spawn(async move {
            let indices: Vec<usize> = (producer..jobs).step_by(PRODUCERS).collect();
            futures_util::stream::iter(indices.chunks(PRODUCER_BATCH))
                .for_each_concurrent(IN_FLIGHT, |chunk| {
                    let done = batch(Arc::clone(&client), chunk.to_vec());
                    async move {
                        done.await;
                    }
                })
                .await;
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed().as_secs_f64()
}

/// Schedules `delays` (ms) as jobs "0".."n" from PRODUCERS concurrent queue clients, in
/// batches; `at` turns a delay into an absolute due time instead (D2); `buckets`: the
/// queue's payload hashes a shard, if it is new and not the default. Returns the seconds.
async fn produce_shardwheel(
    server: &support::Server,
    name: &str,
    delays: &Arc<Vec<u64>>,
    at: Option<u64>,
    buckets: Option<u32>,
) -> f64 {
    let delays = Arc::clone(delays);
    let connect = async || consumers::connect(server, name, buckets).await;
    fan_out(delays.len(), connect, move |queue, chunk| {
        let delays = Arc::clone(&delays);
        async move {
            let ids: Vec<String> = chunk.iter().map(|i| i.to_string()).collect();
            let jobs = ids.iter().zip(&chunk).map(|(id, &i)| {
                let when = match at {
                    Some(base) => When::At(UNIX_EPOCH + Duration::from_millis(base + delays[i])),
                    None => When::After(Duration::from_millis(delays[i])),
                };
                (id.as_str(), when, &PAYLOAD[..])
            });
            let stored = queue.schedule_many(jobs).await.unwrap();
            assert!(stored.iter().all(|&new| new));
        }
    })
    .await
}

/// Waits (at most `patience`) for all `n` jobs of a run, ends its probe, stops its
/// consumers, and prints its RESULT line: the workload's own figures (`figures`, taken once
/// the jobs are in), then the deliveries', then the server's round trips over the run.
/// Returns the probe's samples.
async fn finish(
    workload: &str,
    name: &str,
    tally: &Tally,
    n: usize,
    patience: Duration,
    run: Run,
    figures: impl FnOnce(&Tally) -> String,
) -> Samples {
    wait_delivered(tally, n as u64, patience).await;
    let samples = run.probe.stop().await;
    run.consumers.stop(workload).await;
    println!(
        "RESULT {workload} {name} {} {} {}",
        figures(tally),
        deliveries(tally),
        samples.figures(0..u64::MAX)
    );
    samples
}

async fn wait_delivered(tally: &Tally, n: u64, patience: Duration) {
    let start = Instant::now();
    while tally.distinct.load(Ordering::Relaxed) < n && start.elapsed() < patience {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn uniform(n: usize, low: u64, high: u64) -> Arc<Vec<u64>> {
    let mut rng = SplitMix64(42);
    Arc::new((0..n).map(|_| rng.ms(low, high)).collect())
}

/// `late_p50_ms=.. late_p99_ms=.. late_max_ms=..` of a lateness histogram (µs).
fn lateness(late: &Histogram<u64>) -> String {
    quantiles("late", late)
}

/// `{name}_p50_ms=.. {name}_p99_ms=.. {name}_max_ms=..` of a histogram of µs.
fn quantiles(name: &str, us: &Histogram<u64>) -> String {
    format!(
        "{name}_p50_ms={:.2} {name}_p99_ms={:.2} {name}_max_ms={:.2}",
        us.value_at_quantile(0.5) as f64 / 1000.0,
        us.value_at_quantile(0.99) as f64 / 1000.0,
        us.max() as f64 / 1000.0,
    )
}

/// The figures every workload's RESULT line ends with: delivery rate over the delivery
/// phase, lateness, early, lost and twice.
fn deliveries(tally: &Tally) -> String {
    let (lost, twice) = tally.lost_twice();
    let span = (tally
        .last
        .load(Ordering::Relaxed)
        .saturating_sub(tally.first.load(Ordering::Relaxed))) as f64
        / 1e6;
    format!(
        "deliver_per_s={:.0} {} early={} lost={lost} twice={twice}",
        tally.delivered.load(Ordering::Relaxed) as f64 / span.max(1e-9),
        lateness(&tally.late.lock().unwrap()),
        tally.early.load(Ordering::Relaxed),
    )
}

/// Schedules with implementation `name` (see `produce_shardwheel`); returns the seconds.
async fn produce(
    name: &str,
    server: &support::Server,
    queue: &str,
    delays: &Arc<Vec<u64>>,
    at: Option<u64>,
) -> f64 {
    if let Some(setup) = shardwheel(name) {
        produce_shardwheel(server, queue, delays, at, setup.buckets).await
    } else {
        produce_naive(server, queue, delays, at).await
    }
}

async fn d1(scale: f64) {
    let n = (1_000_000.0 * scale) as usize;
    let span = ((60_000.0 * scale) as u64).max(6_000);
    let delays = uniform(n, 1_000, span);
    for name in implementations() {
        let server = support::Server::start();
        let tally = Tally::new(n);
        let run = Run::start(name, &server, "d1", &tally).await;
        let stats = std::env::var_os("DURABLE_COMMANDSTATS").is_some();
        if stats {
            reset_stats(&server.url()).await;
        }
        let logged = script_log_start(&server.url()).await;
        let cpu_before = cpu_seconds(&server.url()).await;
        let schedule_s = produce(name, &server, "d1", &delays, None).await;
        let cpu_after = cpu_seconds(&server.url()).await;
        let delivered = tally.delivered.load(Ordering::Relaxed);
        if stats {
            let mut conn = raw_conn(&server.url()).await;
            println!(
                "note D1 {name}: the server's command statistics while scheduling:\n{}",
                info(&mut conn, "commandstats").await
            );
        }
        if logged {
            println!(
                "note D1 {name}: the server's time by script while scheduling ({delivered} jobs delivered meanwhile):\n{}",
                script_split(&server.url(), delivered, n as u64).await
            );
        }
        println!(
            "note D1 {name}: while scheduling ({schedule_s:.1} s, load {}), this process used {:.1} CPU s and redis-server {:.1}",
            loadavg(),
            cpu_after.0 - cpu_before.0,
            cpu_after.1 - cpu_before.1
        );
        let quiet_from = unix_us(SystemTime::now());
        tally.quiet_from.store(quiet_from, Ordering::Relaxed);
        let patience = Duration::from_millis(span + 60_000);
        let samples = finish("D1", name, &tally, n, patience, run, |_| {
            format!("schedule_per_s={:.0}", n as f64 / schedule_s)
        })
        .await;
        println!(
            "note D1 {name}: the server probe while scheduling: {}",
            samples.detail(0..quiet_from)
        );
        println!(
            "note D1 {name}: its jobs came due at {:.0} per second (their count over the span of their due times), which bounds deliver_per_s",
            tally.due_per_s()
        );
        let quiet = tally.late_quiet.lock().unwrap().clone();
        println!(
            "note D1 {name}: the {} jobs due after scheduling ended: {}; the server probe then: {}",
            quiet.len(),
            lateness(&quiet),
            samples.detail(quiet_from..u64::MAX)
        );
        server_note(&server.url(), &format!("D1 {name}")).await;
    }
    if implementations().contains(&"shardwheel-redis") {
        let (rate, cpu_us) = floor(&delays).await;
        println!(
            "note D1 floor: the same jobs through a script doing only HSET and ZADD per job, no workers (load {}): {rate:.0} per second, redis-server {cpu_us:.2} us CPU per job",
            loadavg()
        );
        let schedule = async |server: &support::Server| {
            produce_shardwheel(server, "d1", &delays, None, None).await
        };
        let (rate, cpu_us) = alone(n, schedule).await;
        println!(
            "note D1 shardwheel-redis alone: the same schedule with no workers (load {}): {rate:.0} per second, redis-server {cpu_us:.2} us CPU per job; against the floor, this is the schedule path's cost, and the rest of the gap of schedule_per_s is the deliveries' share of the server",
            loadavg()
        );
    }
}

async fn d2(scale: f64) {
    let n = (500_000.0 * scale) as usize;
    let offsets = uniform(n, 0, 1_000);
    for name in implementations() {
        let server = support::Server::start();
        let tally = Tally::new(n);
        // The burst second starts 20 s from now (on this machine's clock, the server's too):
        // scheduling ends before it.
        let second = now_ms() + 20_000;
        let run = Run::start(name, &server, "d2", &tally).await;
        let schedule_s = produce(name, &server, "d2", &offsets, Some(second)).await;
        eprintln!("D2 {name}: scheduled {n} in {schedule_s:.1} s");
        assert!(now_ms() < second, "scheduling ran past the burst second");
        if let Consumers::Workers(workers) = &run.consumers {
            tokio::time::sleep(Duration::from_millis(second.saturating_sub(now_ms()))).await;
            let claimed: u64 = workers.iter().map(|w| w.stats().claimed).sum();
            println!("note D2 {name}: {claimed} of {n} jobs claimed when the burst second began");
        }
        let patience = Duration::from_secs(20 + 120);
        let samples = finish("D2", name, &tally, n, patience, run, |tally| {
            let last = tally.last.load(Ordering::Relaxed);
            let all_delivered_s = last.saturating_sub(second * 1000) as f64 / 1e6;
            format!("burst_all_delivered_s={all_delivered_s:.3}")
        })
        .await;
        println!(
            "note D2 {name}: the server probe from the burst second on: {}",
            samples.detail(second * 1000..u64::MAX)
        );
        server_note(&server.url(), &format!("D2 {name}")).await;
    }
}

async fn d3(scale: f64) {
    let n = (1_000_000.0 * scale) as usize;
    let delays = uniform(n, 3_600_000, 7_200_000);
    for name in implementations() {
        let server = support::Server::start();
        let mut conn = raw_conn(&server.url()).await;
        // The queue's meta key and connections exist before the first reading.
        let buckets = shardwheel(name).and_then(|setup| setup.buckets);
        let _ = consumers::connect(&server, "d3", buckets).await;
        let before = field(&info(&mut conn, "memory").await, "used_memory");
        let cpu_before = cpu_seconds(&server.url()).await;
        let schedule_s = produce(name, &server, "d3", &delays, None).await;
        let cpu_after = cpu_seconds(&server.url()).await;
        println!(
            "note D3 {name}: scheduled at {:.0} per second with nothing else running (load {}); CPU per job: this process {:.2} us, redis-server {:.2} us",
            n as f64 / schedule_s,
            loadavg(),
            (cpu_after.0 - cpu_before.0) * 1e6 / n as f64,
            (cpu_after.1 - cpu_before.1) * 1e6 / n as f64,
        );
        let after = field(&info(&mut conn, "memory").await, "used_memory");
        println!(
            "RESULT D3 {name} redis_bytes_per_job={:.1}",
            (after - before) / n as f64 - PAYLOAD.len() as f64
        );
    }
}

fn main() {
    let scale: f64 = std::env::var("DURABLE_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let only = std::env::var("DURABLE_ONLY").unwrap_or_default();
    println!(
        "loadavg start: {} (cores: {})",
        loadavg(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if only.is_empty() || only.contains("D3") {
            d3(scale).await;
        }
        if only.is_empty() || only.contains("D1") {
            d1(scale).await;
        }
        if only.is_empty() || only.contains("D2") {
            d2(scale).await;
        }
    });
    println!("loadavg end: {}", loadavg());
}
