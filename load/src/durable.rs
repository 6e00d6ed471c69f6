//! The durable scenario: jobs through shardwheel-redis on a real Redis server.
//!
//! Producers schedule the jobs in batches (`Queue::schedule_many`) and cancel a share of
//! them right after; workers in this process run the rest at their due time. Each run is
//! counted per job, so the end can check what the queue promises: every job whose cancel
//! did not find it still pending ran, none ran twice (no worker dies here, so no lease
//! expires), none started before its due time by the server's clock. The server is the one
//! `--redis-url` names, or a `redis-server` started for the run in a temporary directory
//! with `appendfsync always` (every acknowledged schedule on disk), as the crate's tests
//! run it; without `--redis-url` and without `redis-server` on the PATH the run stops with
//! a message saying so.

use crate::config::Config;
use crate::run::Random;
use shardwheel_redis::{Cancelled, Job, Queue, When, Worker};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Worker tasks claiming and running the jobs.
const WORKERS: usize = 2;
/// Jobs per `schedule_many` call.
const BATCH: usize = 1_000;
/// Every write on disk before its reply, as the crate's tests and benches run Redis (and
/// `--save ""`: no snapshots).
const DURABILITY: &str = "--appendonly yes --appendfsync always --save";
/// Payload of each job.
const PAYLOAD: &[u8; 16] = b"0123456789abcdef";

/// A `redis-server` of this run: a unix socket in a temporary directory, AOF with
/// `appendfsync always`; killed and its directory removed on drop.
pub struct LocalRedis {
    child: Child,
    dir: PathBuf,
}

impl LocalRedis {
    /// Starts `binary` (`redis-server`, or another for tests).
    ///
    /// # Errors
    ///
    /// A message if it cannot be started (not installed) or its directory made.
    pub fn start(binary: &str) -> Result<LocalRedis, String> {
        let dir =
            std::env::temp_dir().join(format!("shardwheel-load-redis-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let spawned = Command::new(binary)
            .args(["--port", "0", "--unixsocket"])
            .arg(dir.join("redis.sock"))
            .arg("--dir")
            .arg(&dir)
            .args(DURABILITY.split(' '))
            .arg("")
            .stdout(Stdio::null())
            .spawn();
        match spawned {
            Ok(child) => Ok(LocalRedis { child, dir }),
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(format!(
                    "--scenario durable needs a Redis server: give --redis-url redis://HOST:PORT, \
                     or install redis-server (apt-get install redis-server) so that the run can \
                     start one ({binary}: {error})"
                ))
            }
        }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.dir.join("redis.sock").display())
    }
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the run saw, per job and in total.
struct Tally {
    runs: Vec<AtomicU8>,
    /// Per job, what its cancel found: 0 none (it must run), 1 pending or claimed before
    /// its due time (it must not run), 2 claimed at or after its due time (`Started`: it
    /// may have started, so it runs once or not at all).
    cancelled: Vec<AtomicU8>,
    first_run_us: AtomicU64,
    last_run_us: AtomicU64,
}

fn since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Runs the durable scenario of `config`; returns its lines and whether its checks passed.
///
/// # Errors
///
/// A message if no Redis can be had or reached.
pub fn durable(config: &Config) -> Result<(Vec<String>, bool), String> {
    let local = match &config.redis_url {
        Some(_) => None,
        None => Some(LocalRedis::start("redis-server")?),
    };
    let url = config
        .redis_url
        .clone()
        .or_else(|| local.as_ref().map(LocalRedis::url))
        .unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let lines = runtime.block_on(run(config, &url, local.is_some()))?;
    Ok(lines)
}

/// Connects, waiting up to 5 s for a server just started to come up.
async fn connect(url: &str, name: &str) -> Result<Queue, String> {
    Queue::builder(name)
        .connect_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .map_err(|error| format!("cannot reach Redis at {url}: {error}"))
}

async fn run(config: &Config, url: &str, local: bool) -> Result<(Vec<String>, bool), String> {
    let n = usize::try_from(config.timers).map_err(|_| "--timers is too large".to_owned())?;
    // A queue of its own on a shared server: this process's id names it.
    let name = format!("shardwheel-load-{}", std::process::id());
    let queue = connect(url, &name).await?;
    let tally = Arc::new(Tally {
        runs: (0..n).map(|_| AtomicU8::new(0)).collect(),
        cancelled: (0..n).map(|_| AtomicU8::new(0)).collect(),
        first_run_us: AtomicU64::new(u64::MAX),
        last_run_us: AtomicU64::new(0),
    });
    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let tally = Arc::clone(&tally);
        let handler = move |job: Job| {
            if let Some(runs) = job.id.parse::<usize>().ok().and_then(|i| tally.runs.get(i)) {
                runs.fetch_add(1, Relaxed);
                let now = since(start);
                tally.first_run_us.fetch_min(now, Relaxed);
                tally.last_run_us.fetch_max(now, Relaxed);
            }
            std::future::ready(Ok::<(), ()>(()))
        };
        workers.push(
            Worker::builder()
                .start(queue.clone(), handler)
                .map_err(|e| format!("cannot start a worker: {e}"))?,
        );
    }
    let producers = (0..config.producers).map(|producer| {
        let (queue, tally, config) = (queue.clone(), Arc::clone(&tally), config.clone());
        tokio::spawn(async move { produce(&queue, &tally, &config, producer, n).await })
    });
    let mut cancelled = 0;
    for producer in join_producers(producers.collect()).await {
        cancelled += producer?;
    }
    let scheduling = start.elapsed();
    let expected = n - cancelled;
    let patience = max_delay(config) + Duration::from_secs(60);
    while ran(&tally) < expected && start.elapsed() < scheduling + patience {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut lines = vec![format!(
        "durable: {n} jobs from {} producers, delays {}, {:.0} % cancelled, {WORKERS} workers, on {url}{}",
        config.producers,
        config.delays,
        config.cancel * 100.0,
        if local {
            " (started here, appendfsync always)"
        } else {
            ""
        },
    )];
    let mut early = 0;
    for (i, worker) in workers.into_iter().enumerate() {
        let stats = worker.stop().await;
        early += stats.early;
        lines.push(format!("worker {}: {stats}", i + 1));
    }
    let (lost, twice, ran_cancelled) = check(&tally);
    let runs_span = tally
        .last_run_us
        .load(Relaxed)
        .saturating_sub(tally.first_run_us.load(Relaxed));
    lines.push(format!(
        "scheduled {n} in {:.2} s ({:.0} a second), {cancelled} cancelled",
        scheduling.as_secs_f64(),
        n as f64 / scheduling.as_secs_f64().max(1e-9),
    ));
    lines.push(format!(
        "ran {} jobs over {:.2} s; lost {lost}, run twice {twice}, run after their cancel {ran_cancelled}, early {early}",
        ran(&tally),
        runs_span as f64 / 1e6,
    ));
    let passed = lost == 0 && twice == 0 && ran_cancelled == 0 && early == 0;
    lines.push(if passed { "PASS" } else { "FAIL" }.to_owned());
    Ok((lines, passed))
}

/// Awaits every task; a task that panicked counts as an error.
async fn join_producers(
    tasks: Vec<tokio::task::JoinHandle<Result<usize, String>>>,
) -> Vec<Result<usize, String>> {
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(
            task.await
                .unwrap_or_else(|e| Err(format!("a producer failed: {e}"))),
        );
    }
    outcomes
}

