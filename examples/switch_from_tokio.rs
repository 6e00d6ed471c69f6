//! A hyper server whose timers switch from tokio to shardwheel by its imports alone: the
//! two `use` lines marked below. Its request timeout (`time::timeout`, answering 504), its
//! work (`time::sleep`), its heartbeat (`time::interval`) and hyper's header-read timeout
//! (the `Timer` given to hyper's builder) all run on whichever the imports name; nothing
//! else in the file names a timer.
//!
//! Run: `cargo run --example switch_from_tokio --features hyper`. It serves on 127.0.0.1,
//! asks itself for a quick page (200) and a slow one (504, cut by the request timeout),
//! opens a connection that never finishes its headers (closed by the header-read
//! timeout), checks each, and checks that the heartbeat ticked.

// The switch: with `use tokio::time;` and `use hyper_util::rt::TokioTimer as Timer;` the
// same program runs on tokio's timers.
use shardwheel::HyperTimer as Timer;
use shardwheel::time::{self, Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a request may take before the server answers 504.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(200);
/// How long a client may take over its headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_millis(300);
/// The heartbeat's period.
const HEARTBEAT: Duration = Duration::from_millis(20);

/// The page: `/slow` takes a second, anything else comes at once.
async fn page(path: &str) -> String {
    if path == "/slow" {
        time::sleep(Duration::from_secs(1)).await;
    }
    format!("hello from {path}\n")
}

async fn handle(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    match time::timeout(REQUEST_TIMEOUT, page(request.uri().path())).await {
        Ok(body) => Ok(Response::new(Full::new(Bytes::from(body)))),
        Err(elapsed) => {
            let mut response = Response::new(Full::new(Bytes::from(format!("{elapsed}\n"))));
            *response.status_mut() = StatusCode::GATEWAY_TIMEOUT;
            Ok(response)
        }
    }
}

async fn get(address: std::net::SocketAddr, path: &str) -> anyhow::Result<(StatusCode, String)> {
    let stream = TcpStream::connect(address).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let response = sender
        .send_request(Request::get(path).body(Full::new(Bytes::new()))?)
        .await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    println!("timers: {}", std::any::type_name::<Timer>());
    let beats = Arc::new(AtomicU64::new(0));
    let heartbeat = {
        let beats = Arc::clone(&beats);
        tokio::spawn(async move {
            let mut interval = time::interval(HEARTBEAT);
            loop {
                interval.tick().await;
                beats.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    println!("listening on http://{address}");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(Timer::default())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), hyper::service::service_fn(handle))
                    .await;
            });
        }
    });

    let (status, body) = get(address, "/quick").await?;
    println!("GET /quick: {status} {}", body.trim_end());
    anyhow::ensure!(status == StatusCode::OK && body == "hello from /quick\n");

    let start = Instant::now();
    let (status, body) = get(address, "/slow").await?;
    println!(
        "GET /slow: {status} {} after {:?}",
        body.trim_end(),
        start.elapsed()
    );
    anyhow::ensure!(status == StatusCode::GATEWAY_TIMEOUT && body == "deadline has elapsed\n");
    anyhow::ensure!(
        start.elapsed() >= REQUEST_TIMEOUT,
        "cut by the timeout, not before"
    );

    // Half a request line, then nothing: the header-read timeout closes the connection.
    let mut stalled = TcpStream::connect(address).await?;
    stalled.write_all(b"GET /never HTTP/1.1\r\n").await?;
    let start = Instant::now();
    let mut rest = Vec::new();
    let read = time::timeout(Duration::from_secs(10), stalled.read_to_end(&mut rest)).await;
    println!(
        "stalled headers: closed by the server after {:?}",
        start.elapsed()
    );
    anyhow::ensure!(
        matches!(read, Ok(Ok(_))),
        "the server closed the connection"
    );
    anyhow::ensure!(
        start.elapsed() >= HEADER_READ_TIMEOUT / 2,
        "by the timeout, not at once"
    );

    let beats = beats.load(Ordering::Relaxed);
    println!("heartbeat: {beats} ticks");
    anyhow::ensure!(beats >= 2, "the heartbeat ticked");
    heartbeat.abort();
    Ok(())
}
