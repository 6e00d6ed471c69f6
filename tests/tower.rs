//! Feature `tower`: shardwheel's `TimeoutLayer` in a tower stack, around a real service
//! (a key-value lookup that waits on a tokio channel), on a tokio runtime.

use shardwheel::time::error::Elapsed;
use shardwheel::tower::TimeoutLayer;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tower::{Service, ServiceBuilder, ServiceExt};

/// The lookups waiting for a writer: each key and where its value goes.
type Waiting = Arc<Mutex<Vec<(String, oneshot::Sender<u32>)>>>;

/// Answers a key at once if it is known, or once a writer supplies it.
#[derive(Clone, Default)]
struct Lookup {
    known: Arc<Mutex<HashMap<String, u32>>>,
    waiting: Waiting,
}

impl Service<String> for Lookup {
    type Response = u32;
    type Error = std::io::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<u32, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, key: String) -> Self::Future {
        if let Some(&value) = self.known.lock().unwrap().get(&key) {
            return Box::pin(async move { Ok(value) });
        }
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap().push((key, tx));
        Box::pin(async move { rx.await.map_err(std::io::Error::other) })
    }
}

#[tokio::test]
async fn answers_within_the_limit_pass_and_late_ones_fail_with_elapsed() {
    let lookup = Lookup::default();
    lookup.known.lock().unwrap().insert("a".into(), 1);
    let mut service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(50)))
        .service(lookup.clone());

    assert_eq!(
        service
            .ready()
            .await
            .unwrap()
            .call("a".into())
            .await
            .unwrap(),
        1
    );

    // Supplied in time: the answer passes.
    let pending = service.ready().await.unwrap().call("b".into());
    let (key, tx) = lookup.waiting.lock().unwrap().pop().unwrap();
    assert_eq!(key, "b");
    tx.send(2).unwrap();
    assert_eq!(pending.await.unwrap(), 2);

    // Never supplied: the limit ends it with `Elapsed`, and the inner future is dropped.
    let late = service
        .ready()
        .await
        .unwrap()
        .call("c".into())
        .await
        .unwrap_err();
    assert!(late.is::<Elapsed>(), "{late}");
    let (_, tx) = lookup.waiting.lock().unwrap().pop().unwrap();
    assert!(tx.is_closed(), "the inner future was dropped");
}

#[tokio::test]
async fn the_inner_services_error_passes_through_boxed() {
    let lookup = Lookup::default();
    let service = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_secs(10)))
        .service(lookup.clone());
    let call = tokio::spawn(service.oneshot("d".into()));
    while lookup.waiting.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    drop(lookup.waiting.lock().unwrap().pop()); // the writer goes away
    let error = call.await.unwrap().unwrap_err();
    assert!(error.is::<std::io::Error>(), "{error}");
}
