//! What the durable bench asks the Redis server about itself: `INFO` fields, its CPU time
//! beside this process's, its AOF rewrites, and a plain connection for such questions.

use std::time::Duration;

/// `INFO section` of the server.
pub(super) async fn info(conn: &mut redis::aio::MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .unwrap()
}

/// A numeric field of an `INFO` reply (-1 if absent).
pub(super) fn field(info: &str, name: &str) -> f64 {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(-1.0)
}

/// What the server did besides our scripts: AOF rewrites (each a fork and a full write).
pub(super) async fn server_note(url: &str, what: &str) {
    let mut conn = raw_conn(url).await;
    let persistence = info(&mut conn, "persistence").await;
    println!(
        "note {what}: the server made {} AOF rewrites; AOF now {} bytes",
        field(&persistence, "aof_rewrites"),
        field(&persistence, "aof_current_size")
    );
    if std::env::var_os("DURABLE_COMMANDSTATS").is_some() {
        let stats = info(&mut conn, "commandstats").await;
        println!("{stats}\n{}", info(&mut conn, "cpu").await);
    }
}

/// CPU seconds (user + system) used so far by this process and by the server: where a
/// phase's time went.
pub(super) async fn cpu_seconds(url: &str) -> (f64, f64) {
    // Fields 14 and 15 of /proc/self/stat: user and system time in clock ticks (100 a second).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let cpu = info(&mut raw_conn(url).await, "cpu").await;
    (
        (ticks(11) + ticks(12)) / 100.0,
        field(&cpu, "used_cpu_sys") + field(&cpu, "used_cpu_user"),
    )
}

/// Zeroes the server's command statistics (`CONFIG RESETSTAT`), so that those printed
/// next cover one phase.
pub(super) async fn reset_stats(url: &str) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut raw_conn(url).await)
        .await
        .unwrap();
}

/// A plain connection to the bench's server. It waits up to a minute to connect, as for a
/// reply: the client's default of a second to connect was too short for a server busy
/// with a phase's scripts on a loaded machine, and a bench phase died of it.
pub(super) async fn raw_conn(url: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(60)))
        .set_response_timeout(Some(Duration::from_secs(60)));
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// With `DURABLE_SCRIPTSTATS` set: has the server log every command that takes 5 µs or more,
/// with its time (`SLOWLOG`), so that `script_split` can tell the scripts apart, which
/// `INFO commandstats` counts together as `evalsha`. Redis 7.0 logs the commands a script
/// calls too: the threshold leaves out most of those (a job's `HSETNX` or `HDEL`) and of
/// the plain commands, whose totals `INFO commandstats` gives. The log costs the server
/// some time of its own: figures to read beside each other, not beside runs without it.
pub(super) async fn script_log_start(url: &str) -> bool {
    if std::env::var_os("DURABLE_SCRIPTSTATS").is_none() {
        return false;
    }
    let mut conn = raw_conn(url).await;
    for (name, value) in [
        ("slowlog-max-len", "4000000"),
        ("slowlog-log-slower-than", "5"),
    ] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    true
}

/// What a logged command was: the script by its keys and arguments (`start` takes a tok
/// hash first, two or three keys a shard; otherwise `schedule` takes one key, `claim`
/// seven, `settle` and `extend` six, `settle` with a payload prefix first among its
/// arguments), otherwise the command's name.
fn kind(args: &[Vec<u8>]) -> String {
    let text = |i: usize| {
        args.get(i)
            .map_or("", |a| std::str::from_utf8(a).unwrap_or(""))
    };
    let name = text(0).to_ascii_lowercase();
    if name != "evalsha" {
        return name;
    }
    if text(3).ends_with(":tok") {
        return "start.lua".into();
    }
    match text(2) {
        "1" => "schedule.lua".into(),
        "7" => "claim.lua".into(),
        "6" if text(9).ends_with(":j:") => "settle.lua".into(),
        "6" => "extend.lua".into(),
        _ => "evalsha (other)".into(),
    }
}

/// Stops the log and sums it by `kind`: calls and server µs of each, and µs per job of
/// `per` (the jobs the phase delivered) and per scheduled job (`scheduled`).
pub(super) async fn script_split(url: &str, per: u64, scheduled: u64) -> String {
    let mut conn = raw_conn(url).await;
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg("-1")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg("-1")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut sums: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for entry in log {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let us = match fields.get(2) {
            Some(redis::Value::Int(us)) => *us as u64,
            _ => 0,
        };
        let args: Vec<Vec<u8>> = match fields.get(3) {
            Some(redis::Value::Array(args)) => args
                .iter()
                .map(|arg| match arg {
                    redis::Value::BulkString(bytes) => bytes.clone(),
                    _ => Vec::new(),
                })
                .collect(),
            _ => Vec::new(),
        };
        let sum = sums.entry(kind(&args)).or_default();
        sum.0 += 1;
        sum.1 += us;
    }
    let mut lines = Vec::new();
    for (kind, (calls, us)) in sums {
        lines.push(format!(
            "  {kind}: {calls} calls, {us} us, {:.2} us a call, {:.3} us a delivered job, {:.3} us a scheduled job",
            us as f64 / calls.max(1) as f64,
            us as f64 / per.max(1) as f64,
            us as f64 / scheduled.max(1) as f64,
        ));
    }
    lines.join("\n")
}
