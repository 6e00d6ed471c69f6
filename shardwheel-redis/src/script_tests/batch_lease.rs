//! A claimed batch's lease: one entry of the lease set a claim (token -> expiry), its ids
//! in one list, a count of its records; the entry, list and count go with the batch's last
//! record (ack, cancel, reschedule: `lua/held.lua`), and the reaper takes back only the
//! jobs still under the expired claim.

use std::time::Duration;

use redis::Commands;

use super::{claim, queue, same_shard, settle, shard, support};
use crate::job::{Cancelled, JobState, Rescheduled, When};
use crate::queue::Queue;

/// What a shard keeps of its claimed batches: its lease set (token -> expiry), its held
/// hash (token -> records left, "x" + token -> 1 once a job of it was revoked), and the ids
/// listed for one token.
#[derive(Debug, PartialEq)]
struct LeaseState(Vec<(String, i64)>, Vec<(String, i64)>, Vec<String>);

/// The shard's [`LeaseState`], with the ids listed for `token`.
fn lease_state(conn: &mut redis::Connection, queue: &Queue, s: u32, token: u64) -> LeaseState {
    let keys = queue.keys(s);
    let leases: Vec<(String, i64)> = conn.zrange_withscores(&keys.lease, 0, -1).unwrap();
    let held: Vec<(String, i64)> = conn.hgetall(&keys.held).unwrap();
    let ids: Vec<String> = conn
        .lrange(format!("{}:{token}", keys.held), 0, -1)
        .unwrap();
    LeaseState(leases, held, ids)
}

#[tokio::test]
async fn a_claimed_batch_has_one_lease_entry_that_goes_with_its_last_record() {
    let server = support::Server::start();
    let queue = queue(&server, "b").await;
    let mut conn = server.sync_conn();
    let (ids, s) = same_shard(&queue, 4);
    for (k, id) in ids.iter().enumerate() {
        let due = When::After(Duration::from_millis(100 * k as u64));
        queue.schedule(id, due, b"p").await.unwrap();
    }
    let (_, jobs, _) = claim(&queue, s, 3_600_000, 30_000, 10, 5).await;
    assert_eq!(jobs.len(), 4);
    let token = jobs[0].2;
    let LeaseState(leases, held, listed) = lease_state(&mut conn, &queue, s, token);
    // One entry for the batch, at its lease expiry; its four ids listed, in due order.
    let JobState::Claimed { lease_until, .. } = queue.status(&ids[0]).await.unwrap().unwrap().0
    else {
        panic!("not claimed");
    };
    let expiry = lease_until.duration_since(std::time::UNIX_EPOCH).unwrap();
    assert_eq!(leases, vec![(token.to_string(), expiry.as_millis() as i64)]);
    assert_eq!(held, vec![(token.to_string(), 4)]);
    assert_eq!(listed, ids);
    // Two acks: the batch lives on with two records, unmarked.
    let acks = [(ids[0].as_str(), token, "a"), (ids[1].as_str(), token, "a")];
    assert_eq!(settle(&queue, s, 5, &acks).await, vec![1, 1]);
    let LeaseState(leases, held, listed) = lease_state(&mut conn, &queue, s, token);
    assert_eq!(
        (leases.len(), held, listed.len()),
        (1, vec![(token.to_string(), 2)], 4)
    );
    // A cancel: one record left, the batch marked as revoked.
    assert_eq!(queue.cancel(&ids[2]).await.unwrap(), Cancelled::Claimed);
    let LeaseState(leases, mut held, listed) = lease_state(&mut conn, &queue, s, token);
    held.sort();
    let marked = vec![(token.to_string(), 1), (format!("x{token}"), 1)];
    assert_eq!((leases.len(), held, listed.len()), (1, marked, 4));
    // The last record goes with a reschedule: nothing of the batch is left, its mark
    // included.
    let later = When::After(Duration::from_secs(60));
    assert_eq!(
        queue.reschedule(&ids[3], later, None).await.unwrap(),
        Rescheduled::Claimed
    );
    assert_eq!(
        lease_state(&mut conn, &queue, s, token),
        LeaseState(vec![], vec![], vec![])
    );
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.claimed), (1, 0));
}

#[tokio::test]
async fn the_reaper_takes_back_only_the_jobs_still_under_the_expired_claim() {
    let server = support::Server::start();
    let queue = queue(&server, "r").await;
    let mut conn = server.sync_conn();
    let (ids, s) = same_shard(&queue, 2);
    for id in &ids {
        queue.schedule(id, Duration::ZERO, b"p").await.unwrap();
    }
    // Both under a 200 ms lease; the first is revoked (rescheduled to now) and claimed
    // again under a long lease before the first lease ends.
    let (_, jobs, _) = claim(&queue, s, 0, 200, 10, 5).await;
    let old = jobs[0].2;
    queue
        .reschedule(&ids[0], Duration::ZERO, None)
        .await
        .unwrap();
    let (_, jobs, _) = claim(&queue, s, 0, 30_000, 10, 5).await;
    assert_eq!((jobs.len(), jobs[0].0.as_str()), (1, ids[0].as_str()));
    let again = jobs[0].2;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The expired batch still lists both: only the second is taken back (and claimed anew).
    assert_eq!(lease_state(&mut conn, &queue, s, old).2, ids);
    let (_, jobs, reaped) = claim(&queue, s, 0, 30_000, 10, 5).await;
    assert_eq!(reaped, 1);
    assert_eq!(jobs.len(), 1);
    assert_eq!((jobs[0].0.as_str(), jobs[0].3), (ids[1].as_str(), 2));
    // Still under its second claim: its ack passes, its attempt was not counted.
    assert_eq!(
        settle(&queue, s, 5, &[(&ids[0], again, "a")]).await,
        vec![1]
    );
    // Nothing of the expired batch is left.
    let LeaseState(leases, held, listed) = lease_state(&mut conn, &queue, s, old);
    assert!(
        leases.iter().all(|(t, _)| *t != old.to_string()),
        "{leases:?}"
    );
    // Neither its count nor its mark (the reschedule revoked one of its jobs).
    let mark = format!("x{old}");
    assert!(
        held.iter()
            .all(|(t, _)| *t != old.to_string() && *t != mark),
        "{held:?}"
    );
    assert!(listed.is_empty());
}

#[tokio::test]
async fn a_lease_entry_of_an_earlier_version_is_taken_back() {
    // Before leases were one entry a batch, the lease set held one entry a job (id ->
    // expiry): a queue upgraded with jobs claimed must not lose them.
    let server = support::Server::start();
    let queue = queue(&server, "u").await;
    let mut conn = server.sync_conn();
    queue.schedule("old", Duration::ZERO, b"p").await.unwrap();
    let s = shard(&queue, "old");
    let keys = queue.keys(s);
    let now = support::server_ms(&mut conn) as i64;
    // What a claim of that version left: out of due, a lease under its id, a record.
    let () = conn.zrem(&keys.due, "old").unwrap();
    let () = conn.zadd(&keys.lease, "old", now - 10).unwrap();
    let () = conn
        .hset(&keys.tok, "old", format!("7:{}:1", now - 20))
        .unwrap();
    let (_, jobs, reaped) = claim(&queue, s, 0, 30_000, 10, 5).await;
    assert_eq!(reaped, 1);
    assert_eq!((jobs.len(), jobs[0].0.as_str(), jobs[0].3), (1, "old", 2));
    let leases: Vec<String> = conn.zrange(&keys.lease, 0, -1).unwrap();
    assert_eq!(leases, vec![jobs[0].2.to_string()]);
}
