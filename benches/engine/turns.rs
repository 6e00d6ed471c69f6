//! Implementations taking turns over rounds (W1, W3), and the ratios made of their rates:
//! only of rounds whose turns all ran under the same load (see the bench's module doc).

use super::Probe;
use crate::common::cpu::Others;
use crate::common::{load_average, median};

/// A round of one implementation (W1, W3): its name and how to run it with a size (P, T),
/// which gives its figures (operations per second, unless said otherwise).
pub(super) type Run<R = f64> = (&'static str, fn(usize, &'static Probe) -> R);

/// The median, over the rounds run under the same load (`same`), of `a`'s rate over `b`'s
/// in the same round; NaN where no round was (no ratio is made of rounds under different
/// loads).
pub(super) fn paired(a: &[f64], b: &[f64], same: &[bool]) -> f64 {
    let ratios = a.iter().zip(b).zip(same);
    median_or_nan(
        ratios
            .filter(|(_, same)| **same)
            .map(|((a, b), _)| a / b)
            .collect(),
    )
}

/// How many times more time per operation `theirs` adds to the loop's own (`floor`) than
/// `ours` does, from rates (operations per second) measured round by round: the median of
/// the ratios of the rounds run under the same load (`same`); NaN where none was.
pub(super) fn over_floor(ours: &[f64], theirs: &[f64], floor: &[f64], same: &[bool]) -> f64 {
    let ratios = ours
        .iter()
        .zip(theirs)
        .zip(floor)
        .zip(same)
        .filter(|(_, same)| **same)
        .map(|(((ours, theirs), floor), _)| {
            let floor = 1.0 / floor;
            (1.0 / theirs - floor) / (1.0 / ours - floor)
        });
    median_or_nan(ratios.collect())
}

fn median_or_nan(values: Vec<f64>) -> f64 {
    if values.is_empty() {
        f64::NAN
    } else {
        median(values)
    }
}

/// How far apart (in cores' worth of other processes' CPU, beyond the readings' own error)
/// the turns of a round may be for the round to count in a ratio: as in the futures bench.
const SAME_LOAD: f64 = 0.25;

/// What `take_turns` measured: each implementation's figures, round by round, and whether
/// each round's turns ran under the same load (other processes took within `SAME_LOAD`
/// of a core of each other's CPU during every turn).
pub(super) struct Turns<R, const N: usize> {
    pub(super) figures: [Vec<R>; N],
    pub(super) same_load: Vec<bool>,
}

impl<R, const N: usize> Turns<R, N> {
    /// `same_load_rounds=<rounds that count>/<rounds>`, for a result line.
    pub(super) fn same_load_rounds(&self) -> String {
        let same = self.same_load.iter().filter(|same| **same).count();
        format!("same_load_rounds={same}/{}", self.same_load.len())
    }
}

/// Runs `rounds` rounds of each of `runs` with `size` (P, T), each with its probe; the
/// implementations take turns, each starting a round in turn, so that none always
/// inherits another's mess. Prints, as a comment, each round's load average at its start
/// and the CPU other processes took during each turn (in cores).
pub(super) fn take_turns<R, const N: usize>(
    label: &str,
    rounds: usize,
    runs: &[Run<R>; N],
    size: usize,
    probes: [&'static Probe; N],
) -> Turns<R, N> {
    let mut figures: [Vec<R>; N] = std::array::from_fn(|_| Vec::new());
    let mut same_load = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let load = load_average();
        let mut others = [(0.0, 0.0); N];
        for turn in 0..N {
            let at = (round + turn) % N;
            let during = Others::start();
            figures[at].push((runs[at].1)(size, probes[at]));
            others[at] = (during.cores(), during.resolution());
        }
        let low = others.iter().map(|o| o.0).fold(f64::INFINITY, f64::min);
        let high = others.iter().map(|o| o.0).fold(0.0, f64::max);
        let error = others.iter().map(|o| o.1).fold(0.0, f64::max);
        same_load.push(high - low <= SAME_LOAD + 2.0 * error);
        let turns: Vec<String> = runs
            .iter()
            .zip(&others)
            .map(|((name, _), (cores, _))| format!("{name} {cores:.2}"))
            .collect();
        println!(
            "# {label} round {}: load average {}, other processes' cores: {}",
            round + 1,
            load.split(' ').next().unwrap_or("?"),
            turns.join(", ")
        );
    }
    Turns { figures, same_load }
}
