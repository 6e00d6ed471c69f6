//! Each Lua script on its own against a real `redis-server` (started by the test fixture of
//! `tests/support`): its contract, its fencing, its bound.

use std::time::Duration;

use redis::Value;

use crate::job::{Cancelled, JobState, Rescheduled, When};
use crate::keys::{bucket_of, shard_of};
use crate::queue::Queue;
use crate::scripts::SCRIPTS;

#[path = "../tests/support/mod.rs"]
mod support;

mod batch_lease;
mod fenced_start;
mod layout;
mod payloads;

async fn queue(server: &support::Server, name: &str) -> Queue {
    queue_of(server, name, 8).await
}

/// A queue of 4 shards and `buckets` payload hashes a shard.
async fn queue_of(server: &support::Server, name: &str, buckets: u32) -> Queue {
    Queue::builder(name)
        .shards(4)
        .buckets(buckets)
        .connect(&server.url())
        .await
        .unwrap()
}

/// Runs claim.lua on `shard` with a lead as long as its window (whatever the backlog, the
/// jobs due within `window_ms` are claimed): (server now, [(id, due, token, attempt)],
/// reaped).
async fn claim(
    queue: &Queue,
    shard: u32,
    window_ms: u64,
    lease_ms: u64,
    max: usize,
    max_attempts: u32,
) -> (i64, Vec<crate::claim::ClaimedRow>, u64) {
    let limits = crate::claim::ClaimLimits {
        window_ms,
        lead_ms: window_ms,
        lead_per_job_us: 0,
        lease_ms,
        room: max,
        batch: 1000,
        max_attempts,
        check_ahead_ms: 0,
    };
    claim_with(queue, shard, &limits).await
}

/// Runs claim.lua on `shard` with `limits`: as [`claim`].
async fn claim_with(
    queue: &Queue,
    shard: u32,
    limits: &crate::claim::ClaimLimits,
) -> (i64, Vec<crate::claim::ClaimedRow>, u64) {
    let reply: Value = crate::claim::claim_invocation(queue, shard, limits)
        .invoke_async(&mut queue.conn())
        .await
        .unwrap();
    let reply = crate::claim::parse_claim(reply).expect("a well-formed claim reply");
    assert!(reply.bad.is_empty(), "an entry no handler can be given");
    // The server's clock in ms, as the script compares due times with it.
    (
        (reply.server_ns / 1_000_000) as i64,
        reply.jobs,
        reply.reaped,
    )
}

/// Limits of a worker with a 10 s window, a 1 s lead, `lead_per_job_us` of claims a job of
/// the shard's backlog, and room for 100 jobs: for the tests of how far ahead claims reach.
fn reach_limits(lead_per_job_us: u64) -> crate::claim::ClaimLimits {
    crate::claim::ClaimLimits {
        window_ms: 10_000,
        lead_ms: 1_000,
        lead_per_job_us,
        lease_ms: 30_000,
        room: 100,
        batch: 1000,
        max_attempts: 5,
        check_ahead_ms: 0,
    }
}

/// Checks that a claim with `limits` on shard 0 claims the jobs `want`, in any order.
async fn assert_claims(queue: &Queue, limits: &crate::claim::ClaimLimits, want: &[String]) {
    let (_, claimed, _) = claim_with(queue, 0, limits).await;
    let mut got: Vec<&str> = claimed.iter().map(|job| job.0.as_str()).collect();
    got.sort_unstable();
    let mut want: Vec<&str> = want.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(got, want);
}

/// Runs settle.lua on `shard` for (id, token, action) triples, as a worker with no check
/// ahead: one result per triple.
async fn settle(
    queue: &Queue,
    shard: u32,
    max_attempts: u32,
    triples: &[(&str, u64, &str)],
) -> Vec<i64> {
    settle_ahead(queue, shard, max_attempts, 0, triples).await
}

/// As [`settle`], for a worker that claimed with a check ahead of `check_ahead_ms`.
async fn settle_ahead(
    queue: &Queue,
    shard: u32,
    max_attempts: u32,
    check_ahead_ms: u64,
    triples: &[(&str, u64, &str)],
) -> Vec<i64> {
    let keys = queue.keys(shard);
    let mut invocation = keys.invoke(&SCRIPTS.settle);
    invocation
        .arg(&keys.payload_prefix)
        .arg(max_attempts)
        .arg(1000)
        .arg(60_000)
        .arg(check_ahead_ms);
    for (id, token, action) in triples {
        let bucket = bucket_of(id.as_bytes(), queue.shards(), queue.buckets());
        invocation.arg(*id).arg(*token).arg(*action).arg(bucket);
    }
    invocation.invoke_async(&mut queue.conn()).await.unwrap()
}

