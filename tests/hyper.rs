//! `HyperTimer` under a real hyper server and client on 127.0.0.1: hyper's header-read
//! timeout, run on shardwheel, closes an idle keep-alive connection and cuts off a client
//! that stalls in the middle of its headers; a connection that keeps talking is served.
#![cfg(feature = "hyper")]

use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use shardwheel::{HyperTimer, Timer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The server's header-read timeout (hyper's keep-alive idle timeout too).
const HEADER_READ: Duration = Duration::from_millis(200);
/// A bound on each wait, far above the timeout: a test that breaks fails rather than hangs.
const HANG: Duration = Duration::from_secs(20);

async fn hello(_: Request<Incoming>) -> Result<Response<Empty<Bytes>>, Infallible> {
    Ok(Response::new(Empty::new()))
}

/// A hyper server on 127.0.0.1 whose timeouts run on `timer`; serves until the runtime ends.
async fn serve(timer: Timer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let timer = timer.clone();
            tokio::spawn(async move {
                // An error is the timeout's doing: the connection closes either way.
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(HyperTimer::new(timer))
                    .header_read_timeout(HEADER_READ)
                    .serve_connection(TokioIo::new(stream), hyper::service::service_fn(hello))
                    .await;
            });
        }
    });
    address
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Reads until the server closes the connection; how long after `since` it did.
async fn closed_after(stream: &mut TcpStream, since: Instant) -> Duration {
    let mut sink = Vec::new();
    tokio::time::timeout(HANG, stream.read_to_end(&mut sink))
        .await
        .expect("the server closes the connection")
        .ok();
    since.elapsed()
}

#[test]
fn an_idle_keep_alive_connection_is_closed_by_the_timeout() {
    let timer = Timer::builder().shards(2).build().unwrap();
    runtime().block_on(async {
        let address = serve(timer.clone()).await;
        let stream = TcpStream::connect(address).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        let connection = tokio::spawn(connection);
        // Two requests on the connection, kept alive between them for less than the
        // timeout: each request starts its header-read timer anew.
        let mut last_sent = Instant::now();
        for _ in 0..2 {
            last_sent = Instant::now();
            let request = Request::get("/").body(Empty::<Bytes>::new()).unwrap();
            let response = sender.send_request(request).await.unwrap();
            assert!(response.status().is_success());
            response.into_body().collect().await.unwrap();
            tokio::time::sleep(HEADER_READ / 4).await;
        }
        // Then idle: the server closes it, and the client's connection task ends. Its timer
        // started once it had answered the last request, after that request was sent.
        tokio::time::timeout(HANG, connection)
            .await
            .expect("the server closed the idle connection")
            .unwrap()
            .unwrap();
        let closed = last_sent.elapsed();
        assert!(
            closed >= HEADER_READ,
            "closed no earlier than the timeout: {closed:?}"
        );
        assert!(sender.is_closed());
    });
    assert!(timer.stats().fired >= 1, "the timeout ran on shardwheel");
}

#[test]
fn a_client_that_stalls_its_headers_is_cut_off() {
    let timer = Timer::builder().shards(2).build().unwrap();
    runtime().block_on(async {
        let address = serve(timer.clone()).await;
        // The server's timer starts once it has accepted, after the connect began.
        let start = Instant::now();
        let mut stream = TcpStream::connect(address).await.unwrap();
        // Half a request, then nothing.
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        let closed = closed_after(&mut stream, start).await;
        assert!(
            closed >= HEADER_READ,
            "cut off no earlier than the timeout: {closed:?}"
        );
    });
    assert!(timer.stats().fired >= 1, "the timeout ran on shardwheel");
}

#[test]
fn the_timer_moves_its_own_sleeps_in_place() {
    use hyper::rt::Timer as _;
    let engine = Timer::builder().shards(1).manual().build().unwrap();
    let timer = HyperTimer::new(engine.clone());
    let start = timer.now();
    let mut sleep = timer.sleep(Duration::from_secs(1));
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(sleep.as_mut().poll(&mut cx).is_pending());
    timer.reset(&mut sleep, start + Duration::from_secs(3));
    engine.advance(Duration::from_secs(2)).unwrap();
    assert!(sleep.as_mut().poll(&mut cx).is_pending(), "moved past 1 s");
    engine.advance(Duration::from_secs(1)).unwrap();
    assert!(sleep.as_mut().poll(&mut cx).is_ready());
    assert_eq!(engine.stats().scheduled, 1, "one timer, moved");
    assert_eq!(
        timer.now(),
        start + Duration::from_secs(3),
        "the manual time"
    );
}
