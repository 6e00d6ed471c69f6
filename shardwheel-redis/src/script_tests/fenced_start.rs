//! start.lua against a real `redis-server`: the fenced start (token, lease, due time), that
//! it writes nothing, and how cancel and reschedule revoke a claim and tell whether its
//! start may have passed.

use std::time::Duration;

use super::{
    calls, claim, claim_with, queue, reset_stats, same_shard, settle, settle_ahead, shard, support,
};
use crate::job::{Cancelled, JobState, Rescheduled};
use crate::queue::Queue;
use crate::start::StartRow;

/// Runs start.lua for `jobs` (shard, id, token, start ms, attempt) claimed with leases of
/// `lease_ms`, as a worker calls it: one result per job.
async fn start(queue: &Queue, lease_ms: u64, jobs: &[StartRow<'_>]) -> Vec<i64> {
    let invocation = crate::start::invocation(queue, lease_ms, jobs);
    let reply: Vec<i64> = invocation.invoke_async(&mut queue.conn()).await.unwrap();
    reply[2..].to_vec()
}

/// Schedules `id` due after `delay` and claims it (window an hour): how a start check
/// names it.
async fn claimed(
    queue: &Queue,
    id: &'static str,
    delay: Duration,
    lease_ms: u64,
) -> StartRow<'static> {
    queue.schedule(id, delay, b"x").await.unwrap();
    let s = shard(queue, id);
    let (_, jobs, _) = claim(queue, s, 3_600_000, lease_ms, 10, 5).await;
    let row = jobs.iter().find(|j| j.0 == id).unwrap();
    (s, id, row.2, row.1, row.3)
}

/// The server's AOF size: what it has appended since it started.
fn aof_size(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("persistence").query(conn).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("aof_current_size:"))
        .and_then(|size| size.trim().parse().ok())
        .expect("INFO persistence names aof_current_size")
}

#[tokio::test]
async fn start_is_fenced_by_token_lease_and_due_time_and_writes_nothing() {
    let server = support::Server::start();
    let mut conn = server.sync_conn();
    // A wrong token is revoked, a job not yet due waits, the live token starts (twice:
    // a repeated call), and the started record still settles. On a single server a call
    // holds the jobs of several shards, each job's result in its place.
    let queue = queue(&server, "s").await;
    let a = claimed(&queue, "a", Duration::ZERO, 30_000).await;
    let later = claimed(&queue, "later", Duration::from_secs(600), 30_000).await;
    let other_id = ["b", "c", "d", "e", "f", "g", "h"]
        .into_iter()
        .find(|id| shard(&queue, id) != a.0)
        .unwrap();
    let other = claimed(&queue, other_id, Duration::ZERO, 30_000).await;
    // A token no claim of the shard issued (a claim's jobs are checked by their batch's
    // token: a caller names only the claims it was given).
    let wrong = (a.0, a.1, a.2 + 1_000_000, a.3, a.4);
    let aof = aof_size(&mut conn);
    reset_stats(&mut conn);
    assert_eq!(start(&queue, 30_000, &[wrong]).await, vec![0]);
    assert_eq!(start(&queue, 30_000, &[later]).await, vec![2]);
    assert_eq!(start(&queue, 30_000, &[a]).await, vec![1]);
    assert_eq!(start(&queue, 30_000, &[wrong, a]).await, vec![0, 1]);
    assert_eq!(
        start(&queue, 30_000, &[other, wrong, a]).await,
        vec![1, 0, 1]
    );
    // With a job not yet due in the call, each job's own due time decides.
    assert_eq!(
        start(&queue, 30_000, &[a, later, other, wrong]).await,
        vec![1, 2, 1, 0]
    );
    assert_eq!(
        aof_size(&mut conn),
        aof,
        "a start check wrote to the AOF (an fsync with appendfsync always)"
    );
    assert!(matches!(
        queue.status("a").await.unwrap().unwrap().0,
        JobState::Claimed { attempt: 1, .. }
    ));
    // Due less than its lease ago, a job's lease cannot have ended: the lease set is not read.
    assert_eq!(calls(&mut conn, "zmscore"), 0);
    assert_eq!(settle(&queue, a.0, 5, &[("a", a.2, "a")]).await, vec![1]);
    // Due longer ago than the lease it was claimed with, a job starts only if its lease was
    // extended: the lease set decides.
    let x = claimed(&queue, "x", Duration::ZERO, 1).await;
    let extended = crate::lease::extend(&queue, x.0, "x", x.2, Duration::from_secs(60));
    assert!(extended.await.unwrap());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(start(&queue, 1, &[x]).await, vec![1]);
    assert_eq!(calls(&mut conn, "zmscore"), 1);
    // A claim whose lease expired does not start (a worker stalled past it), and the next
    // claim takes it back with its attempt counted.
    let r = claimed(&queue, "r", Duration::ZERO, 1).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(start(&queue, 1, &[r]).await, vec![0]);
    let (_, jobs, reaped) = claim(&queue, r.0, 0, 30_000, 10, 5).await;
    assert_eq!(reaped, 1);
    assert_eq!((jobs[0].0.as_str(), jobs[0].3), ("r", 2));
}

