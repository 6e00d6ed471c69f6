//! Cancel and reschedule of jobs a worker has already claimed (due within its window), 1 s,
//! 100 ms and 5 ms before their due time, against a real server: a job cancelled before its
//! due time never runs, a rescheduled one runs once, at its new time, never before it;
//! `cancel` and `reschedule` say which happened: a call that reached the server before the
//! due time revoked the claim, one that reached it after says the run may have begun. The
//! same with a check ahead, where "before the due time" becomes "before the check ahead
//! of it", and no run starts before its due time. And a start check held up on the server
//! does not hold back the check of a job fired meanwhile.

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
    /// The server's clock read right before the call: at or after `due`, the call was
    /// certainly applied after the job came due.
    before: SystemTime,
    /// The server's clock read right after the call's reply: before `due`, the call was
    /// certainly applied before the job came due.
    after: SystemTime,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_reschedule_reach_claimed_jobs_until_their_due_time() {
    claimed_jobs_obey_calls_until_their_start(Duration::ZERO).await;
}

/// With a check ahead of 300 ms, the calls 1 s ahead revoke the claim and those 100 ms and
/// 5 ms ahead find the run begun: the job runs at its due time, not at its check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_check_ahead_calls_reach_claimed_jobs_until_their_check() {
    claimed_jobs_obey_calls_until_their_start(Duration::from_millis(300)).await;
}

/// Cancels and reschedules claimed jobs at 1 s, 100 ms and 5 ms before their due time, on
/// a worker that checks starts `check_ahead` before it, and checks what they answered and
/// what ran against where on the server's clock each call landed.
async fn claimed_jobs_obey_calls_until_their_start(check_ahead: Duration) {
    let server = support::Server::start();
    let queue = Queue::connect(&server.url(), "claimed").await.unwrap();
    let runs: Runs = Arc::default();
    let record = Arc::clone(&runs);
    // A lead as long as the window: every job is claimed at once, seconds ahead.
    let worker = Worker::builder()
        .poll(Duration::from_millis(20))
        .lead(Duration::from_secs(10))
        .check_ahead(check_ahead)
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
                before: UNIX_EPOCH,
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
        plan.before = queue.server_time().await.unwrap();
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
        // Where the start check may pass from.
        let start = plan.due - check_ahead;
        if plan.after < start {
            assert!(plan.revoked, "{id}: applied before its start, yet Started");
        }
        if plan.before >= start {
            assert!(!plan.revoked, "{id}: applied after its start, yet revoked");
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
        // A call answered Started reached the server after the start time: the run at the
        // old due time happened if the worker's start check came first, not otherwise.
        let dues: Vec<SystemTime> = ran.iter().map(|run| run.0).collect();
        let old = if plan.revoked || dues.first() != Some(&plan.due) {
            vec![]
        } else {
            vec![plan.due]
        };
        match plan.act {
            Act::Cancel => assert_eq!(dues, old, "{id}: cancelled, ran {ran:?}"),
            Act::Reschedule => assert_eq!(
                dues,
                [old, vec![plan.moved]].concat(),
                "{id}: must run once at its new time (after a run at its old one only if \
                 the call came after it)"
            ),
        }
    }
    assert_eq!(stats.early, 0, "a job started before its due time");
    // Every planned job whose run at its old due time did not happen was refused by its
    // start check (cancelled or rescheduled first), and only those.
    let unrun = plans.iter().filter(|plan| {
        let ran = runs.get(&plan.id);
        !ran.is_some_and(|ran| ran.iter().any(|run| run.0 == plan.due))
    });
    assert_eq!(stats.revoked, unrun.count() as u64, "{stats}");
}

