//! Worker processes and a server that crash, stall and race: kill -9 of a worker after its
//! claim, SIGSTOP past a lease, kill -9 of the server, several processes racing claims, and a
//! worker whose clock is off by minutes.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use shardwheel_redis::{Counts, Queue, When};
use support::{Run, Server, WorkerProcess, stat};

async fn schedule(queue: &Queue, ids: &[String], delay: impl Fn(usize) -> Duration) {
    for chunk in ids.chunks(10_000).enumerate() {
        let (offset, chunk) = chunk;
        let jobs = chunk.iter().enumerate().map(|(i, id)| {
            (
                id.as_str(),
                When::After(delay(offset * 10_000 + i)),
                id.as_bytes(),
            )
        });
        support::schedule_new(queue, jobs).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_jobs_run_again_once_after_their_lease() {
    let server = Server::start();
    let url = server.url();
    let queue = Queue::connect(&url, "kill").await.unwrap();
    let ids: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    schedule(&queue, &ids, |_| Duration::ZERO).await;
    // The first worker runs every job and never finishes one (a 10-minute handler).
    let (mut first, _, _) = WorkerProcess::start(
        &url,
        "kill",
        &["--lease-ms", "1500", "--hold-ms", "600000"],
        &[],
    );
    let mut first_runs = Vec::new();
    while first_runs.len() < 20 {
        first_runs.push(
            first
                .next_run(support::PATIENCE)
                .expect("the first worker's runs"),
        );
    }
    first.signal(libc::SIGKILL);
    drop(first);
    let (second, _, _) = WorkerProcess::start(&url, "kill", &["--lease-ms", "30000"], &[]);
    support::until("queue drained", async || {
        queue.counts().await.unwrap() == Counts::default()
    })
    .await;
    let (runs, stats) = second.stop();
    let mut by_id: HashMap<&str, Vec<&Run>> = HashMap::new();
    for run in &runs {
        by_id.entry(run.id.as_str()).or_default().push(run);
    }
    assert_eq!(by_id.len(), 20, "every job ran again: {runs:?}");
    for (id, runs) in &by_id {
        assert_eq!(
            runs.len(),
            1,
            "{id} ran {} times in the second worker",
            runs.len()
        );
        assert_eq!(
            runs[0].attempt, 2,
            "{id}: the expired lease counts as attempt 1"
        );
    }
    // They came back through the reaper (their leases expired), not through anything else.
    assert_eq!(stat(&stats, "reaped"), 20);
    assert_eq!(stat(&stats, "acked"), 20);
    // Leased for 1.5 s after its due time: the reaper put it back (due again at the
    // reaping instant, by the server's clock) no earlier than that.
    let mut after_lease = Vec::new();
    for first_run in &first_runs {
        let again = by_id[first_run.id.as_str()][0];
        after_lease.push(again.due_ms as i64 - (first_run.due_ms as i64 + 1500));
        assert!(
            again.due_ms >= first_run.due_ms + 1500,
            "{} back at {} before its lease ended ({} + 1500)",
            first_run.id,
            again.due_ms,
            first_run.due_ms
        );
    }
    // Reported, not asserted (no timing assertions): how long after the lease's end the
    // reaper took the jobs back (the lease counts from the claim, at or after the due time).
    eprintln!(
        "taken back {} to {} ms after due + lease",
        after_lease.iter().min().unwrap(),
        after_lease.iter().max().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_workers_ack_is_refused_after_another_finished_the_job() {
    let server = Server::start();
    let url = server.url();
    let queue = Queue::connect(&url, "stall").await.unwrap();
    queue.schedule("s", Duration::ZERO, b"x").await.unwrap();
    let (mut zombie, _, _) = WorkerProcess::start(
        &url,
        "stall",
        &["--lease-ms", "1000", "--hold-ms", "5000"],
        &[],
    );
    let run = zombie
        .next_run(support::PATIENCE)
        .expect("the zombie's run");
    assert_eq!((run.id.as_str(), run.attempt), ("s", 1));
    zombie.signal(libc::SIGSTOP);
    // Another worker takes the job back once the lease expires, runs and acks it.
    let (mut other, _, _) = WorkerProcess::start(&url, "stall", &[], &[]);
    let again = other
        .next_run(support::PATIENCE)
        .expect("the other worker's run");
    assert_eq!((again.id.as_str(), again.attempt), ("s", 2));
    support::until("acked", async || {
        queue.counts().await.unwrap() == Counts::default()
    })
    .await;
    let (_, other_stats) = other.stop();
    assert_eq!(stat(&other_stats, "acked"), 1);
    zombie.signal(libc::SIGCONT);
    // The zombie's handler finishes; its ack is refused.
    let (_, zombie_stats) = zombie.stop();
    assert_eq!(stat(&zombie_stats, "acked"), 0, "{zombie_stats}");
    assert_eq!(stat(&zombie_stats, "refused"), 1, "{zombie_stats}");
    assert_eq!(queue.counts().await.unwrap(), Counts::default());
}

/// The fence itself: the zombie acks while another worker holds the job under a newer
/// lease (in the test above the job is gone by then, which refuses the ack even without a
/// token check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_workers_ack_is_refused_while_another_holds_the_job() {
    let server = Server::start();
    let url = server.url();
    let queue = Queue::connect(&url, "fence").await.unwrap();
    queue.schedule("f", Duration::ZERO, b"x").await.unwrap();
    let (mut zombie, _, _) = WorkerProcess::start(
        &url,
        "fence",
        &["--lease-ms", "1000", "--hold-ms", "5000"],
        &[],
    );
    let run = zombie
        .next_run(support::PATIENCE)
        .expect("the zombie's run");
    assert_eq!((run.id.as_str(), run.attempt), ("f", 1));
    zombie.signal(libc::SIGSTOP);
    // The other worker takes the job back after the lease and holds it in a 10-minute
    // handler: its lease (30 s) is live while the zombie resumes.
    let (mut other, _, _) = WorkerProcess::start(&url, "fence", &["--hold-ms", "600000"], &[]);
    let again = other
        .next_run(support::PATIENCE)
        .expect("the other worker's run");
    assert_eq!((again.id.as_str(), again.attempt), ("f", 2));
    zombie.signal(libc::SIGCONT);
    let (_, zombie_stats) = zombie.stop();
    assert_eq!(stat(&zombie_stats, "acked"), 0, "{zombie_stats}");
    assert_eq!(stat(&zombie_stats, "refused"), 1, "{zombie_stats}");
    // The job is still the other worker's: the zombie's ack deleted nothing.
    let (state, _) = queue
        .status("f")
        .await
        .unwrap()
        .expect("the job is still there");
    assert!(
        matches!(
            state,
            shardwheel_redis::JobState::Claimed { attempt: 2, .. }
        ),
        "{state:?}"
    );
    other.signal(libc::SIGKILL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_schedule_survives_kill9_of_the_server() {
    let mut server = Server::start();
    let url = server.url();
    let queue = Queue::connect(&url, "aof").await.unwrap();
    // A producer schedules batches of 100 until the server dies; it keeps the ids of every
    // batch Redis acknowledged.
    let producer = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for batch in 0.. {
                let ids: Vec<String> = (0..100).map(|i| format!("b{batch}-{i}")).collect();
                let jobs = ids.iter().map(|id| {
                    (
                        id.as_str(),
                        When::After(Duration::from_secs(3600)),
                        id.as_bytes(),
                    )
                });
                match queue.schedule_many(jobs).await {
                    Ok(stored) if stored.iter().all(|&new| new) => acknowledged.extend(ids),
                    Ok(stored) => panic!("fresh ids refused: {stored:?}"),
                    Err(_) => break,
                }
            }
            acknowledged
        })
    };
    let mut conn = server.sync_conn();
    let start = Instant::now();
    loop {
        let pending: u64 = (0..16)
            .map(|s| {
                redis::cmd("ZCARD")
                    .arg(format!("{{aof:{s}}}:due"))
                    .query::<u64>(&mut conn)
                    .unwrap()
            })
            .sum();
        if pending >= 5_000 {
            break;
        }
        assert!(start.elapsed() < support::PATIENCE, "the producer is stuck");
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill9();
    let acknowledged = producer.await.unwrap();
    server.kill9_and_restart();
    let queue = Queue::connect(&url, "aof").await.unwrap();
    let counts = queue.counts().await.unwrap();
    assert!(
        counts.pending >= acknowledged.len() as u64,
        "{counts:?} < {}",
        acknowledged.len()
    );
    for id in acknowledged.iter().step_by(7) {
        let (state, payload) = queue
            .status(id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{id} lost"));
        assert!(matches!(state, shardwheel_redis::JobState::Pending { .. }));
        assert_eq!(payload, id.as_bytes());
    }
    eprintln!(
        "{} acknowledged, {} pending after the restart",
        acknowledged.len(),
        counts.pending
    );
}

/// The 1M jobs, scaled to what 2 cores run in well under a minute in CI; the bench
/// (D1) runs a million.
const RACE_JOBS: usize = 200_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_processes_racing_claims_run_each_job_once() {
    let server = Server::start();
    let url = server.url();
    let queue = Queue::connect(&url, "many").await.unwrap();
    let ids: Vec<String> = (0..RACE_JOBS).map(|i| i.to_string()).collect();
    schedule(&queue, &ids, |i| {
        Duration::from_millis((i as u64 * 7919) % 4000)
    })
    .await;
    let workers: Vec<WorkerProcess> = (0..3)
        .map(|_| {
            WorkerProcess::start(
                &url,
                "many",
                &[
                    "--window-ms",
                    "1000",
                    "--poll-ms",
                    "20",
                    "--lease-ms",
                    "120000",
                ],
                &[],
            )
            .0
        })
        .collect();
    support::until("queue drained", async || {
        queue.counts().await.unwrap() == Counts::default()
    })
    .await;
    let mut runs: HashMap<String, u32> = HashMap::new();
    let mut per_worker = Vec::new();
    for worker in workers {
        let (mine, stats) = worker.stop();
        per_worker.push(mine.len());
        assert_eq!(stat(&stats, "refused"), 0, "{stats}");
        assert_eq!(stat(&stats, "early"), 0, "{stats}");
        assert_eq!(stat(&stats, "reaped"), 0, "no lease expired: {stats}");
        for run in mine {
            *runs.entry(run.id).or_default() += 1;
        }
    }
    assert_eq!(runs.len(), RACE_JOBS, "jobs lost");
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        twice.is_empty(),
        "jobs run more than once: {:?}",
        &twice[..twice.len().min(10)]
    );
    eprintln!("runs per worker process: {per_worker:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_clock_is_off_by_minutes_delivers_by_the_servers_clock() {
    // Debian's faketime package puts it under the architecture's library directory.
    let faketime = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("faketime/libfaketime.so.1"))
        .find(|path| path.exists())
        .expect("libfaketime is needed (apt-get install faketime) to skew a worker's clock");
    let faketime = faketime.to_str().unwrap();
    let server = Server::start();
    let url = server.url();
    let queue = Queue::connect(&url, "skew").await.unwrap();
    let ids: Vec<String> = (0..200).map(|i| format!("c{i}")).collect();
    // Due 2 to 4 s from now by the server: a worker trusting a clock 10 minutes ahead would
    // run them all at once; one 10 minutes behind would hold them for 10 minutes.
    schedule(&queue, &ids, |i| {
        Duration::from_millis(2000 + (i as u64 * 10))
    })
    .await;
    let mut conn = server.sync_conn();
    for (skew, name) in [("+10m", "ahead"), ("-10m", "behind")] {
        let env = [
            ("LD_PRELOAD", faketime),
            ("FAKETIME", skew),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ];
        let (mut worker, server_at_ready, local_at_ready) =
            WorkerProcess::start(&url, "skew", &["--window-ms", "5000"], &env);
        let skew_ms = local_at_ready as i64 - server_at_ready as i64;
        assert!(
            skew_ms.abs() > 9 * 60 * 1000,
            "{name}: the worker's clock is not skewed ({skew_ms} ms)"
        );
        if name == "behind" {
            // Reschedule the jobs for the second worker (the first acked them).
            schedule(&queue, &ids, |i| {
                Duration::from_millis(2000 + (i as u64 * 10))
            })
            .await;
        }
        let mut runs = Vec::new();
        while runs.len() < ids.len() {
            let run = worker
                .next_run(support::PATIENCE)
                .expect("the skewed worker's runs");
            // The line is read after the run started: the server's clock now is an upper
            // bound of its start, so a run seen before its due time certainly started early.
            let seen_at = support::server_ms(&mut conn);
            assert!(
                seen_at >= run.due_ms,
                "{name}: {} seen at {seen_at} < due {}",
                run.id,
                run.due_ms
            );
            runs.push(run);
        }
        let (_, stats) = worker.stop();
        assert_eq!(stat(&stats, "early"), 0, "{name}: {stats}");
        assert_eq!(stat(&stats, "acked"), 200, "{name}: {stats}");
        eprintln!("{name}: {stats}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_makes_a_queue_of_one_hash_a_shard_and_runs_its_jobs_once() {
    let server = Server::start();
    let url = server.url();
    let (worker, ..) = WorkerProcess::start(&url, "one", &["--buckets", "1"], &[]);
    // The worker made the queue; a client that sets no count takes the queue's.
    let queue = Queue::connect(&url, "one").await.unwrap();
    assert_eq!(queue.buckets(), 1);
    let ids: Vec<String> = (0..500).map(|i| format!("o{i}")).collect();
    schedule(&queue, &ids, |i| Duration::from_millis(i as u64 % 300)).await;
    support::until("queue drained", async || {
        queue.counts().await.unwrap() == Counts::default()
    })
    .await;
    let (runs, stats) = worker.stop();
    assert_eq!(stat(&stats, "early"), 0, "{stats}");
    let mut seen: Vec<String> = runs.into_iter().map(|run| run.id).collect();
    seen.sort_unstable();
    let mut want = ids;
    want.sort_unstable();
    assert_eq!(seen, want, "each job once");
}
