//! A worker process for a shardwheel-redis queue that prints each job it runs.
//!
//! ```text
//! shardwheel-redis-worker --url redis://127.0.0.1:6379 --queue emails [--cluster]
//!     [--shards 16] [--buckets N] [--lease-ms 30000] [--window-ms 10000] [--poll-ms 100]
//!     [--hold-ms 0] [--fail-first N] [--max-attempts 5] [--check-ahead-ms 0]
//! ```
//!
//! `--buckets` sets the payload hashes a shard (`QueueBuilder::buckets`; unset, the
//! queue's own count, or the default for a new queue): `--buckets 1` for one hash a shard.
//!
//! Prints `READY <server unix ms> <local unix ms>` once connected, then one line
//! `RUN <id> <attempt> <due ms> <lateness us> <payload>` as each handler starts; the handler
//! then waits `--hold-ms` and succeeds (or fails, for a job's first N attempts with
//! `--fail-first N`). Closing its standard input stops it gracefully (its unrun claims are
//! given back); it prints `STATS <counts>` and exits. The tests run it as the worker process
//! they kill, stop and race; it is also the smallest useful worker to start from.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shardwheel_redis::{Queue, Worker};
use tokio::io::AsyncReadExt;

struct Args {
    url: String,
    queue: String,
    cluster: bool,
    shards: u32,
    buckets: Option<u32>,
    lease_ms: u64,
    window_ms: u64,
    poll_ms: u64,
    hold_ms: u64,
    fail_first: u32,
    max_attempts: u32,
    check_ahead_ms: u64,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        url: "redis://127.0.0.1:6379".into(),
        queue: String::new(),
        cluster: false,
        shards: 16,
        buckets: None,
        lease_ms: 30_000,
        window_ms: 10_000,
        poll_ms: 100,
        hold_ms: 0,
        fail_first: 0,
        max_attempts: 5,
        check_ahead_ms: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--cluster" {
            args.cluster = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--url" => args.url = value.clone(),
            "--queue" => args.queue = value.clone(),
            "--shards" => args.shards = number()? as u32,
            "--buckets" => args.buckets = Some(number()? as u32),
            "--lease-ms" => args.lease_ms = number()?,
            "--window-ms" => args.window_ms = number()?,
            "--poll-ms" => args.poll_ms = number()?,
            "--hold-ms" => args.hold_ms = number()?,
            "--fail-first" => args.fail_first = number()? as u32,
            "--max-attempts" => args.max_attempts = number()? as u32,
            "--check-ahead-ms" => args.check_ahead_ms = number()?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if args.queue.is_empty() {
        return Err("--queue is required".into());
    }
    Ok(args)
}

fn unix_ms(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

#[tokio::main]
async fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("shardwheel-redis-worker: {error}");
            std::process::exit(2);
        }
    };
    let mut builder = Queue::builder(&args.queue).shards(args.shards);
    if let Some(buckets) = args.buckets {
        builder = builder.buckets(buckets);
    }
    let queue = if args.cluster {
        let nodes: Vec<&str> = args.url.split(',').collect();
        builder.connect_cluster(&nodes).await
    } else {
        builder.connect(&args.url).await
    };
    let queue = match queue {
        Ok(queue) => queue,
        Err(error) => {
            eprintln!("shardwheel-redis-worker: {error}");
            std::process::exit(1);
        }
    };
    let server = queue.server_time().await.map(unix_ms).unwrap_or(0);
    println!("READY {server} {}", unix_ms(SystemTime::now()));
    let (hold, fail_first) = (Duration::from_millis(args.hold_ms), args.fail_first);
    let worker = Worker::builder()
        .lease(Duration::from_millis(args.lease_ms))
        .window(Duration::from_millis(args.window_ms))
        .poll(Duration::from_millis(args.poll_ms))
        .max_attempts(args.max_attempts)
        .check_ahead(Duration::from_millis(args.check_ahead_ms))
        .backoff(Duration::from_millis(100), Duration::from_secs(1))
        .start(queue, move |job| async move {
            let late = SystemTime::now()
                .duration_since(job.due)
                .unwrap_or_default()
                .as_micros();
            {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(
                    out,
                    "RUN {} {} {} {late} {}",
                    job.id,
                    job.attempt,
                    unix_ms(job.due),
                    String::from_utf8_lossy(&job.payload)
                );
                let _ = out.flush();
            }
            tokio::time::sleep(hold).await;
            if job.attempt <= fail_first {
                Err("failing as asked")
            } else {
                Ok(())
            }
        });
    let worker = match worker {
        Ok(worker) => worker,
        Err(error) => {
            eprintln!("shardwheel-redis-worker: {error}");
            std::process::exit(1);
        }
    };
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    let stats = worker.stop().await;
    println!("STATS {stats}");
}