fn shard(queue: &Queue, id: &str) -> u32 {
    shard_of(id.as_bytes(), queue.shards())
}

/// `n` ids that fall on the same shard, and that shard.
fn same_shard(queue: &Queue, n: usize) -> (Vec<String>, u32) {
    let s = shard(queue, "id-0");
    (ids_on_shard(queue, "id", s, n), s)
}

/// Schedules `ids`, each with the payload `p`, the `i`th due `delay_ms(i)` from now.
async fn schedule_after(queue: &Queue, ids: &[String], delay_ms: impl Fn(usize) -> u64) {
    let jobs = ids.iter().enumerate().map(|(i, id)| {
        let delay = Duration::from_millis(delay_ms(i));
        (id.as_str(), When::After(delay), &b"p"[..])
    });
    queue.schedule_many(jobs).await.unwrap();
}

/// The first `n` ids `<prefix>-<i>` that fall on shard `s`.
fn ids_on_shard(queue: &Queue, prefix: &str, s: u32, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|id| shard(queue, id) == s)
        .take(n)
        .collect()
}

#[tokio::test]
async fn claim_takes_a_bounded_batch_within_the_window_with_fresh_tokens() {
    let server = support::Server::start();
    let queue = queue(&server, "c").await;
    let ids: Vec<String> = (0..400).map(|i| format!("{i}")).collect();
    // Half due now, half in an hour.
    let jobs = ids.iter().enumerate().map(|(i, id)| {
        let delay = if i % 2 == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs(3600)
        };
        (id.as_str(), When::After(delay), &b"p"[..])
    });
    queue.schedule_many(jobs).await.unwrap();
    let mut claimed = Vec::new();
    let mut tokens = std::collections::HashSet::new();
    for shard in 0..4 {
        loop {
            let (now, jobs, reaped) = claim(&queue, shard, 1000, 30_000, 7, 5).await;
            assert_eq!(reaped, 0);
            assert!(jobs.len() <= 7, "a claim took {} > 7", jobs.len());
            // The jobs of a claim share its token, which no other claim of the shard had.
            if let Some(&(_, _, token, _)) = jobs.first() {
                assert!(jobs.iter().all(|job| job.2 == token), "{jobs:?}");
                assert!(tokens.insert((shard, token)), "token {token} reused");
            }
            for (id, due, _, attempt) in &jobs {
                assert!(
                    *due <= now + 1000,
                    "{id} due {due} beyond the window at {now}"
                );
                assert_eq!(*attempt, 1);
                assert_eq!(shard_of(id.as_bytes(), 4), shard);
                claimed.push(id.clone());
            }
            if jobs.len() < 7 {
                break;
            }
        }
    }
    claimed.sort_by_key(|id| id.parse::<u32>().unwrap());
    let expected: Vec<String> = (0..400).step_by(2).map(|i| format!("{i}")).collect();
    assert_eq!(claimed, expected);
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.claimed, counts.dead), (200, 200, 0));
    assert!(matches!(
        queue.status("0").await.unwrap().unwrap().0,
        JobState::Claimed { attempt: 1, .. }
    ));
}

#[tokio::test]
async fn a_claim_reaches_past_its_lead_only_for_a_backlog_within_the_window() {
    let server = support::Server::start();
    let queue = queue(&server, "l").await;
    // Ten jobs of one shard due in 3 s, and one in 20 s (beyond the window).
    let ids = ids_on_shard(&queue, "l", 0, 11);
    schedule_after(&queue, &ids, |i| if i == 10 { 20_000 } else { 3_000 }).await;
    // A lead of 1 s plus 100 ms a job: the backlog of 10 within the window adds 1 s, short
    // of the 3 s to their due time, so none is claimed yet.
    assert_claims(&queue, &reach_limits(100_000), &[]).await;
    // At 250 ms a job, the backlog brings them within reach: all ten, not the one beyond
    // the window.
    assert_claims(&queue, &reach_limits(250_000), &ids[..10]).await;
}

