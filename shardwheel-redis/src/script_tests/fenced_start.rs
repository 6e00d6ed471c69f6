//! start.lua against a real `redis-server`: the fenced start (token, lease, due time), that
//! it writes nothing, and how cancel and reschedule revoke a claim and tell whether its
//! start may have passed.

use std::time::Duration;

use super::{claim, queue, settle, shard, support};
use crate::job::{Cancelled, JobState, Rescheduled};
use crate::queue::Queue;
use crate::start::StartRow;

/// Runs start.lua for `jobs` (shard, id, token, due ms, attempt) claimed with leases of
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

/// How many ZMSCORE calls the server ran (scripts' included) since its statistics were reset.
fn zmscore_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_zmscore:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
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
    let wrong = (a.0, a.1, a.2 + 1, a.3, a.4);
    let aof = aof_size(&mut conn);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
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
    assert_eq!(zmscore_calls(&mut conn), 0);
    assert_eq!(settle(&queue, a.0, 5, &[("a", a.2, "a")]).await, vec![1]);
    // Due longer ago than the lease it was claimed with, a job starts only if its lease was
    // extended: the lease set decides.
    let x = claimed(&queue, "x", Duration::ZERO, 1).await;
    let extended = crate::lease::extend(&queue, x.0, "x", x.2, Duration::from_secs(60));
    assert!(extended.await.unwrap());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(start(&queue, 1, &[x]).await, vec![1]);
    assert_eq!(zmscore_calls(&mut conn), 1);
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