#[tokio::test]
async fn cancel_and_reschedule_revoke_a_claim_and_tell_by_its_due_time_whether_it_may_run() {
    let server = support::Server::start();
    let queue = queue(&server, "s").await;
    // Due in ten minutes: no start can have passed, the claim is revoked. Due now: a start
    // may have passed (checked or not), so the answer is Started, and a check after the
    // call is refused all the same.
    for (id, delay, checked) in [
        ("b", Duration::from_secs(600), false),
        ("c", Duration::ZERO, true),
        ("d", Duration::ZERO, false),
    ] {
        let due = delay.is_zero();
        let job = claimed(&queue, id, delay, 30_000).await;
        if checked {
            assert_eq!(start(&queue, 30_000, &[job]).await, vec![1]);
        }
        let found = queue.cancel(id).await.unwrap();
        let cancelled = if due {
            Cancelled::Started
        } else {
            Cancelled::Claimed
        };
        assert_eq!(found, cancelled, "{id}");
        assert_eq!(found.runs(), due);
        assert_eq!(start(&queue, 30_000, &[job]).await, vec![0]);
        assert_eq!(queue.status(id).await.unwrap(), None);
        let job = claimed(&queue, id, delay, 30_000).await;
        if checked {
            assert_eq!(start(&queue, 30_000, &[job]).await, vec![1]);
        }
        let found = queue.reschedule(id, Duration::from_secs(600), None).await;
        let rescheduled = if due {
            Rescheduled::Started
        } else {
            Rescheduled::Claimed
        };
        assert_eq!(found.unwrap(), rescheduled, "{id}");
        assert_eq!(start(&queue, 30_000, &[job]).await, vec![0]);
        assert!(matches!(
            queue.status(id).await.unwrap().unwrap().0,
            JobState::Pending { attempts: 0, .. }
        ));
        queue.cancel(id).await.unwrap();
    }
}