#[tokio::test]
async fn jobs_spread_over_the_window_are_claimed_no_earlier_than_their_claims_need() {
    let server = support::Server::start();
    let queue = queue(&server, "e").await;
    // Forty jobs of one shard, one every 250 ms over the 10 s window (125 ms, 375 ms, ...).
    let ids = ids_on_shard(&queue, "e", 0, 40);
    schedule_after(&queue, &ids, |i| 125 + 250 * i as u64).await;
    // At 100 ms a job, the jobs due within h take 0.4 h to claim: those due within 1.67 s
    // need their claims begun now (1 s of lead + 0.4 h >= h), the horizon of 2.5 s rounds
    // that to 2 s; the later ones have time. One count over the whole window (40 jobs, 4 s
    // beside the lead) would claim the first 20, as if they were due at once.
    assert_claims(&queue, &reach_limits(100_000), &ids[..8]).await;
}

#[tokio::test]
async fn a_claimed_batch_shares_one_lease_a_lease_after_its_latest_due_time() {
    let server = support::Server::start();
    let queue = queue(&server, "b").await;
    // Two jobs of one shard, due now and in 5 s, claimed together (a window of 10 s).
    let first = "b-0";
    let s = shard(&queue, first);
    let second = (1..)
        .map(|i| format!("b-{i}"))
        .find(|id| shard(&queue, id) == s)
        .unwrap();
    queue.schedule(first, Duration::ZERO, b"x").await.unwrap();
    queue
        .schedule(&second, Duration::from_secs(5), b"x")
        .await
        .unwrap();
    let (_, jobs, _) = claim(&queue, s, 10_000, 30_000, 10, 5).await;
    assert_eq!(jobs.len(), 2);
    let latest = jobs.iter().map(|job| job.1).max().unwrap();
    assert!(latest >= jobs[0].1 + 4_000, "{jobs:?}");
    // Both leases end 30 s after the later due time, the first job's too.
    for id in [first, second.as_str()] {
        assert_eq!(
            lease_until(queue.status(id).await.unwrap().unwrap().0),
            crate::job::unix_ms(latest + 30_000),
            "{id}"
        );
    }
}

fn lease_until(state: JobState) -> std::time::SystemTime {
    match state {
        JobState::Claimed { lease_until, .. } => lease_until,
        other => panic!("not claimed: {other:?}"),
    }
}

#[tokio::test]
async fn extend_is_fenced_by_the_token_and_never_revives_a_lease() {
    let server = support::Server::start();
    let queue = queue(&server, "x").await;
    queue.schedule("e", Duration::ZERO, b"x").await.unwrap();
    let se = shard(&queue, "e");
    let (_, jobs, _) = claim(&queue, se, 0, 1_000, 10, 5).await;
    let token = jobs.iter().find(|j| j.0 == "e").unwrap().2;
    let first = lease_until(queue.status("e").await.unwrap().unwrap().0);
    let extend =
        |token, lease| crate::lease::extend(&queue, se, "e", token, Duration::from_secs(lease));
    // Another token is refused and leaves the lease as it was.
    assert!(!extend(token + 1, 60).await.unwrap());
    assert_eq!(
        lease_until(queue.status("e").await.unwrap().unwrap().0),
        first
    );
    // The live token moves the expiry to a minute past the server's clock.
    let before = queue.server_time().await.unwrap();
    assert!(extend(token, 60).await.unwrap());
    let extended = lease_until(queue.status("e").await.unwrap().unwrap().0);
    // (The script counts whole milliseconds.)
    assert!(
        extended + Duration::from_millis(1) > before + Duration::from_secs(60),
        "{extended:?}"
    );
    // A shorter extension never shortens it.
    assert!(extend(token, 1).await.unwrap());
    assert_eq!(
        lease_until(queue.status("e").await.unwrap().unwrap().0),
        extended
    );
    // Once acked (or cancelled, reaped), the token extends nothing and revives nothing.
    assert_eq!(settle(&queue, se, 5, &[("e", token, "a")]).await, vec![1]);
    assert!(!extend(token, 60).await.unwrap());
    assert_eq!(queue.status("e").await.unwrap(), None);
    assert_eq!(queue.counts().await.unwrap().claimed, 0);
}

