//! A hyper server whose timeouts run on shardwheel: `HyperTimer` on the process-wide
//! timer, given to hyper's HTTP/1 builder. hyper's header-read timeout cuts off a client
//! that is slow to send its headers, and closes a keep-alive connection left idle (it
//! waits for the next request's headers).
//!
//! Run: `cargo run --example hyper_server --features hyper`. It serves on 127.0.0.1, makes
//! one request to itself, then leaves the connection idle and shows the server close it.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use shardwheel::HyperTimer;
use std::convert::Infallible;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

/// How long a client may take over its headers, and a connection may stay idle.
const HEADER_READ_TIMEOUT: Duration = Duration::from_millis(300);

async fn handle(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let greeting = format!("hello from {}\n", request.uri().path());
    Ok(Response::new(Full::new(Bytes::from(greeting))))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    println!("listening on http://{address}");
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            tokio::spawn(async move {
                let served = hyper::server::conn::http1::Builder::new()
                    .timer(HyperTimer::global())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), hyper::service::service_fn(handle))
                    .await;
                println!("server: connection from {peer} closed ({served:?})");
            });
        }
    });

    // A client: one request, then the connection stays open and idle.
    let stream = TcpStream::connect(address).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let connection = tokio::spawn(connection);
    let response = sender
        .send_request(Request::get("/greeting").body(Full::new(Bytes::new()))?)
        .await?;
    let body = response.into_body().collect().await?.to_bytes();
    print!("client: {}", String::from_utf8_lossy(&body));
    let idle = Instant::now();
    connection.await??;
    let closed_after = idle.elapsed();
    println!("client: the server closed the idle connection after {closed_after:?}");
    assert!(
        closed_after >= HEADER_READ_TIMEOUT / 2,
        "closed by the timeout, not at once"
    );
    Ok(())
}
