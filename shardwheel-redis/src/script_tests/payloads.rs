//! Where a job's payload is: in the payload hash the client computes (`keys::bucket_of`),
//! stored once by the schedule, found there by reschedule, status and cancel, and read
//! there after a claim, which returns no payloads.

use std::time::Duration;

use super::{calls, claim, ids_on_shard, queue, queue_of, reset_stats, shard, support};
use crate::job::{Cancelled, JobState, Rescheduled, When};
use crate::keys::{ShardKeys, bucket_of, hash};
use crate::scripts::{Call, SCRIPTS};

#[tokio::test]
async fn schedule_stores_once_in_the_bucket_rust_computes_and_due_by_server_time() {
    schedule_stores_once(8).await;
}

/// With one payload hash a shard, a call's jobs are looked up and stored together (one
/// `HMGET`, one `HSET`): the same contract.
#[tokio::test]
async fn schedule_into_one_hash_a_shard_stores_once_and_due_by_server_time() {
    schedule_stores_once(1).await;
}

/// Schedules into a queue of 4 shards and `buckets` payload hashes a shard.
async fn schedule_stores_once(buckets: u32) {
    let server = support::Server::start();
    let queue = queue_of(&server, "s", buckets).await;
    let mut conn = server.sync_conn();
    let before = support::server_ms(&mut conn);
    let ids: Vec<String> = (0..200).map(|i| format!("job-{i}")).collect();
    let jobs = ids.iter().map(|id| {
        (
            id.as_str(),
            When::After(Duration::from_secs(10)),
            id.as_bytes(),
        )
    });
    reset_stats(&mut conn);
    support::schedule_new(&queue, jobs).await;
    let after = support::server_ms(&mut conn);
    // One call a shard (200 jobs, 4 shards): in one hash a shard, a lookup and a write a
    // call; in many, a set-if-absent a job.
    let expected = if buckets == 1 { (0, 4, 4) } else { (200, 0, 0) };
    let made = ["hsetnx", "hmget", "hset"].map(|command| calls(&mut conn, command));
    assert_eq!((made[0], made[1], made[2]), expected);
    for id in &ids {
        // The payload is where Rust's hash says (the client names the hash to schedule),
        // and status, to which the client names the same hash, finds it there.
        let found = queue.status(id).await.unwrap().map(|(_, payload)| payload);
        assert_eq!(found.as_deref(), Some(id.as_bytes()), "status of {id}");
        let h = hash(id.as_bytes());
        let keys = ShardKeys::new("s", h % 4);
        let bucket = format!("{}{}", keys.payload_prefix, (h / 4) % buckets);
        let payload: Option<String> = redis::cmd("HGET")
            .arg(&bucket)
            .arg(id)
            .query(&mut conn)
            .unwrap();
        assert_eq!(
            payload.as_deref(),
            Some(id.as_str()),
            "{id} not in {bucket}"
        );
        let due: f64 = redis::cmd("ZSCORE")
            .arg(&keys.due)
            .arg(id)
            .query(&mut conn)
            .unwrap();
        assert!(
            due as u64 >= before + 10_000 && due as u64 <= after + 10_000,
            "{id} due {due}"
        );
    }
    // Idempotent on the id: the payload and due time stay as they were.
    assert!(
        !queue
            .schedule("job-7", Duration::ZERO, b"other")
            .await
            .unwrap()
    );
    let (state, payload) = queue.status("job-7").await.unwrap().unwrap();
    assert_eq!(payload, b"job-7");
    assert!(matches!(state, JobState::Pending { attempts: 0, .. }));
    // A duplicate inside one batch: only the first is stored, even when a later one is due
    // sooner (the batch is sent sorted by due time).
    let stored = queue
        .schedule_many([
            ("dup", When::After(Duration::from_secs(60)), &b"1"[..]),
            ("dup", When::After(Duration::ZERO), &b"2"[..]),
            ("dup", When::After(Duration::from_secs(1)), &b"3"[..]),
        ])
        .await
        .unwrap();
    assert_eq!(stored, vec![true, false, false]);
    let (state, payload) = queue.status("dup").await.unwrap().unwrap();
    assert_eq!(payload, b"1");
    let JobState::Pending { due, .. } = state else {
        panic!("dup is {state:?}");
    };
    assert!(due > queue.server_time().await.unwrap() + Duration::from_secs(30));
    // Ids already stored among new ones in the same calls: each answer is that job's own
    // (the calls go by shard, sorted by due time, here the reverse of the given order, and
    // the script names the repeated jobs by their position in its call).
    let ids: Vec<String> = (0..50).map(|i| format!("m-{i}")).collect();
    for id in [&ids[10], &ids[37]] {
        assert!(
            queue
                .schedule(id, Duration::from_secs(60), b"old")
                .await
                .unwrap()
        );
    }
    let jobs = ids.iter().enumerate().map(|(i, id)| {
        let delay = Duration::from_secs(100 - i as u64);
        (id.as_str(), When::After(delay), &b"new"[..])
    });
    let stored = queue.schedule_many(jobs).await.unwrap();
    let expected: Vec<bool> = (0..50).map(|i| i != 10 && i != 37).collect();
    assert_eq!(stored, expected);
    assert_eq!(queue.status("m-37").await.unwrap().unwrap().1, b"old");
    // The script on its own given one id twice in a call, which the client never sends:
    // the first is stored, the second named as repeated.
    let keys = queue.keys(shard(&queue, "twice"));
    let bucket = bucket_of(b"twice", 4, buckets);
    let mut call = Call::new(&SCRIPTS.schedule, &[&keys.due]);
    call.arg(&keys.payload_prefix).arg("d").arg("hint").arg(0);
    call.arg("twice").arg(60_000).arg(bucket).arg("first");
    call.arg("twice").arg(1_000).arg(bucket).arg("second");
    let repeated: Vec<usize> = call.invoke_async(&mut queue.conn()).await.unwrap();
    assert_eq!(repeated, vec![1]);
    let (state, payload) = queue.status("twice").await.unwrap().unwrap();
    assert_eq!(payload, b"first");
    let JobState::Pending { due, .. } = state else {
        panic!("twice is {state:?}");
    };
    assert!(due > queue.server_time().await.unwrap() + Duration::from_secs(30));
}

