//! The worker in this process against a real server: delivery once and never early,
//! graceful stop, retries and the dead-letter set, cancel racing claims, duplicate ids,
//! lease extension for long handlers, wake-up hints and their loss, start checks shared by
//! the jobs that fire close together with a check ahead.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardwheel_redis::{Cancelled, Counts, Job, Queue, When, Worker};
use support::{Seen, note, recording};

async fn empty(queue: &Queue) -> bool {
    queue.counts().await.unwrap() == Counts::default()
}

/// A queue `name` on `server`, with `buckets` payload hashes a shard if given (the
/// default otherwise).
async fn queue_with(server: &support::Server, name: &str, buckets: Option<u32>) -> Queue {
    let builder = Queue::builder(name);
    let builder = match buckets {
        Some(buckets) => builder.buckets(buckets),
        None => builder,
    };
    builder.connect(&server.url()).await.unwrap()
}

/// The payload hashes of queue `name` left on `server`.
fn payload_hashes(server: &support::Server, name: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("{{{name}:*}}:j:*"))
        .query(&mut server.sync_conn())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_each_job_once_never_early_and_acks_it() {
    delivers_once(None).await;
}

/// With one payload hash a shard: the schedules, the claims' payload reads and the acks
/// each take a batch's jobs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_one_hash_a_shard_delivers_each_job_once_never_early_and_acks_it() {
    delivers_once(Some(1)).await;
}

/// 3,000 jobs due over 2 s, on a queue of `buckets` payload hashes a shard: each runs once,
/// never early, and is acked, its payload gone.
async fn delivers_once(buckets: Option<u32>) {
    let server = support::Server::start();
    let queue = queue_with(&server, "once", buckets).await;
    let ids: Vec<String> = (0..3000).map(|i| format!("job-{i}")).collect();
    let jobs = ids.iter().enumerate().map(|(i, id)| {
        let delay = Duration::from_millis((i as u64 * 7) % 2000);
        (id.as_str(), When::After(delay), id.as_bytes())
    });
    support::schedule_new(&queue, jobs).await;
    let (seen, handler) = recording();
    let worker = Worker::builder().start(queue.clone(), handler).unwrap();
    support::until("every job acked", async || empty(&queue).await).await;
    let stats = worker.stop().await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3000);
    assert!(
        seen.values().all(|attempts| attempts == &[1]),
        "a job ran twice"
    );
    assert_eq!(
        (stats.delivered, stats.acked, stats.refused),
        (3000, 3000, 0)
    );
    assert_eq!(
        stats.early, 0,
        "a job started before its due time by the server clock"
    );
    assert_eq!(payload_hashes(&server, "once"), Vec::<String>::new());
}

