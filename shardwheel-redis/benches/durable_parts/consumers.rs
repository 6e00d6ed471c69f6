//! The implementations the durable bench runs and what delivers their jobs:
//! shardwheel-redis's workers, as a worker is by default and with a check ahead of 250 ms
//! (`WorkerBuilder::check_ahead`), or the pollers (`baselines`), and the server probe that
//! runs beside them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use shardwheel_redis::{Job, Queue, Worker};

use super::probe::Probe;
use super::{Tally, WORKERS, poller, support, unix_us};

/// The check ahead of the bench's second and third shardwheel-redis runs.
const CHECK_AHEAD: Duration = Duration::from_millis(250);

/// How a shardwheel-redis run sets up its queue and workers.
#[derive(Clone, Copy)]
pub(super) struct Setup {
    /// The workers' check ahead (`WorkerBuilder::check_ahead`).
    pub(super) check_ahead: Duration,
    /// The queue's payload hashes a shard (`QueueBuilder::buckets`), if not the crate's
    /// default.
    pub(super) buckets: Option<u32>,
}

/// A client of queue `name` on `server`, with `buckets` payload hashes a shard, or
/// `DURABLE_BUCKETS` if set, or the queue's own count (the crate's default for a new one).
pub(super) async fn connect(server: &support::Server, name: &str, buckets: Option<u32>) -> Queue {
    let mut builder = Queue::builder(name);
    let from_env = || std::env::var("DURABLE_BUCKETS").ok()?.parse().ok();
    if let Some(buckets) = buckets.or_else(from_env) {
        builder = builder.buckets(buckets);
    }
    builder.connect(&server.url()).await.unwrap()
}

/// Whether implementation `name` is shardwheel-redis, and how it is set up: as it is by
/// default; with a check ahead; with a check ahead and one payload hash a shard, which
/// stores a call's jobs with one lookup and one write (schedule.lua) for about 54 bytes
/// more a pending job (D3).
pub(super) fn shardwheel(name: &str) -> Option<Setup> {
    let (check_ahead, buckets) = match name {
        "shardwheel-redis" => (Duration::ZERO, None),
        "shardwheel-redis-ahead-250ms" => (CHECK_AHEAD, None),
        "shardwheel-redis-one-hash-ahead-250ms" => (CHECK_AHEAD, Some(1)),
        _ => return None,
    };
    Some(Setup {
        check_ahead,
        buckets,
    })
}

async fn start_workers(
    server: &support::Server,
    name: &str,
    tally: &Arc<Tally>,
    setup: Setup,
) -> Vec<Worker> {
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let queue = connect(server, name, setup.buckets).await;
        let tally = Arc::clone(tally);
        let mut builder = Worker::builder().check_ahead(setup.check_ahead);
        if let Some(window) = std::env::var("DURABLE_WINDOW_MS")
            .ok()
            .and_then(|w| w.parse().ok())
        {
            builder = builder.window(Duration::from_millis(window));
        }
        let worker = builder
            .start(queue, move |job: Job| {
                let now = unix_us(SystemTime::now());
                let index: usize = job.id.parse().unwrap();
                tally.record(index, unix_us(job.due), now);
                std::future::ready(Ok::<(), ()>(()))
            })
            .unwrap();
        workers.push(worker);
    }
    workers
}

/// The implementations to run: all, unless `DURABLE_ONLY` names some (quick checks).
pub(super) fn implementations() -> Vec<&'static str> {
    let only = std::env::var("DURABLE_ONLY").unwrap_or_default();
    let named: Vec<&str> = only.split(',').filter(|o| o.contains('-')).collect();
    [
        "shardwheel-redis",
        "shardwheel-redis-ahead-250ms",
        "shardwheel-redis-one-hash-ahead-250ms",
        "naive-poller",
        "script-poller",
    ]
    .into_iter()
    .filter(|name| named.is_empty() || named.contains(name))
    .collect()
}

/// What delivers the jobs: shardwheel-redis's workers or the pollers.
pub(super) enum Consumers {
    Workers(Vec<Worker>),
    Pollers(Arc<AtomicU64>, Vec<tokio::task::JoinHandle<()>>),
}

impl Consumers {
    /// WORKERS of implementation `name` on queue (or key) `queue`, recording into `tally`.
    async fn start(name: &str, server: &support::Server, queue: &str, tally: &Arc<Tally>) -> Self {
        if let Some(setup) = shardwheel(name) {
            let workers = start_workers(server, queue, tally, setup).await;
            return Consumers::Workers(workers);
        }
        let stop = Arc::new(AtomicU64::new(0));
        let pollers = (0..WORKERS)
            .map(|_| {
                tokio::spawn(poller(
                    server.url(),
                    queue.to_owned(),
                    name == "script-poller",
                    Arc::clone(tally),
                    Arc::clone(&stop),
                ))
            })
            .collect();
        Consumers::Pollers(stop, pollers)
    }

    pub(super) async fn stop(self, workload: &str) {
        match self {
            Consumers::Workers(workers) => {
                for worker in workers {
                    eprintln!("{workload} worker: {}", worker.stop().await);
                }
            }
            Consumers::Pollers(stop, pollers) => {
                stop.store(1, Ordering::Relaxed);
                for poller in pollers {
                    poller.await.unwrap();
                }
            }
        }
    }
}

/// An implementation's run of a workload: its consumers and the server probe beside them.
pub(super) struct Run {
    pub(super) consumers: Consumers,
    pub(super) probe: Probe,
}

impl Run {
    /// Starts the probe, then the consumers (see `Consumers::start`).
    pub(super) async fn start(
        name: &str,
        server: &support::Server,
        queue: &str,
        tally: &Arc<Tally>,
    ) -> Self {
        let probe = Probe::start(&server.url());
        let consumers = Consumers::start(name, server, queue, tally).await;
        Run { consumers, probe }
    }
}
