//! The Lua scripts, one file per atomic step under `src/lua/`, loaded once per process.
//!
//! Each file's header lists its `KEYS` and `ARGV`, its atomic contract and the bound on its
//! work. No script hashes an id: the client names each job's payload hash (`keys::bucket_of`,
//! the one definition of that hash), so the server's single thread spends nothing on it.
//! `lua/held.lua` (how a claimed batch's lease, one entry a batch, ends with its last
//! record or its reaping) is prepended to `claim`, `settle`, `cancel` and `reschedule`,
//! `lua/revoke.lua` (how a cancel or a reschedule revokes a claim and tells whether its start
//! may have passed) to the last two, and `lua/one_hash.lua` (whether a call's jobs all name
//! one payload hash, which one command then serves) to `schedule` and `settle`. `start` is
//! read only (`#!lua flags=no-writes`, Redis 7): it is neither written to the AOF nor
//! replicated.
//! A [`Call`] sends `EVALSHA` and loads the script on a `NOSCRIPT` reply, so a restarted
//! server or a new cluster node is served transparently. It writes its keys and arguments
//! into one buffer, where `redis::ScriptInvocation` allocates one `Vec` an argument: a
//! start check or a settle call of 512 jobs has some 2,000 arguments, and a worker's time
//! in a burst went more to `malloc` and `free` than to anything else (perf, D2).
//! Every script starts from the server's `TIME`: no client clock decides when a job is due.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};

const HELD: &str = include_str!("lua/held.lua");
const REVOKE: &str = include_str!("lua/revoke.lua");
const ONE_HASH: &str = include_str!("lua/one_hash.lua");

/// The loaded scripts.
pub(crate) struct Scripts {
    pub schedule: Script,
    pub claim: Script,
    pub settle: Script,
    pub cancel: Script,
    pub reschedule: Script,
    pub status: Script,
    pub extend: Script,
    pub start: Script,
}

/// A script with the functions it calls (`prelude`) prepended.
fn with(prelude: &[&str], source: &str) -> Script {
    Script::new(&format!("{}\n{source}", prelude.join("\n")))
}

/// The scripts of this process (hashed once).
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    schedule: with(&[ONE_HASH], include_str!("lua/schedule.lua")),
    claim: with(&[HELD], include_str!("lua/claim.lua")),
    settle: with(&[HELD, ONE_HASH], include_str!("lua/settle.lua")),
    cancel: with(&[HELD, REVOKE], include_str!("lua/cancel.lua")),
    reschedule: with(&[HELD, REVOKE], include_str!("lua/reschedule.lua")),
    status: Script::new(include_str!("lua/status.lua")),
    extend: Script::new(include_str!("lua/extend.lua")),
    start: Script::new(include_str!("lua/start.lua")),
});

/// A prepared call of a script: `EVALSHA`, its keys and its arguments, written into one
/// command buffer as they come (the keys first, all at once, as `EVALSHA` counts them).
pub(crate) struct Call {
    script: &'static Script,
    eval: Cmd,
}

impl Call {
    /// A call of `script` with `keys` (`KEYS`, in order).
    pub(crate) fn new(script: &'static Script, keys: &[&str]) -> Self {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(script.get_hash()).arg(keys.len()).arg(keys);
        Call { script, eval }
    }

    /// Adds an argument (`ARGV[n]`, in order).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.eval.arg(arg);
        self
    }

    /// Runs the script, loading it first if the server says it does not have it.
    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut impl ConnectionLike,
    ) -> RedisResult<T> {
        match self.eval.query_async(conn).await {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                self.eval.query_async(conn).await
            }
            reply => reply,
        }
    }
}
