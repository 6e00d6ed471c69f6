//! Tokio's paused test clock (feature `test-util`): whether a timer made now runs on
//! tokio's timer rather than the engine.
//!
//! Tokio has no public "is the clock paused?", so the answer is read off its clock: a
//! runtime whose clock was never paused gives std's `Instant::now()` exactly (its clock is
//! `base + (now - unfrozen)` with `base == unfrozen`); a paused one gives a frozen instant
//! that moves only by `advance` or auto-advance; a resumed one, std's time shifted by what
//! it advanced. So tokio's reading is taken between two of std's: outside them, tokio's
//! clock is not real time (paused or shifted) and tokio's timer must serve; inside them, it
//! is real time unless it stands still while std's clock moves past it (a frozen instant
//! that happens to fall in the bracket), which the second reading rules out. Only a
//! current-thread runtime can be paused, and its clock moves only on its own thread (auto-
//! advance happens while it parks), so a frozen clock cannot move between the readings.
//!
//! Without the feature, the timers never look (the code that does is not built).

/// Whether a timer made now on this thread must run on tokio's timer (tokio's clock in
/// this thread's runtime is paused, or shifted from real time by an earlier pause).
#[cfg(feature = "test-util")]
pub(crate) fn on_tokio() -> bool {
    let before = std::time::Instant::now();
    let tokio = tokio::time::Instant::now().into_std();
    let after = std::time::Instant::now();
    if tokio < before || tokio > after {
        return true;
    }
    while std::time::Instant::now() <= tokio {
        std::hint::spin_loop();
    }
    tokio::time::Instant::now().into_std() == tokio
}

/// A tokio timeout, under feature `test-util`.
#[cfg(feature = "test-util")]
pub(crate) type TokioTimeout<F> = tokio::time::Timeout<F>;

/// Without feature `test-util`, a type with no value, so that the variant of
/// [`Timeout`](super::Timeout) that holds it takes no room and its branches compile away.
#[cfg(not(feature = "test-util"))]
pub(crate) struct TokioTimeout<F>(std::convert::Infallible, std::marker::PhantomData<F>);

#[cfg(not(feature = "test-util"))]
impl<F> TokioTimeout<F> {
    pub(crate) fn get_ref(&self) -> &F {
        match self.0 {}
    }

    pub(crate) fn get_mut(&mut self) -> &mut F {
        match self.0 {}
    }

    pub(crate) fn into_inner(self) -> F {
        match self.0 {}
    }
}

#[cfg(not(feature = "test-util"))]
impl<F: std::future::Future> std::future::Future for TokioTimeout<F> {
    type Output = Result<F::Output, std::convert::Infallible>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.0 {}
    }
}
