//! Test fixtures: real Redis servers and worker processes, started per test and killed on
//! drop.
//!
//! A [`Server`] is `redis-server` on a unix socket in a temp dir with AOF and
//! `appendfsync always` (every acknowledged write is on disk), so a test can SIGKILL it and
//! start it again on the same directory. A [`Cluster`] is three cluster-mode nodes on free
//! loopback ports joined by `redis-cli --cluster create`. A [`WorkerProcess`] is the crate's
//! `shardwheel-redis-worker` binary, whose output lines the test reads.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a fixture waits for a server or a line before failing the test: a liveness
/// bound, generous for a loaded CI machine, never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(120);

pub struct Server {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Server {
    pub fn start() -> Server {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut server = Server { dir, child: None };
        server.spawn(&[], Ready::Serving);
        server
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("r.sock")
    }

    /// Starts `redis-server` with `extra` arguments and waits until it is `ready`.
    fn spawn(&mut self, extra: &[&str], ready: Ready) {
        let _ = std::fs::remove_file(self.socket());
        let child = redis_server(self.dir.path())
            .args(["--port", "0", "--unixsocket"])
            .arg(self.socket())
            .args(["--unixsocketperm", "700"])
            .args(extra)
            .spawn()
            .expect("redis-server on the PATH (apt-get install redis-server)");
        self.child = Some(child);
        let client = redis::Client::open(self.url()).expect("a valid url");
        let start = Instant::now();
        loop {
            if let Ok(mut conn) = client.get_connection() {
                let ping = redis::cmd("PING").query::<String>(&mut conn);
                let loading = ping.as_ref().is_err_and(|error| {
                    error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                });
                if ping.is_ok() || (loading && ready == Ready::Loading) {
                    return;
                }
            }
            assert!(
                start.elapsed() < PATIENCE,
                "redis-server did not answer PING"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    /// SIGKILL, then a new server on the same directory (it replays the AOF).
    pub fn kill9_and_restart(&mut self) {
        self.kill9();
        self.spawn(&[], Ready::Serving);
    }

    /// Compacts the AOF (BGREWRITEAOF, awaited), SIGKILLs the server and starts it again on
    /// the same directory, loading each key `per_key` late; returns while it still loads.
    pub fn kill9_and_restart_loading_slowly(&mut self, per_key: Duration) {
        let mut conn = self.sync_conn();
        let _: String = redis::cmd("BGREWRITEAOF").query(&mut conn).unwrap();
        let start = Instant::now();
        loop {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut conn)
                .unwrap();
            if info.contains("aof_rewrite_in_progress:0")
                && info.contains("aof_rewrite_scheduled:0")
            {
                break;
            }
            assert!(start.elapsed() < PATIENCE, "the AOF rewrite did not end");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill9();
        let delay = per_key.as_micros().to_string();
        // Redis's debugging option `key-load-delay` (microseconds per key loaded); events are
        // served (LOADING replies) every KiB loaded.
        let extra = ["--key-load-delay", &delay];
        let extra = [
            &extra[..],
            &["--loading-process-events-interval-bytes", "1024"],
        ]
        .concat();
        self.spawn(&extra, Ready::Loading);
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn sync_conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

/// What a started server must answer before the fixture returns it.
#[derive(Clone, Copy, PartialEq)]
enum Ready {
    /// PONG.
    Serving,
    /// PONG or LOADING.
    Loading,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A port that is free now, with its cluster bus port (+10000) free too.
fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

pub struct Cluster {
    _dirs: Vec<tempfile::TempDir>,
    children: Vec<Child>,
    pub ports: Vec<u16>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let mut cluster = Cluster {
            _dirs: Vec::new(),
            children: Vec::new(),
            ports: Vec::new(),
        };
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let port = free_port();
            let child = redis_server(dir.path())
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .spawn()
                .expect("redis-server on the PATH");
            cluster.children.push(child);
            cluster.ports.push(port);
            cluster._dirs.push(dir);
        }
        for &port in &cluster.ports {
            wait_ping(&format!("redis://127.0.0.1:{port}"));
        }
        let nodes: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli on the PATH");
        assert!(status.success(), "redis-cli --cluster create failed");
        let start = Instant::now();
        for &port in &cluster.ports {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
            let mut conn = client.get_connection().unwrap();
            loop {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(start.elapsed() < PATIENCE, "the cluster did not become ok");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_ping(url: &str) {
    let client = redis::Client::open(url).unwrap();
    let start = Instant::now();
    loop {
        if let Ok(mut conn) = client.get_connection()
            && redis::cmd("PING").query::<String>(&mut conn).is_ok()
        {
            return;
        }
        assert!(start.elapsed() < PATIENCE, "{url} did not answer PING");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One `RUN` line of a worker process.
#[derive(Clone, Debug)]
pub struct Run {
    pub id: String,
    pub attempt: u32,
    pub due_ms: u64,
    /// Start minus due time by the worker's own wall clock, in microseconds.
    pub late_us: u64,
}

pub struct WorkerProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
    pub pid: i32,
}

impl WorkerProcess {
    /// Starts the worker binary with `args` (after `--url` and `--queue`), with `env` set,
    /// and waits for its READY line; returns it with (server ms, local ms) from that line.
    pub fn start(url: &str, queue: &str, args: &[&str], env: &[(&str, &str)]) -> (Self, u64, u64) {
        // Integration tests know the worker binary; the unit tests that share this fixture
        // never start one.
        let Some(binary) = option_env!("CARGO_BIN_EXE_shardwheel-redis-worker") else {
            panic!("the worker binary is only known to integration tests");
        };
        let mut command = Command::new(binary);
        command
            .args(["--url", url, "--queue", queue])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("the worker binary");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let pid = child.id() as i32;
        let mut worker = WorkerProcess { child, lines, pid };
        let ready = worker.line_starting("READY ");
        let mut parts = ready.split(' ').skip(1).map(|p| p.parse::<u64>().unwrap());
        let (server, local) = (parts.next().unwrap(), parts.next().unwrap());
        (worker, server, local)
    }

    /// The next line starting with `prefix` (other lines are dropped).
    pub fn line_starting(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(_) => panic!("worker {} printed no line starting {prefix:?}", self.pid),
            }
        }
    }

    /// The next RUN line, if one comes within `wait`.
    pub fn next_run(&mut self, wait: Duration) -> Option<Run> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with("RUN ") => return Some(parse_run(&line)),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let result = unsafe { libc::kill(self.pid, signal) };
        assert_eq!(result, 0, "kill({}, {signal})", self.pid);
    }

    /// Closes stdin (a graceful stop), and returns every RUN line left and the STATS line.
    pub fn stop(mut self) -> (Vec<Run>, String) {
        drop(self.child.stdin.take());
        let mut runs = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with("RUN ") => runs.push(parse_run(&line)),
                Ok(line) if line.starts_with("STATS ") => return (runs, line),
                Ok(_) => {}
                Err(_) => panic!("worker {} did not stop", self.pid),
            }
        }
    }
}

pub fn parse_run(line: &str) -> Run {
    let parts: Vec<&str> = line.split(' ').collect();
    Run {
        id: parts[1].to_owned(),
        attempt: parts[2].parse().unwrap(),
        due_ms: parts[3].parse().unwrap(),
        late_us: parts[4].parse().unwrap(),
    }
}

/// A counter from a STATS line (`name=value`).
pub fn stat(line: &str, name: &str) -> u64 {
    line.split(' ')
        .find_map(|part| part.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {line}"))
        .parse()
        .unwrap()
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs handed to a recording handler: id -> attempts seen.
pub type Seen = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<u32>>>>;

/// A handler that records each run (and acks it), and what it recorded.
pub fn recording() -> (
    Seen,
    impl Fn(shardwheel_redis::Job) -> std::future::Ready<Result<(), ()>> + Send + Sync,
) {
    let seen: Seen = std::sync::Arc::default();
    let record = std::sync::Arc::clone(&seen);
    (seen, move |job| {
        note(&record, job);
        std::future::ready(Ok(()))
    })
}

/// Records a run of `job`.
pub fn note(seen: &Seen, job: shardwheel_redis::Job) {
    seen.lock()
        .unwrap()
        .entry(job.id)
        .or_default()
        .push(job.attempt);
}

/// The server's clock in Unix ms.
pub fn server_ms(conn: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    secs * 1000 + micros / 1000
}

/// Waits (within the fixture's patience) until `done` holds.
pub async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < PATIENCE, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Schedules `jobs` in one call and checks that every id was new.
pub async fn schedule_new<'a>(
    queue: &shardwheel_redis::Queue,
    jobs: impl IntoIterator<Item = (&'a str, shardwheel_redis::When, &'a [u8])>,
) {
    let stored = queue.schedule_many(jobs).await.unwrap();
    assert!(stored.iter().all(|&new| new), "every id was new");
}

/// `redis-server` in the foreground with its data in `dir`, every write on disk before it
/// is acknowledged (AOF, `appendfsync always`), no snapshots, and quiet.
fn redis_server(dir: &std::path::Path) -> Command {
    let mut command = Command::new("redis-server");
    command
        .arg("--dir")
        .arg(dir)
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ])
        .args(["--daemonize", "no", "--loglevel", "warning"])
        .stdout(Stdio::null());
    command
}