#[tokio::test]
async fn reschedule_status_and_cancel_find_the_payload_in_the_hash_the_client_names() {
    let server = support::Server::start();
    let queue = queue(&server, "n").await;
    let mut conn = server.sync_conn();
    // Ids over every shard and many of each shard's 8 payload hashes.
    let ids: Vec<String> = (0..64).map(|i| format!("n-{i}")).collect();
    let hashes: std::collections::HashSet<u32> =
        ids.iter().map(|id| hash(id.as_bytes()) % 32).collect();
    assert!(hashes.len() > 16, "{hashes:?}");
    let jobs = ids.iter().map(|id| {
        (
            id.as_str(),
            When::After(Duration::from_secs(60)),
            &b"old"[..],
        )
    });
    support::schedule_new(&queue, jobs).await;
    let held = |conn: &mut redis::Connection, id: &str| -> Option<String> {
        let h = hash(id.as_bytes());
        let keys = ShardKeys::new("n", h % 4);
        redis::cmd("HGET")
            .arg(format!("{}{}", keys.payload_prefix, (h / 4) % 8))
            .arg(id)
            .query(conn)
            .unwrap()
    };
    for id in &ids {
        let found = queue
            .reschedule(id, Duration::from_secs(30), Some(b"new"))
            .await;
        assert_eq!(found.unwrap(), Rescheduled::Pending, "{id}");
        assert_eq!(held(&mut conn, id).as_deref(), Some("new"), "{id}");
        let (state, payload) = queue.status(id).await.unwrap().unwrap();
        assert_eq!(payload, b"new", "{id}");
        assert!(matches!(state, JobState::Pending { .. }), "{id}: {state:?}");
        assert_eq!(queue.cancel(id).await.unwrap(), Cancelled::Pending, "{id}");
        assert_eq!(held(&mut conn, id), None, "{id}");
        assert_eq!(queue.status(id).await.unwrap(), None, "{id}");
    }
    let counts = queue.counts().await.unwrap();
    assert_eq!((counts.pending, counts.claimed, counts.dead), (0, 0, 0));
}

#[tokio::test]
async fn a_claimed_job_s_payload_is_read_from_the_hash_the_client_names() {
    claimed_payloads_are_read(8).await;
}

/// With one payload hash a shard, a claim's payloads come with one `HMGET`.
#[tokio::test]
async fn a_claimed_job_s_payload_is_read_from_the_one_hash_of_its_shard() {
    claimed_payloads_are_read(1).await;
}