/// A start check held up on the server (here by `CLIENT PAUSE`) does not hold back the
/// check of a job that fires meanwhile: that one is sent at once, beside the first, and
/// both jobs run once, after their due times, when the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_fired_while_a_check_is_held_up_is_checked_at_once_and_runs() {
    let server = support::Server::start();
    let queue = Queue::connect(&server.url(), "held").await.unwrap();
    let (seen, handler) = support::recording();
    let worker = Worker::builder().start(queue.clone(), handler).unwrap();
    let now = queue.server_time().await.unwrap();
    let first = now + Duration::from_secs(3);
    let second = first + Duration::from_secs(1);
    let jobs = [("first", first), ("second", second)].map(|(id, at)| (id, When::At(at), &b""[..]));
    support::schedule_new(&queue, jobs).await;
    // Held in the worker's timer, not only claimed on the server: a claim round places
    // its jobs once all its calls and payload reads are back, and a read held up by the
    // pause below would hold both jobs back with it.
    support::until("both jobs held by the worker", async || {
        worker.stats().held == 2
    })
    .await;
    // Every client waits from now until well after the second job's due time: the first
    // job's check is held up on the server when the second job fires.
    let now = queue.server_time().await.unwrap();
    let ahead = first
        .duration_since(now)
        .expect("claimed before the first due time");
    let pause = ahead + Duration::from_secs(4);
    let mut conn = server.sync_conn();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause.as_millis() as u64)
        .arg("ALL")
        .query(&mut conn)
        .unwrap();
    support::until("both jobs run", async || seen.lock().unwrap().len() == 2).await;
    let stats = worker.stop().await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen["first"], [1], "the first job ran once");
    assert_eq!(seen["second"], [1], "the second job ran once");
    assert_eq!((stats.early, stats.revoked), (0, 0), "{stats}");
    assert!(
        stats.checks_overlapped >= 1,
        "the second job's check waited for the first's reply: {stats}"
    );
}

/// A job whose start was checked ahead runs at its due time even while the worker's
/// checks are all out and held up on the server (here by `CLIENT PAUSE`): it does not wait
/// for a check's reply, so it runs before every job whose check was held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_checked_ahead_runs_while_every_check_is_held_up() {
    let server = support::Server::start();
    let queue = Queue::connect(&server.url(), "ready").await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&order);
    let ahead = Duration::from_secs(1);
    let worker = Worker::builder()
        .lead(Duration::from_secs(10))
        .check_ahead(ahead)
        .start(queue.clone(), move |job| {
            record
                .lock()
                .unwrap()
                .push((job.id, job.due, SystemTime::now()));
            std::future::ready(Ok::<(), ()>(()))
        })
        .unwrap();
    // "first" is checked 1 s ahead of its due time; the server then pauses from 600 ms
    // before it until 1.5 s after, and six more jobs, due 500 to 900 ms after it, have
    // their checks (one an instant, 80 ms apart) sent into the pause: more than the
    // worker keeps in flight.
    let now = queue.server_time().await.unwrap();
    let first = now + Duration::from_secs(3);
    let held = (0..6).map(|k| {
        let due = first + Duration::from_millis(500 + 80 * k);
        (format!("held-{k}"), due)
    });
    let jobs: Vec<(String, SystemTime)> = [("first".to_owned(), first)]
        .into_iter()
        .chain(held)
        .collect();
    let rows = jobs
        .iter()
        .map(|(id, due)| (id.as_str(), When::At(*due), &b""[..]));
    support::schedule_new(&queue, rows).await;
    // Held in the worker's timer, not only claimed on the server (as above).
    support::until("every job held by the worker", async || {
        worker.stats().held == 7
    })
    .await;
    let pause_at = first - Duration::from_millis(600);
    let wait = pause_at.duration_since(SystemTime::now());
    tokio::time::sleep(wait.expect("claimed before the pause")).await;
    let mut conn = server.sync_conn();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2100)
        .arg("ALL")
        .query(&mut conn)
        .unwrap();
    support::until("every job run", async || order.lock().unwrap().len() == 7).await;
    let stats = worker.stop().await;
    let order = order.lock().unwrap();
    let ids: Vec<&str> = order.iter().map(|(id, ..)| id.as_str()).collect();
    assert_eq!(ids[0], "first", "a held check's job ran first: {ids:?}");
    for (id, due, started) in order.iter() {
        assert!(started >= due, "{id} started before its due time");
    }
    assert_eq!((stats.early, stats.revoked), (0, 0), "{stats}");
}
