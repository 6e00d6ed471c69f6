//! A 3-node Redis Cluster on 127.0.0.1 (no replicas): a queue's shards spread over the
//! nodes, and a worker delivers every job once.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardwheel_redis::{Counts, Job, Queue, When, Worker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_spread_over_three_nodes_and_each_is_delivered_once() {
    let cluster = support::Cluster::start();
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let queue = Queue::builder("spread")
        .connect_cluster(&nodes)
        .await
        .unwrap();
    let ids: Vec<String> = (0..5000).map(|i| format!("n{i}")).collect();
    let jobs = ids.iter().enumerate().map(|(i, id)| {
        (
            id.as_str(),
            When::After(Duration::from_millis(500 + (i as u64 % 1500))),
            id.as_bytes(),
        )
    });
    support::schedule_new(&queue, jobs).await;
    // Every node holds some of the queue's keys.
    for url in &urls {
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let keys: u64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
        assert!(keys > 0, "node {url} holds none of the queue's keys");
    }
    let seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let record = Arc::clone(&seen);
    let worker = Worker::builder()
        .start(queue.clone(), move |job: Job| {
            assert_eq!(job.payload, job.id.as_bytes());
            *record.lock().unwrap().entry(job.id).or_default() += 1;
            std::future::ready(Ok::<(), ()>(()))
        })
        .unwrap();
    let start = Instant::now();
    while queue.counts().await.unwrap() != Counts::default() {
        assert!(
            start.elapsed() < support::PATIENCE,
            "the cluster queue did not drain"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = worker.stop().await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 5000, "jobs lost");
    assert!(seen.values().all(|&n| n == 1), "a job ran twice");
    assert_eq!(
        (stats.acked, stats.early, stats.refused),
        (5000, 0, 0),
        "{stats}"
    );
}
