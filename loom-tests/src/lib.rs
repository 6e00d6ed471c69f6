//! Loom models of shardwheel's races, one file per race in `tests/`. They only build under
//! `--cfg loom`:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 CARGO_TARGET_DIR=target/loom \
//!     cargo test -p loom-tests --release
//! ```
//!
//! Without `--cfg loom` this crate is empty, so a plain `cargo test` of the workspace
//! skips it.
