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

pub(super) async fn raw_conn(url: &str) -> redis::aio::MultiplexedConnection {
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}