/// With a check ahead of 250 ms, the jobs that fire within 25 ms of each other go in one
/// start check: twenty jobs due 1 ms apart take one or two checks, not one an instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_check_ahead_jobs_firing_close_together_share_a_start_check() {
    let server = support::Server::start();
    let queue = Queue::connect(&server.url(), "gather").await.unwrap();
    let now = queue.server_time().await.unwrap();
    let base = now + Duration::from_secs(1);
    let ids: Vec<String> = (0..20).map(|i| format!("g-{i}")).collect();
    let jobs = ids.iter().enumerate().map(|(i, id)| {
        let due = base + Duration::from_millis(i as u64);
        (id.as_str(), When::At(due), &b""[..])
    });
    support::schedule_new(&queue, jobs).await;
    let (seen, handler) = recording();
    let worker = Worker::builder()
        .check_ahead(Duration::from_millis(250))
        .start(queue.clone(), handler)
        .unwrap();
    support::until("every job acked", async || empty(&queue).await).await;
    let stats = worker.stop().await;
    assert_eq!(seen.lock().unwrap().len(), 20);
    assert_eq!((stats.delivered, stats.acked, stats.early), (20, 20, 0));
    assert!(stats.checks <= 2, "{} start checks", stats.checks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_gives_its_claims_back_and_another_worker_runs_them() {
    let server = support::Server::start();
    let queue = Queue::connect(&server.url(), "stop").await.unwrap();
    let ids: Vec<String> = (0..500).map(|i| i.to_string()).collect();
    let jobs = ids
        .iter()
        .map(|id| (id.as_str(), When::After(Duration::from_secs(3)), &b""[..]));
    queue.schedule_many(jobs).await.unwrap();
    let (seen, handler) = recording();
    let first = Worker::builder()
        .window(Duration::from_secs(60))
        .start(queue.clone(), handler)
        .unwrap();
    support::until("all claimed", async || first.stats().claimed == 500).await;
    assert_eq!(queue.counts().await.unwrap().claimed, 500);
    let stats = first.stop().await;
    // Released before they came due (unless this machine stalled for 3 s: then they ran).
    let ran = seen.lock().unwrap().len() as u64;
    assert_eq!(stats.released + ran, 500);
    assert_eq!(stats.held, 0);
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.claimed), (500 - ran, 0));
    let (seen2, handler) = recording();
    let second = Worker::builder().start(queue.clone(), handler).unwrap();
    support::until("all acked", async || empty(&queue).await).await;
    second.stop().await;
    let seen2 = seen2.lock().unwrap();
    assert_eq!(seen2.len() as u64 + ran, 500);
    // Released jobs start again at attempt 1: the release did not count.
    assert!(seen2.values().all(|attempts| attempts == &[1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_and_panics_retry_with_backoff_then_dead_letter() {
    let server = support::Server::start();
    let queue = Queue::connect(&server.url(), "fail").await.unwrap();
    for i in 0..20 {
        queue
            .schedule(&format!("f{i}"), Duration::ZERO, b"")
            .await
            .unwrap();
    }
    let seen: Seen = Arc::default();
    let record = Arc::clone(&seen);
    let worker = Worker::builder()
        .max_attempts(3)
        .backoff(Duration::from_millis(20), Duration::from_millis(100))
        .poll(Duration::from_millis(10))
        .start(queue.clone(), move |job: Job| {
            record
                .lock()
                .unwrap()
                .entry(job.id.clone())
                .or_default()
                .push(job.attempt);
            // f2 and f4 panic while making their future, odd ids while running it, the
            // rest return an error.
            if job.id.ends_with(['2', '4']) {
                panic!("a handler panicking before its future (expected in this test)");
            }
            let odd = job.id.ends_with(['1', '3', '5', '7', '9']);
            async move {
                if odd {
                    panic!("a handler panicking (expected in this test)");
                }
                Err("always failing")
            }
        })
        .unwrap();
    support::until("all dead", async || {
        queue.counts().await.unwrap().dead == 20
    })
    .await;
    let stats = worker.stop().await;
    assert_eq!(
        (stats.retried, stats.dead_lettered, stats.acked),
        (40, 20, 0)
    );
    {
        let seen = seen.lock().unwrap();
        assert!(
            seen.values().all(|attempts| attempts == &[1, 2, 3]),
            "{seen:?}"
        );
    }
    let (state, _) = queue.status("f4").await.unwrap().unwrap();
    assert!(matches!(
        state,
        shardwheel_redis::JobState::Dead { attempts: 3, .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_racing_claims_never_runs_a_job_cancelled_before_its_due_time() {
    let server = support::Server::start();
    let queue = Queue::connect(&server.url(), "race").await.unwrap();
    let ids: Vec<String> = (0..4000).map(|i| format!("r{i}")).collect();
    let jobs = ids.iter().enumerate().map(|(i, id)| {
        (
            id.as_str(),
            When::After(Duration::from_millis(i as u64 % 1500)),
            &b""[..],
        )
    });
    queue.schedule_many(jobs).await.unwrap();
    let (seen, handler) = recording();
    let worker = Worker::builder()
        .window(Duration::from_millis(500))
        .poll(Duration::from_millis(5))
        .start(queue.clone(), handler)
        .unwrap();
    // Cancel every other job while the worker claims them, from two tasks.
    let mut cancels = Vec::new();
    for half in 0..2 {
        let queue = queue.clone();
        let ids = ids.clone();
        cancels.push(tokio::spawn(async move {
            let mut found = Vec::new();
            for id in ids.iter().skip(half * 2).step_by(4) {
                found.push((id.clone(), queue.cancel(id).await.unwrap()));
                tokio::task::yield_now().await;
            }
            found
        }));
    }
    let mut cancelled = HashMap::new();
    for task in cancels {
        cancelled.extend(task.await.unwrap());
    }
    support::until("queue drained", async || empty(&queue).await).await;
    let stats = worker.stop().await;
    let seen = seen.lock().unwrap();
    let mut by = HashMap::new();
    let mut started_ran = 0;
    for (id, found) in &cancelled {
        *by.entry(*found).or_insert(0) += 1;
        let runs = seen.get(id).map_or(0, Vec::len);
        match found {
            Cancelled::Pending => assert_eq!(runs, 0, "{id} cancelled while pending, ran"),
            Cancelled::Claimed => assert_eq!(runs, 0, "{id} cancelled before its due time, ran"),
            // Cancelled at or after its due time: it ran if its start check came first.
            Cancelled::Started => {
                assert!(
                    runs <= 1,
                    "{id} cancelled after its due time, ran {runs} times"
                );
                started_ran += runs;
            }
            Cancelled::NotFound => assert_eq!(runs, 1, "{id} gone before its cancel, not run once"),
            Cancelled::Dead => panic!("{id} dead"),
        }
    }
    for id in ids.iter().filter(|id| !cancelled.contains_key(*id)) {
        assert_eq!(
            seen.get(id).map(Vec::len),
            Some(1),
            "{id} not run exactly once"
        );
    }
    let count = |found| by.get(&found).copied().unwrap_or(0);
    assert_eq!(
        (stats.refused, stats.revoked),
        (
            started_ran as u64,
            count(Cancelled::Claimed) + count(Cancelled::Started) - started_ran as u64
        ),
        "each cancelled job that ran has its ack refused, each other one was refused its start"
    );
    eprintln!("cancel results: {by:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_ids_from_racing_producers_run_once_with_the_first_payload() {
    duplicates_run_once(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_one_hash_a_shard_duplicate_ids_from_racing_producers_run_once() {
    duplicates_run_once(Some(1)).await;
}

/// Four producers schedule the same 300 ids at once, on a queue of `buckets` payload
/// hashes a shard: each id is stored by one of them and runs once, with that payload.
async fn duplicates_run_once(buckets: Option<u32>) {
    let server = support::Server::start();
    let queue = queue_with(&server, "dup", buckets).await;
    let mut producers = Vec::new();
    for producer in 0..4u8 {
        let queue = queue.clone();
        producers.push(tokio::spawn(async move {
            let ids: Vec<String> = (0..300).map(|i| format!("d{i}")).collect();
            let payload = [producer];
            let jobs = ids.iter().map(|id| {
                (
                    id.as_str(),
                    When::After(Duration::from_millis(300)),
                    &payload[..],
                )
            });
            queue.schedule_many(jobs).await.unwrap()
        }));
    }
    let mut stored = 0;
    for task in producers {
        stored += task.await.unwrap().iter().filter(|&&new| new).count();
    }
    assert_eq!(stored, 300, "each id stored by exactly one producer");
    let payloads: Arc<Mutex<HashMap<String, Vec<Vec<u8>>>>> = Arc::default();
    let record = Arc::clone(&payloads);
    let mut expected = HashMap::new();
    for i in 0..300 {
        let id = format!("d{i}");
        expected.insert(id.clone(), queue.status(&id).await.unwrap().unwrap().1);
    }
    let worker = Worker::builder()
        .start(queue.clone(), move |job: Job| {
            record
                .lock()
                .unwrap()
                .entry(job.id)
                .or_default()
                .push(job.payload);
            std::future::ready(Ok::<(), ()>(()))
        })
        .unwrap();
    support::until("all acked", async || empty(&queue).await).await;
    worker.stop().await;
    let payloads = payloads.lock().unwrap();
    assert_eq!(payloads.len(), 300);
    for (id, runs) in payloads.iter() {
        assert_eq!(runs, &vec![expected[id].clone()], "{id}");
    }
}

/// A job due now whose first run takes 3 s, under a 1 s lease that the worker's own claims
/// (every 50 ms) would take back once expired, with leases extended for `extend_for`:
/// the attempts it ran and the worker's statistics.
async fn run_past_the_lease(extend_for: Duration) -> (Vec<u32>, shardwheel_redis::Stats) {
    let server = support::Server::start();
    let queue = Queue::connect(&server.url(), "long").await.unwrap();
    queue.schedule("long", Duration::ZERO, b"").await.unwrap();
    let seen: Seen = Arc::default();
    let record = Arc::clone(&seen);
    let handler = move |job: Job| {
        let run = Duration::from_secs(if job.attempt == 1 { 3 } else { 0 });
        note(&record, job);
        async move {
            tokio::time::sleep(run).await;
            Ok::<(), ()>(())
        }
    };
    let worker = Worker::builder()
        .lease(Duration::from_secs(1))
        .poll(Duration::from_millis(50))
        .extend_for(extend_for)
        .start(queue.clone(), handler)
        .unwrap();
    support::until("the job acked", async || empty(&queue).await).await;
    let stats = worker.stop().await;
    let runs = seen.lock().unwrap()["long"].clone();
    (runs, stats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_running_past_its_lease_keeps_it_and_runs_once() {
    let (runs, stats) = run_past_the_lease(Duration::from_secs(3600)).await;
    assert_eq!(runs, vec![1], "ran again");
    assert_eq!((stats.acked, stats.refused, stats.reaped), (1, 0, 0));
    assert!(stats.extended >= 2, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_extension_a_handler_past_its_lease_loses_the_job() {
    let (runs, stats) = run_past_the_lease(Duration::ZERO).await;
    // The lease ended under the first run: the job was taken back and ran again (at once),
    // and the first run's ack was refused.
    assert_eq!(runs, vec![1, 2]);
    assert_eq!((stats.acked, stats.refused, stats.extended), (1, 1, 0));
    assert!(stats.reaped >= 1, "{stats}");
}

/// Subscribers of the queue's wake-up channel, and claim script calls so far.
fn subscribers_and_calls(conn: &mut redis::Connection, queue: &str) -> (i64, i64) {
    let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(format!("{{{queue}}}:wake"))
        .query(conn)
        .unwrap();
    let stats: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let calls = stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap());
    (subscribers, calls)
}

/// A server, a connection to it and a queue `name` with a recording worker polling every
/// `poll`.
async fn hinted(
    name: &str,
    poll: Duration,
) -> (support::Server, redis::Connection, Queue, Seen, Worker) {
    let server = support::Server::start();
    let conn = server.sync_conn();
    let queue = Queue::connect(&server.url(), name).await.unwrap();
    let (seen, handler) = recording();
    let worker = Worker::builder()
        .poll(poll)
        .start(queue.clone(), handler)
        .unwrap();
    (server, conn, queue, seen, worker)
}

/// Schedules a job due now, waits until it is acked, stops the worker: it ran once.
async fn deliver_now(queue: &Queue, worker: Worker, seen: &Seen) -> shardwheel_redis::Stats {
    assert!(queue.schedule("now", Duration::ZERO, b"").await.unwrap());
    support::until("the job acked", async || empty(queue).await).await;
    let stats = worker.stop().await;
    assert_eq!(seen.lock().unwrap().len(), 1);
    stats
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_hint_claims_a_job_due_now_long_before_the_next_poll() {
    // Polls an hour apart: only the hint can bring the job within the test's patience.
    let (_server, mut conn, queue, seen, worker) = hinted("hint", Duration::from_secs(3600)).await;
    // Subscribed, and the first round (one claim call per shard) done: the claimer sleeps.
    support::until("subscribed after a round", async || {
        let (subscribers, calls) = subscribers_and_calls(&mut conn, "hint");
        subscribers == 1 && calls >= i64::from(queue.shards())
    })
    .await;
    let stats = deliver_now(&queue, worker, &seen).await;
    assert_eq!((stats.acked, stats.woken), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_still_delivered_when_the_hint_subscription_is_lost() {
    let (_server, mut conn, queue, seen, worker) =
        hinted("nohint", Duration::from_millis(200)).await;
    support::until("subscribed", async || {
        subscribers_and_calls(&mut conn, "nohint").0 == 1
    })
    .await;
    // Channels forbidden: the server drops the subscription, refuses a new one and the
    // schedule script's PUBLISH.
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("resetchannels")
        .query::<()>(&mut conn)
        .unwrap();
    support::until("unsubscribed", async || {
        subscribers_and_calls(&mut conn, "nohint").0 == 0
    })
    .await;
    let stats = deliver_now(&queue, worker, &seen).await;
    assert_eq!((stats.acked, stats.woken), (1, 0));
}
