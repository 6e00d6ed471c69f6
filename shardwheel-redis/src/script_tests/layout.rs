//! The queue's layout as its meta key records it: a client that does not set the bucket
//! count takes the queue's, one that sets another is refused, a new queue gets the default.

use std::time::Duration;

use super::{queue, support};
use crate::queue::Queue;

#[tokio::test]
async fn an_unset_bucket_count_is_the_queue_s() {
    let server = support::Server::start();
    // Created with 4 shards and 8 buckets.
    let first = queue(&server, "layout").await;
    assert!(
        first
            .schedule("job-1", Duration::from_secs(60), b"p")
            .await
            .unwrap()
    );
    let second = Queue::builder("layout")
        .shards(4)
        .connect(&server.url())
        .await
        .unwrap();
    assert_eq!(second.buckets(), 8);
    // It looks for the job in the hash the first client stored it in.
    let (_, payload) = second.status("job-1").await.unwrap().unwrap();
    assert_eq!(payload, b"p");
    assert!(
        !second
            .schedule("job-1", Duration::from_secs(5), b"other")
            .await
            .unwrap()
    );
    assert!(matches!(
        Queue::builder("layout")
            .shards(4)
            .buckets(16)
            .connect(&server.url())
            .await,
        Err(crate::Error::LayoutMismatch {
            stored: (4, 8),
            configured: (4, 16)
        })
    ));
    let fresh = Queue::connect(&server.url(), "fresh").await.unwrap();
    assert_eq!(fresh.buckets(), crate::DEFAULT_BUCKETS);
}