#[tokio::test]
async fn settle_is_fenced_by_the_token_and_retries_then_dead_letters() {
    let server = support::Server::start();
    let queue = queue(&server, "f").await;
    queue.schedule("a", Duration::ZERO, b"x").await.unwrap();
    queue.schedule("b", Duration::ZERO, b"y").await.unwrap();
    let (sa, sb) = (shard(&queue, "a"), shard(&queue, "b"));
    let (_, jobs, _) = claim(&queue, sa, 0, 30_000, 10, 2).await;
    let token_a = jobs.iter().find(|j| j.0 == "a").unwrap().2;
    // A wrong token is refused and changes nothing; the right one acks, once.
    assert_eq!(
        settle(&queue, sa, 2, &[("a", token_a + 100, "a")]).await,
        vec![0]
    );
    assert_eq!(settle(&queue, sa, 2, &[("a", token_a, "a")]).await, vec![1]);
    assert_eq!(settle(&queue, sa, 2, &[("a", token_a, "a")]).await, vec![0]);
    assert_eq!(queue.status("a").await.unwrap(), None);
    // The ack removed its payload field (in the hash the client named): the id is free.
    assert!(
        queue
            .schedule("a", Duration::from_secs(60), b"x")
            .await
            .unwrap()
    );
    // b fails: retried with backoff (1 s base), then dead after 2 attempts.
    let (_, jobs, _) = claim(&queue, sb, 0, 30_000, 10, 2).await;
    let token_b = jobs.iter().find(|j| j.0 == "b").unwrap().2;
    assert_eq!(settle(&queue, sb, 2, &[("b", token_b, "f")]).await, vec![1]);
    let JobState::Pending { attempts: 1, due } = queue.status("b").await.unwrap().unwrap().0 else {
        panic!("b should be pending after one failure");
    };
    let (now, jobs, _) = claim(&queue, sb, 0, 30_000, 10, 2).await;
    assert!(
        jobs.iter().all(|j| j.0 != "b"),
        "b claimed before its backoff"
    );
    let due_ms = due
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(due_ms >= now, "backoff due {due_ms} not after {now}");
    let (_, jobs, _) = claim(&queue, sb, 5_000, 30_000, 10, 2).await;
    let (_, _, token_b2, attempt) = jobs.into_iter().find(|j| j.0 == "b").unwrap();
    assert_eq!(attempt, 2);
    assert_eq!(
        settle(&queue, sb, 2, &[("b", token_b, "f")]).await,
        vec![0],
        "old token"
    );
    assert_eq!(
        settle(&queue, sb, 2, &[("b", token_b2, "f")]).await,
        vec![2]
    );
    assert!(matches!(
        queue.status("b").await.unwrap().unwrap().0,
        JobState::Dead { attempts: 2, .. }
    ));
    // A dead job keeps its id: scheduling it again is refused until it is cancelled.
    assert!(!queue.schedule("b", Duration::ZERO, b"z").await.unwrap());
    assert_eq!(queue.cancel("b").await.unwrap(), Cancelled::Dead);
    assert!(queue.schedule("b", Duration::ZERO, b"z").await.unwrap());
}

#[tokio::test]
async fn release_gives_back_unrun_without_counting_the_attempt() {
    let server = support::Server::start();
    let queue = queue(&server, "r").await;
    queue
        .schedule("j", Duration::from_secs(2), b"x")
        .await
        .unwrap();
    let s = shard(&queue, "j");
    let (_, jobs, _) = claim(&queue, s, 5_000, 30_000, 10, 5).await;
    let (_, due, token, _) = jobs[0].clone();
    assert_eq!(settle(&queue, s, 5, &[("j", token, "r")]).await, vec![1]);
    let JobState::Pending {
        due: back,
        attempts,
    } = queue.status("j").await.unwrap().unwrap().0
    else {
        panic!("not pending after release");
    };
    assert_eq!(attempts, 0);
    assert_eq!(
        back.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
        due
    );
}

#[tokio::test]
async fn an_expired_lease_is_reaped_back_to_due_then_dead_after_its_attempts() {
    let server = support::Server::start();
    let queue = queue(&server, "e").await;
    queue.schedule("k", Duration::ZERO, b"x").await.unwrap();
    let s = shard(&queue, "k");
    let (_, jobs, _) = claim(&queue, s, 0, 1, 10, 2).await; // a 1 ms lease
    let old = jobs[0].2;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (_, jobs, reaped) = claim(&queue, s, 0, 1, 10, 2).await;
    assert_eq!(reaped, 1);
    let (_, _, token, attempt) = jobs[0].clone();
    assert_eq!(attempt, 2);
    assert!(token > old);
    // The zombie's ack is refused.
    assert_eq!(settle(&queue, s, 2, &[("k", old, "a")]).await, vec![0]);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (_, jobs, reaped) = claim(&queue, s, 0, 1, 10, 2).await;
    assert_eq!((reaped, jobs.len()), (1, 0));
    assert!(matches!(
        queue.status("k").await.unwrap().unwrap().0,
        JobState::Dead { attempts: 2, .. }
    ));
}

