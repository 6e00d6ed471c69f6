//! A timer's counts served in Prometheus' text exposition format, with the standard library
//! alone: an HTTP endpoint on 127.0.0.1 answers `GET /metrics` with one series a shard for
//! each count (read with `Timer::counts`'s per-shard form, which copies no histogram).
//!
//! So that it runs to completion by itself, the example binds a free port, schedules and
//! cancels some timers, scrapes itself once, prints what it got and checks it. A server
//! would keep the accept loop running instead.
//!
//! `cargo run --example prometheus`

use shardwheel::{Counts, Timer};
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// The exposition: a `# TYPE` line a count, then one sample a shard. Totals are counters
/// (named `_total`), levels (pending timers, slots) gauges.
fn render(timer: &Timer) -> String {
    let shards: Vec<_> = (0..timer.shards())
        .filter_map(|shard| timer.shard_counts(shard))
        .map(|counts| counts.named())
        .collect();
    let mut out = String::new();
    let Some(first) = shards.first() else {
        return out;
    };
    for (index, &(count, _)) in first.iter().enumerate() {
        let (name, kind) = if Counts::is_level(count) {
            (format!("shardwheel_{count}"), "gauge")
        } else {
            (format!("shardwheel_{count}_total"), "counter")
        };
        // Writing to a String cannot fail.
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (shard, named) in shards.iter().enumerate() {
            let _ = writeln!(out, "{name}{{shard=\"{shard}\"}} {}", named[index].1);
        }
    }
    out
}

/// Answers one request on `stream`: the metrics for `GET /metrics`, 404 for anything else.
fn serve(timer: &Timer, stream: TcpStream) -> io::Result<()> {
    let mut request_line = String::new();
    let mut reader = BufReader::new(&stream);
    reader.read_line(&mut request_line)?;
    // The headers, up to the blank line that ends them (a GET has no body).
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let (status, body) = if request_line.starts_with("GET /metrics ") {
        ("200 OK", render(timer))
    } else {
        ("404 Not Found", String::new())
    };
    write!(
        &stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn main() -> io::Result<()> {
    let timer = Timer::builder()
        .shards(2)
        .build()
        .map_err(io::Error::other)?;
    // 75 timers that fire within 10 ms, 25 cancelled long before their minute is up.
    let (fired, ran) = mpsc::channel();
    for i in 0..100 {
        let fired = fired.clone();
        let delay = if i % 4 == 0 {
            Duration::from_secs(60)
        } else {
            Duration::from_millis(1 + i % 10)
        };
        let handle = timer
            .schedule(delay, move || {
                let _ = fired.send(());
            })
            .map_err(io::Error::other)?;
        if i % 4 == 0 {
            assert!(timer.cancel(handle));
        }
    }
    for _ in 0..75 {
        ran.recv().expect("the timer is running");
    }

    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let scrape = thread::spawn(move || -> io::Result<String> {
        let mut stream = TcpStream::connect(address)?;
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    });
    let (stream, _) = listener.accept()?;
    serve(&timer, stream)?;
    let response = scrape.join().expect("the scraper does not panic")?;
    println!("{response}");

    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"));
    let fired: u64 = response
        .lines()
        .filter_map(|line| line.strip_prefix("shardwheel_fired_total{shard="))
        .filter_map(|sample| sample.split(' ').nth(1)?.parse::<u64>().ok())
        .sum();
    assert_eq!(fired, 75);
    Ok(())
}
