//! Errors a caller can get back: typed, each saying what happened, never a panic.
//!
//! [`Wheel`](crate::Wheel)'s here, the engine's in `error/engine.rs` (built with the
//! `engine` feature). Every enum is `#[non_exhaustive]`, so that a variant added later
//! breaks no `match`.

use std::fmt;

#[cfg(feature = "engine")]
mod engine;
#[cfg(feature = "engine")]
pub use engine::{
    AdvanceError, BuildError, PeriodicError, ScheduleError, SleepError, StaleHandle, TimeoutError,
};

/// A key that names no pending timer: its timer expired or was cancelled, or the key was
/// never issued (for example, one made with [`Key::from_bits`](crate::Key::from_bits)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleKey;

impl fmt::Display for StaleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("key names no pending timer: it expired, was cancelled, or was never issued")
    }
}

impl std::error::Error for StaleKey {}

/// The wheel holds as many timers as it can index (2^31); the value is handed back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Full<T>(pub T);

impl<T> Full<T> {
    /// The value that could not be inserted.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Full(..)")
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the wheel is full: it holds 2^31 timers")
    }
}

impl<T> std::error::Error for Full<T> {}