/// Schedules the jobs `producer`, `producer + producers`, ... of `n` in batches, cancels
/// the configured share of each batch; returns how many jobs it cancelled (whether or not
/// a run of theirs may have started).
async fn produce(
    queue: &Queue,
    tally: &Tally,
    config: &Config,
    producer: usize,
    n: usize,
) -> Result<usize, String> {
    let mut random = Random(producer as u64 + 1);
    let indices: Vec<usize> = (producer..n).step_by(config.producers).collect();
    let mut cancelled = 0;
    for chunk in indices.chunks(BATCH) {
        let ids: Vec<String> = chunk.iter().map(usize::to_string).collect();
        let jobs = ids.iter().map(|id| {
            let delay = random.delay(config.delays);
            (id.as_str(), When::After(delay), &PAYLOAD[..])
        });
        queue
            .schedule_many(jobs.collect::<Vec<_>>())
            .await
            .map_err(|e| format!("schedule failed: {e}"))?;
        for (id, &index) in ids.iter().zip(chunk) {
            if random.unit() < config.cancel {
                let found = queue
                    .cancel(id)
                    .await
                    .map_err(|e| format!("cancel failed: {e}"))?;
                // Pending, or claimed before its due time: it must never run. Claimed at or
                // after it: it may have started (it runs at most once).
                let state = match found {
                    Cancelled::Pending | Cancelled::Claimed => 1,
                    Cancelled::Started => 2,
                    Cancelled::Dead | Cancelled::NotFound => continue,
                };
                tally.cancelled[index].store(state, Relaxed);
                cancelled += 1;
            }
        }
    }
    Ok(cancelled)
}

fn max_delay(config: &Config) -> Duration {
    match config.delays {
        crate::config::Delays::Uniform(_, max) | crate::config::Delays::Fixed(max) => max,
        // Draws beyond 20 means are rarer than one in 400 million.
        crate::config::Delays::Exponential(mean) => mean * 20,
    }
}

/// Jobs that ran at least once, leaving out those whose cancel said they may have
/// started (they may run or not).
fn ran(tally: &Tally) -> usize {
    tally
        .runs
        .iter()
        .zip(&tally.cancelled)
        .filter(|(runs, cancelled)| runs.load(Relaxed) > 0 && cancelled.load(Relaxed) != 2)
        .count()
}

/// (lost, run twice, run although cancelled before its start).
fn check(tally: &Tally) -> (usize, usize, usize) {
    let mut counts = (0, 0, 0);
    for (runs, cancelled) in tally.runs.iter().zip(&tally.cancelled) {
        match (runs.load(Relaxed), cancelled.load(Relaxed)) {
            (0, 0) => counts.0 += 1,
            (2.., _) => counts.1 += 1,
            (1, 1) => counts.2 += 1,
            _ => {}
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_redis_server_is_a_clear_error() {
        let error = LocalRedis::start("redis-server-not-installed-here")
            .err()
            .expect("started a binary that does not exist");
        assert!(error.contains("--redis-url"), "{error}");
        assert!(error.contains("apt-get install redis-server"), "{error}");
    }

    #[test]
    fn the_check_counts_lost_twice_and_cancelled_runs() {
        let tally = Tally {
            runs: [0, 1, 2, 1, 0, 1, 0, 2].map(AtomicU8::new).into(),
            cancelled: [0, 0, 0, 1, 1, 2, 2, 2].map(AtomicU8::new).into(),
            first_run_us: AtomicU64::new(0),
            last_run_us: AtomicU64::new(0),
        };
        // Job 0 lost, 2 twice, 3 ran after its cancel, 4 cancelled and not run: fine; 5 and
        // 6 cancelled after their due time ran once or not at all: fine; 7 ran twice.
        assert_eq!(check(&tally), (1, 2, 1));
        assert_eq!(ran(&tally), 3);
    }
}
