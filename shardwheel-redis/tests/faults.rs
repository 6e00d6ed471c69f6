//! Bad data and unready servers, against real servers: an entry the worker cannot run (an
//! id that is not UTF-8, a due time that is not whole milliseconds) is dead-lettered alone
//! (with a `tracing` event) while its batch runs; a claim whose payloads cannot be read is
//! given back at once, its attempt not counted; connecting fails with a clear error within
//! the connect timeout, or waits for a server still loading its data.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use shardwheel_redis::{Counts, Error, Queue, When, Worker};
use support::recording;

/// Everything the process's `tracing` events printed (a subscriber installed once).
fn events() -> Arc<Mutex<Vec<u8>>> {
    static EVENTS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    Arc::clone(EVENTS.get_or_init(|| {
        let events: Arc<Mutex<Vec<u8>>> = Arc::default();
        let sink = Arc::clone(&events);
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        events
    }))
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_no_handler_can_take_are_dead_lettered_alone_and_their_batch_runs() {
    let events = events();
    let server = support::Server::start();
    let mut conn = server.sync_conn();
    // One shard: the bad entry and the 50 jobs come in one claim.
    let url = server.url();
    let queue = Queue::builder("bad").shards(1).connect(&url).await.unwrap();
    let ids: Vec<String> = (0..50).map(|i| format!("good-{i}")).collect();
    let jobs = ids
        .iter()
        .map(|id| (id.as_str(), When::After(Duration::from_secs(1)), &b""[..]));
    support::schedule_new(&queue, jobs).await;
    // Another client writes an id that is not UTF-8 and one due at a fraction of a
    // millisecond, due with them.
    let bad: &[u8] = b"bad-\xff\xfe-id";
    let due = support::server_ms(&mut conn) + 1000;
    let _: i64 = redis::cmd("ZADD")
        .arg("{bad:0}:due")
        .arg(due)
        .arg(bad)
        .arg(format!("{due}.5"))
        .arg("half-ms")
        .query(&mut conn)
        .unwrap();
    let (seen, handler) = recording();
    let worker = Worker::builder().start(queue.clone(), handler).unwrap();
    let dead = Counts {
        pending: 0,
        claimed: 0,
        dead: 2,
    };
    support::until("the batch run and the bad entry dead", async || {
        queue.counts().await.unwrap() == dead
    })
    .await;
    let stats = worker.stop().await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 50);
    assert!(
        seen.values().all(|attempts| attempts == &[1]),
        "a job of the batch ran late, after its lease: {seen:?}"
    );
    assert_eq!((stats.dead_lettered, stats.reaped, stats.early), (2, 0, 0));
    for entry in [bad, b"half-ms"] {
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg("{bad:0}:dead")
            .arg(entry)
            .query(&mut conn)
            .unwrap();
        assert!(
            score.is_some(),
            "{} is not in the dead-letter set",
            String::from_utf8_lossy(entry)
        );
    }
    let printed = String::from_utf8_lossy(&events.lock().unwrap()).into_owned();
    assert!(
        printed.contains("not UTF-8") && printed.contains("bad-\u{fffd}\u{fffd}-id"),
        "no event names the bad id: {printed}"
    );
    assert!(
        printed.contains("whole number of milliseconds") && printed.contains("half-ms"),
        "no event names the entry due at a fraction of a millisecond: {printed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_payloads_cannot_be_read_is_released_with_no_attempt_counted() {
    let server = support::Server::start();
    let mut conn = server.sync_conn();
    // One shard and one payload hash, so the hash's key is known.
    let url = server.url();
    let queue = Queue::builder("unread")
        .shards(1)
        .buckets(1)
        .connect(&url)
        .await
        .unwrap();
    queue.schedule("x", Duration::ZERO, b"p").await.unwrap();
    // Another client turns the payload hash into a string: every read of it fails.
    let hash = "{unread:0}:j:0";
    let _: () = redis::pipe()
        .del(hash)
        .ignore()
        .set(hash, "not a hash")
        .query(&mut conn)
        .unwrap();
    let (seen, handler) = recording();
    let worker = Worker::builder()
        .poll(Duration::from_millis(20))
        .start(queue.clone(), handler)
        .unwrap();
    support::until("claims released after failed reads", async || {
        let stats = worker.stats();
        stats.released >= 2 && stats.errors >= 2
    })
    .await;
    let stats = worker.stop().await;
    assert_eq!(stats.delivered, 0);
    assert!(seen.lock().unwrap().is_empty());
    let pending = Counts {
        pending: 1,
        claimed: 0,
        dead: 0,
    };
    assert_eq!(queue.counts().await.unwrap(), pending);
    // Its payload back, the job runs once, as its first attempt: no release counted one.
    let _: () = redis::pipe()
        .del(hash)
        .ignore()
        .hset(hash, "x", "p")
        .ignore()
        .query(&mut conn)
        .unwrap();
    let (seen, handler) = recording();
    let worker = Worker::builder().start(queue.clone(), handler).unwrap();
    support::until("the job run", async || {
        queue.counts().await.unwrap() == Counts::default()
    })
    .await;
    worker.stop().await;
    assert_eq!(seen.lock().unwrap().get("x"), Some(&vec![1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_fails_with_a_clear_error_within_the_connect_timeout() {
    // A port nothing listens on: refused until the timeout, then the error says so.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let timeout = Duration::from_secs(1);
    let started = Instant::now();
    let refused = Queue::builder("refused")
        .connect_timeout(timeout)
        .connect(&format!("redis://127.0.0.1:{port}"))
        .await;
    let waited = started.elapsed();
    match refused {
        Err(Error::Connect {
            address,
            last: Some(last),
            ..
        }) => {
            assert!(last.is_connection_refusal(), "{last}");
            assert_eq!(address, format!("127.0.0.1:{port}"));
        }
        other => panic!("not a connect error: {other:?}"),
    }
    // A liveness bound, generous for a loaded machine: the timeout was obeyed, not the
    // client library's own retries (9.45 s).
    assert!(waited < timeout + Duration::from_secs(3), "{waited:?}");
    // An error that waiting cannot cure ends at once (here within a minute's timeout).
    let server = support::Server::start();
    let out_of_range = Queue::builder("db")
        .connect_timeout(Duration::from_secs(60))
        .connect(&format!("{}?db=99", server.url()))
        .await
        .unwrap_err();
    assert!(
        matches!(&out_of_range, Error::Connect { last: Some(_), .. })
            && out_of_range
                .to_string()
                .contains("DB index is out of range"),
        "{out_of_range}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_while_the_server_loads_waits_then_runs_its_jobs() {
    let mut server = support::Server::start();
    let mut conn = server.sync_conn();
    let queue = Queue::connect(&server.url(), "loading").await.unwrap();
    let ids: Vec<String> = (0..20).map(|i| format!("job-{i}")).collect();
    let jobs = ids
        .iter()
        .map(|id| (id.as_str(), When::After(Duration::from_secs(1)), &b""[..]));
    support::schedule_new(&queue, jobs).await;
    drop(queue);
    // 3,000 more keys, loaded 1 ms apart: about 3 s of LOADING replies.
    let mut fill = redis::pipe();
    for i in 0..3000 {
        fill.set(format!("filler-{i}"), i).ignore();
    }
    fill.query::<()>(&mut conn).unwrap();
    server.kill9_and_restart_loading_slowly(Duration::from_millis(1));
    let queue = Queue::builder("loading")
        .connect_timeout(support::PATIENCE)
        .connect(&server.url())
        .await
        .expect("connect waits for the server to load its data");
    let (seen, handler) = recording();
    let worker = Worker::builder().start(queue.clone(), handler).unwrap();
    support::until("every job acked", async || {
        queue.counts().await.unwrap() == Counts::default()
    })
    .await;
    let stats = worker.stop().await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 20);
    assert!(seen.values().all(|attempts| attempts == &[1]), "{seen:?}");
    assert_eq!(stats.early, 0);
}