#[tokio::test]
async fn a_batch_on_time_starts_at_once_and_one_with_a_revoked_job_is_checked_job_by_job() {
    let server = support::Server::start();
    let mut conn = server.sync_conn();
    let queue = queue(&server, "s").await;
    let (ids, s) = same_shard(&queue, 28);
    let (ids, late) = ids.split_at(20);
    for id in ids {
        queue.schedule(id, Duration::ZERO, b"x").await.unwrap();
    }
    // Two batches of ten, all due: how a worker on time checks them (ten jobs a batch, so
    // the call names the batches: `start::WHOLE`).
    let (_, first, _) = claim(&queue, s, 3_600_000, 30_000, 10, 5).await;
    let (_, second, _) = claim(&queue, s, 3_600_000, 30_000, 10, 5).await;
    assert_ne!(first[0].2, second[0].2);
    let rows = |jobs: &[crate::claim::ClaimedRow]| -> Vec<(u32, String, u64, i64, u32)> {
        jobs.iter()
            .map(|j| (s, j.0.clone(), j.2, j.1, j.3))
            .collect()
    };
    let both: Vec<_> = rows(&first).into_iter().chain(rows(&second)).collect();
    let both: Vec<StartRow> = both
        .iter()
        .map(|r| (r.0, r.1.as_str(), r.2, r.3, r.4))
        .collect();
    let first = &both[..10];
    // Intact batches: one read of their counts and marks, none of the jobs' records.
    reset_stats(&mut conn);
    assert_eq!(start(&queue, 30_000, &both).await, vec![1; 20]);
    assert_eq!(calls(&mut conn, "hmget"), 1);
    // The holder's own ack leaves its batch intact for the rest.
    let ack = [(first[0].1, first[0].2, "a")];
    assert_eq!(settle(&queue, s, 5, &ack).await, vec![1]);
    // A cancel and a reschedule of due jobs of the first batch: both may have started (a
    // check may have passed), every later check of them is refused, the rest of their batch
    // starts (its records read), and the second batch is still read as a whole.
    assert_eq!(queue.cancel(first[1].1).await.unwrap(), Cancelled::Started);
    let later = Duration::from_secs(600);
    let rescheduled = queue.reschedule(first[2].1, later, None).await.unwrap();
    assert_eq!(rescheduled, Rescheduled::Started);
    reset_stats(&mut conn);
    let mut expected = vec![0, 0];
    expected.extend([1; 17]);
    assert_eq!(start(&queue, 30_000, &both[1..]).await, expected);
    assert_eq!(calls(&mut conn, "hmget"), 2);
    // The first batch's other jobs go (cancels, the holder's last ack): the batch goes,
    // mark and count, and its revoked jobs are still refused.
    for row in &first[3..9] {
        assert_eq!(queue.cancel(row.1).await.unwrap(), Cancelled::Started);
    }
    let ack = [(first[9].1, first[9].2, "a")];
    assert_eq!(settle(&queue, s, 5, &ack).await, vec![1]);
    assert_eq!(start(&queue, 30_000, &first[1..9]).await, vec![0; 8]);
    // A batch due longer ago than the lease it was claimed with: its lease expired (not yet
    // taken back), none of its jobs starts, though the batch is intact.
    for id in late {
        queue.schedule(id, Duration::ZERO, b"x").await.unwrap();
    }
    let (_, jobs, _) = claim(&queue, s, 0, 1, 10, 5).await;
    assert_eq!(jobs.len(), late.len());
    let rows: Vec<StartRow> = jobs
        .iter()
        .map(|j| (s, j.0.as_str(), j.2, j.1, j.3))
        .collect();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(start(&queue, 1, &rows).await, vec![0; 8]);
}

/// A claim with a check ahead writes the job's start time, its due time less the check
/// ahead, into its record: the start check passes from then on and a cancel from then on
/// says the run may have begun, both before the due time; a release puts the job back at
/// its due time, not its start time.
#[tokio::test]
async fn a_check_ahead_moves_the_start_and_the_revoke_not_the_due_time() {
    let server = support::Server::start();
    let queue = queue(&server, "ahead").await;
    let (ids, s) = same_shard(&queue, 3);
    for id in &ids {
        queue
            .schedule(id, Duration::from_secs(3), b"x")
            .await
            .unwrap();
    }
    // Their start time, 10 s before a due time 3 s ahead, has come.
    let limits = crate::claim::ClaimLimits {
        window_ms: 5_000,
        lead_ms: 5_000,
        lead_per_job_us: 0,
        lease_ms: 30_000,
        room: 10,
        batch: 1000,
        max_attempts: 5,
        check_ahead_ms: 10_000,
    };
    let (now, jobs, _) = claim_with(&queue, s, &limits).await;
    assert_eq!(jobs.len(), 3);
    let row = |k: usize| {
        let (id, due, token, attempt) = &jobs[k];
        (s, id.as_str(), *token, due - 10_000, *attempt)
    };
    assert!(
        jobs.iter().all(|job| job.1 > now),
        "claimed before their due time"
    );
    assert_eq!(start(&queue, 30_000, &[row(0)]).await, [1], "started ahead");
    assert_eq!(queue.cancel(&jobs[1].0).await.unwrap(), Cancelled::Started);
    let (id, due, token, _) = &jobs[2];
    let release = [(id.as_str(), *token, "r")];
    assert_eq!(settle_ahead(&queue, s, 5, 10_000, &release).await, [1]);
    let JobState::Pending { due: back, .. } = queue.status(id).await.unwrap().unwrap().0 else {
        panic!("not pending after its release");
    };
    let back = back.duration_since(std::time::UNIX_EPOCH).unwrap();
    assert_eq!(back.as_millis() as i64, *due, "released to its due time");
}