#[tokio::test]
async fn cancel_and_reschedule_report_the_state_they_found() {
    let server = support::Server::start();
    let queue = queue(&server, "x").await;
    assert_eq!(queue.cancel("none").await.unwrap(), Cancelled::NotFound);
    assert_eq!(
        queue
            .reschedule("none", Duration::ZERO, None)
            .await
            .unwrap(),
        Rescheduled::NotFound
    );
    assert_eq!(queue.status("none").await.unwrap(), None);
    queue
        .schedule("p", Duration::from_secs(100), b"x")
        .await
        .unwrap();
    assert_eq!(queue.cancel("p").await.unwrap(), Cancelled::Pending);
    assert_eq!(queue.status("p").await.unwrap(), None);
    // Claimed well ahead of its due time (a window of an hour).
    queue
        .schedule("q", Duration::from_secs(100), b"x")
        .await
        .unwrap();
    let s = shard(&queue, "q");
    let (_, jobs, _) = claim(&queue, s, 3_600_000, 30_000, 10, 5).await;
    let token = jobs[0].2;
    assert_eq!(
        queue
            .reschedule("q", Duration::from_secs(200), Some(b"new"))
            .await
            .unwrap(),
        Rescheduled::Claimed
    );
    assert_eq!(
        settle(&queue, s, 5, &[("q", token, "a")]).await,
        vec![0],
        "revoked claim acked"
    );
    let (state, payload) = queue.status("q").await.unwrap().unwrap();
    assert_eq!(payload, b"new");
    assert!(matches!(state, JobState::Pending { attempts: 0, .. }));
    assert_eq!(
        queue
            .reschedule("q", Duration::from_secs(100), None)
            .await
            .unwrap(),
        Rescheduled::Pending
    );
    let (_, jobs, _) = claim(&queue, s, 3_600_000, 30_000, 10, 5).await;
    assert_eq!(queue.cancel("q").await.unwrap(), Cancelled::Claimed);
    assert_eq!(
        settle(&queue, s, 5, &[("q", jobs[0].2, "a")]).await,
        vec![0],
        "cancelled claim acked"
    );
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.claimed, counts.dead), (0, 0, 0));
}

#[tokio::test]
async fn user_mistakes_are_errors() {
    let server = support::Server::start();
    let queue = queue(&server, "m").await;
    assert!(matches!(
        queue.schedule("", Duration::ZERO, b"").await,
        Err(crate::Error::InvalidId(_))
    ));
    let long = "x".repeat(crate::MAX_ID_LEN + 1);
    assert!(matches!(
        queue.cancel(&long).await,
        Err(crate::Error::InvalidId(_))
    ));
    assert!(matches!(
        Queue::connect(&server.url(), "a{b").await,
        Err(crate::Error::InvalidName(_))
    ));
    assert!(matches!(
        Queue::builder("m")
            .shards(8)
            .buckets(8)
            .connect(&server.url())
            .await,
        Err(crate::Error::LayoutMismatch {
            stored: (4, 8),
            configured: (8, 8)
        })
    ));
    assert!(matches!(
        crate::Worker::builder()
            .batch(0)
            .start(queue.clone(), |_| async { Ok::<(), ()>(()) }),
        Err(crate::Error::InvalidConfig(_))
    ));
    // A check ahead must leave the claim, `lead` ahead, time to come first.
    assert!(matches!(
        crate::Worker::builder()
            .lead(Duration::from_secs(1))
            .check_ahead(Duration::from_secs(1))
            .start(queue.clone(), |_| async { Ok::<(), ()>(()) }),
        Err(crate::Error::InvalidConfig(
            "check_ahead must be shorter than lead"
        ))
    ));
}

/// A script's call loads the script when the server has none (a server restarted without
/// its scripts, a new cluster node: here `SCRIPT FLUSH`) and runs it.
#[tokio::test]
async fn a_call_loads_its_script_on_a_server_that_has_none() {
    let server = support::Server::start();
    let queue = queue(&server, "n").await;
    queue
        .schedule("n-1", Duration::from_secs(60), b"kept")
        .await
        .unwrap();
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut queue.conn())
        .await
        .unwrap();
    let (state, payload) = queue.status("n-1").await.unwrap().expect("scheduled");
    assert!(matches!(state, JobState::Pending { attempts: 0, .. }));
    assert_eq!(payload, b"kept");
    // Loaded now: the next call finds it.
    assert!(queue.status("n-2").await.unwrap().is_none());
}

/// How many calls of `command` (lower case) the server ran, scripts' included, since its
/// statistics were reset.
fn calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// Resets the server's statistics (`calls` counts from here).
fn reset_stats(conn: &mut redis::Connection) {
    let () = redis::cmd("CONFIG").arg("RESETSTAT").query(conn).unwrap();
}
