//! Cancel and reschedule of jobs a worker has already claimed (due within its window), 1 s,
//! 100 ms and 5 ms before their due time, against a real server: a job cancelled before its
//! start never runs, a rescheduled one runs once, at its new time, never before it; `cancel`
//! and `reschedule` say which happened.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shardwheel_redis::{Cancelled, Counts, Queue, Rescheduled, When, Worker};

/// Runs: id -> (the due time handed to the handler, when the handler started).
type Runs = Arc<Mutex<HashMap<String, Vec<(SystemTime, SystemTime)>>>>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    Cancel,
    Reschedule,
}

/// What the test did to one job and what the queue answered.
struct Plan {
    id: String,
    act: Act,
    lead: Duration,
    due: SystemTime,
    /// The reschedule's new due time.
    moved: SystemTime,
    /// Whether the call answered that the job's run had not started.
    revoked: bool,
    /// The server's clock read right after the call's reply: before `due`, the call was
    /// certainly applied before the job came due.
    after: SystemTime,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_reschedule_reach_claimed_jobs_until_their_due_time() {
    let server = support::Server::start();
    let queue = Queue::connect(&server.url(), "claimed").await.unwrap();
    let runs: Runs = Arc::default();
    let record = Arc::clone(&runs);
    let worker = Worker::builder()
        .poll(Duration::from_millis(20))
        .start(queue.clone(), move |job| {
            let started = SystemTime::now();
            let mut runs = record.lock().unwrap();
            runs.entry(job.id).or_default().push((job.due, started));
            std::future::ready(Ok::<(), ()>(()))
        })
        .unwrap();
    // Six jobs 300 ms apart from 3 s on (well within the 10 s claim window), and one left
    // alone, on whole milliseconds as the queue keeps them; the server and this test read
    // the same machine clock.
    let now = queue
        .server_time()
        .await
        .unwrap()
        .duration_since(UNIX_EPOCH);
    let base = UNIX_EPOCH + Duration::from_millis(now.unwrap().as_millis() as u64 + 3000);
    let mut plans = Vec::new();
    for (i, lead) in [1000, 100, 5].into_iter().enumerate() {
        for (k, act) in [Act::Cancel, Act::Reschedule].into_iter().enumerate() {
            let due = base + Duration::from_millis(300 * (2 * i + k) as u64);
            plans.push(Plan {
                id: format!("{act:?}-{lead}ms"),
                act,
                lead: Duration::from_millis(lead),
                due,
                moved: due + Duration::from_millis(700),
                revoked: false,
                after: UNIX_EPOCH,
            });
        }
    }
    let jobs = plans
        .iter()
        .map(|plan| (plan.id.as_str(), When::At(plan.due), &b""[..]))
        .chain([("kept", When::At(base), &b""[..])]);
    support::schedule_new(&queue, jobs).await;
    support::until("every job claimed ahead of its due time", async || {
        queue.counts().await.unwrap().claimed == 7
    })
    .await;
    plans.sort_by_key(|plan| plan.due - plan.lead);
    for plan in &mut plans {
        let at = plan.due - plan.lead;
        if let Ok(wait) = at.duration_since(SystemTime::now()) {
            tokio::time::sleep(wait).await;
        }
        plan.revoked = match plan.act {
            Act::Cancel => {
                let found = queue.cancel(&plan.id).await.unwrap();
                assert!(matches!(found, Cancelled::Claimed | Cancelled::Started));
                !found.runs()
            }
            Act::Reschedule => {
                let found = queue.reschedule(&plan.id, When::At(plan.moved), None);
                match found.await.unwrap() {
                    Rescheduled::Claimed => true,
                    Rescheduled::Started => false,
                    other => panic!("{}: {other:?}", plan.id),
                }
            }
        };
        plan.after = queue.server_time().await.unwrap();
    }
    support::until("every job settled", async || {
        queue.counts().await.unwrap() == Counts::default()
    })
    .await;
    let stats = worker.stop().await;
    let runs = runs.lock().unwrap();
    assert_eq!(runs["kept"].len(), 1, "the job left alone ran once");
    for plan in &plans {
        let id = &plan.id;
        let ran = runs.get(id).cloned().unwrap_or_default();
        eprintln!(
            "{id}: revoked={} applied {:?} before its due time, runs {ran:?}",
            plan.revoked,
            plan.due.duration_since(plan.after).ok()
        );
        if plan.after < plan.due {
            assert!(
                plan.revoked,
                "{id}: applied before its due time, yet started"
            );
        }
        if plan.lead >= Duration::from_secs(1) {
            assert!(plan.after < plan.due, "{id}: not applied 1 s ahead");
        }
        for (due, started) in &ran {
            assert!(
                started >= due,
                "{id}: started before the due time it ran for"
            );
        }
        match (plan.act, plan.revoked) {
            (Act::Cancel, true) => assert!(ran.is_empty(), "{id}: cancelled, ran {ran:?}"),
            (Act::Cancel, false) => assert_eq!(ran.len(), 1, "{id}: started, ran {ran:?}"),
            (Act::Reschedule, true) => assert_eq!(
                ran.iter().map(|run| run.0).collect::<Vec<_>>(),
                vec![plan.moved],
                "{id}: rescheduled before its start, must run once at its new time"
            ),
            (Act::Reschedule, false) => assert_eq!(
                ran.iter().map(|run| run.0).collect::<Vec<_>>(),
                vec![plan.due, plan.moved],
                "{id}: started, then ran again at its new time"
            ),
        }
    }
    assert_eq!(stats.early, 0, "a job started before its due time");
    let revoked = plans.iter().filter(|plan| plan.revoked).count() as u64;
    assert_eq!(stats.revoked, revoked, "{stats}");
}