/// Claims jobs over every shard of a queue of `buckets` payload hashes a shard and reads
/// their payloads.
async fn claimed_payloads_are_read(buckets: u32) {
    let server = support::Server::start();
    let queue = queue_of(&server, "p", buckets).await;
    // Ids over every shard and many of each shard's payload hashes, each its own payload.
    let ids: Vec<String> = (0..64).map(|i| format!("p-{i}")).collect();
    let jobs = ids
        .iter()
        .map(|id| (id.as_str(), When::After(Duration::ZERO), id.as_bytes()));
    support::schedule_new(&queue, jobs).await;
    let mut read = 0;
    for s in 0..queue.shards() {
        // The claim reply names the jobs without payloads (three fields a job: a reply
        // with a payload as its fourth would not parse as `ClaimedRow`s).
        let (_, jobs, _) = claim(&queue, s, 0, 30_000, 100, 5).await;
        assert!(!jobs.is_empty(), "shard {s}");
        // A job cancelled after its claim has no payload left to read.
        let gone = &jobs[0].0;
        assert_eq!(queue.cancel(gone).await.unwrap(), Cancelled::Started);
        let mut stats = server.sync_conn();
        reset_stats(&mut stats);
        let payloads = crate::claim::payloads(&queue, &mut queue.conn(), s, &jobs)
            .await
            .unwrap();
        // One read a payload hash: one for the claim in one hash a shard.
        let hashes: std::collections::HashSet<u32> = jobs
            .iter()
            .map(|(id, ..)| bucket_of(id.as_bytes(), 4, buckets))
            .collect();
        assert_eq!(calls(&mut stats, "hmget"), hashes.len() as u64);
        for ((id, ..), payload) in jobs.iter().zip(payloads) {
            let expected = (id != gone).then(|| id.as_bytes().to_vec());
            assert_eq!(payload, expected, "{id}");
            read += 1;
        }
    }
    assert_eq!(read, ids.len());
}

#[tokio::test]
async fn acks_delete_their_own_payloads_and_no_other() {
    acks_delete_their_payloads(8).await;
}

/// With one payload hash a shard, a settle call's acks delete their payloads with one
/// `HDEL`.
#[tokio::test]
async fn acks_delete_their_own_payloads_from_the_one_hash_of_their_shard() {
    acks_delete_their_payloads(1).await;
}

/// Claims 12 jobs of one shard of a queue of `buckets` payload hashes a shard, then settles
/// them in one call: 8 acks, 2 failed, 2 with a stale token; only the acked payloads go.
async fn acks_delete_their_payloads(buckets: u32) {
    let server = support::Server::start();
    let queue = queue_of(&server, "a", buckets).await;
    let s = shard(&queue, "a-0");
    let ids = ids_on_shard(&queue, "a", s, 12);
    let jobs = ids
        .iter()
        .map(|id| (id.as_str(), When::After(Duration::ZERO), id.as_bytes()));
    support::schedule_new(&queue, jobs).await;
    let (_, claimed, _) = claim(&queue, s, 0, 30_000, 100, 5).await;
    assert_eq!(claimed.len(), 12);
    let triples: Vec<(&str, u64, &str)> = claimed
        .iter()
        .enumerate()
        .map(|(k, (id, _, token, _))| match k {
            0..8 => (id.as_str(), *token, "a"),
            8..10 => (id.as_str(), *token, "f"),
            _ => (id.as_str(), token + 1, "a"),
        })
        .collect();
    let mut conn = server.sync_conn();
    reset_stats(&mut conn);
    let results = super::settle(&queue, s, 5, &triples).await;
    assert_eq!(results, [vec![1; 10], vec![0; 2]].concat());
    // The settled records go with one HDEL; the 8 acked payloads with one more in one hash
    // a shard, with one each in many.
    let deletes = if buckets == 1 { 2 } else { 9 };
    assert_eq!(calls(&mut conn, "hdel"), deletes);
    for (k, (id, ..)) in claimed.iter().enumerate() {
        let read = crate::claim::payloads(&queue, &mut queue.conn(), s, &claimed[k..=k]).await;
        let payload = read.unwrap().remove(0);
        let expected = (k >= 8).then(|| id.as_bytes().to_vec());
        assert_eq!(payload, expected, "{id}, settled as {}", triples[k].2);
    }
}
