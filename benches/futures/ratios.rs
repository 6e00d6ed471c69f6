//! How the futures bench compares the rounds of its implementations: a ratio of rates is
//! taken only between two turns of one round that ran under the same load (other
//! processes' CPU during each), and the figures are medians over such pairs.

use super::{Impl, Measured, Round};
use crate::common::median;

/// How far apart (in cores' worth of other processes' CPU, beyond the readings' own
/// error) two turns of a round may be and still be compared: a ratio of rates is a
/// ratio of the two implementations only if the machine was as busy with other work
/// during both.
const SAME_LOAD: f64 = 0.25;

/// Whether rounds `a` and `b` ran under the same load (see `SAME_LOAD`).
fn same_load<O>(a: &Round<O>, b: &Round<O>) -> bool {
    (a.others - b.others).abs() <= SAME_LOAD + a.others_resolution + b.others_resolution
}

impl<O> Measured<O> {
    /// Each implementation's rounds, in print order.
    pub(super) fn each(&self) -> impl Iterator<Item = (Impl, &[Round<O>])> {
        self.0.iter().map(|(i, rounds)| (*i, rounds.as_slice()))
    }

    /// Operations per second, and CPU nanoseconds per operation: medians over the rounds.
    pub(super) fn rate(rounds: &[Round<O>]) -> String {
        format!(
            "per_s={:.0} cpu_ns_per_op={:.1}",
            median(rounds.iter().map(|r| r.per_s).collect()),
            median(rounds.iter().map(|r| r.cpu_ns_per_op).collect()),
        )
    }

    /// Prints `RESULT <label> shardwheel vs_<peer>=..` for each peer measured beside it:
    /// the median of the per-round ratios, over the rounds whose two turns ran under the
    /// same load (`same_load`), each of which a comment before it lists (a claim about
    /// every round reads them there); `unpaired=` counts the pairs left out, and a peer with no
    /// pair left has no ratio (`vs_<peer>=none`). Beside the floor's ratio,
    /// `over_floor_ns=`: the median over the same rounds of the time per operation a
    /// timeout adds to the floor's (of the rate, so over both workers: 1e9 / ops_per_s);
    /// beside `waker-and-clock`'s, `over_parts_ns=`: what shardwheel adds to that peer's,
    /// its timer's own work. Then, if both ran, `RESULT <label> waker-and-clock
    /// over_floor_ns=..`: what a timeout costs with no timer at all.
    pub(super) fn print_ratios(&self, label: &str) {
        let find = |wanted: Impl| self.each().find(|(i, _)| *i == wanted).map(|(_, r)| r);
        let Some(ours) = find(Impl::Shardwheel) else {
            return;
        };
        let mut unpaired = 0;
        let ratios: Vec<String> = self
            .each()
            .filter(|(i, _)| *i != Impl::Shardwheel)
            .map(|(peer, theirs)| {
                let pairs = same_load_pairs(ours, theirs);
                unpaired += ours.len() - pairs.len();
                if pairs.is_empty() {
                    return format!("vs_{}=none", peer.name());
                }
                let by_round: Vec<f64> = pairs.iter().map(|(a, b)| a / b).collect();
                let each: Vec<String> = by_round.iter().map(|r| format!("{r:.2}")).collect();
                println!(
                    "# {label} shardwheel vs_{} by round: {}",
                    peer.name(),
                    each.join(" ")
                );
                let ratio = format!("vs_{}={:.2}", peer.name(), median(by_round));
                match peer {
                    Impl::None => format!("{ratio} over_floor_ns={:.1}", time_over(&pairs)),
                    Impl::WakerAndClock => {
                        format!("{ratio} over_parts_ns={:.1}", time_over(&pairs))
                    }
                    Impl::ThreadWheel => {
                        format!("{ratio} over_wheel_ns={:.1}", time_over(&pairs))
                    }
                    _ => ratio,
                }
            })
            .collect();
        if !ratios.is_empty() {
            println!(
                "RESULT {label} shardwheel {} unpaired={unpaired}",
                ratios.join(" ")
            );
        }
        for part in [Impl::WakerAndClock, Impl::ThreadWheel] {
            if let (Some(parts), Some(floor)) = (find(part), find(Impl::None)) {
                let pairs = same_load_pairs(parts, floor);
                if !pairs.is_empty() {
                    println!(
                        "RESULT {label} {} over_floor_ns={:.1} unpaired={}",
                        part.name(),
                        time_over(&pairs),
                        parts.len() - pairs.len()
                    );
                }
            }
        }
    }
}

/// The rates of the rounds of `a` and `b` whose two turns ran under the same load.
fn same_load_pairs<O>(a: &[Round<O>], b: &[Round<O>]) -> Vec<(f64, f64)> {
    a.iter()
        .zip(b)
        .filter(|(a, b)| same_load(a, b))
        .map(|(a, b)| (a.per_s, b.per_s))
        .collect()
}

/// The median, over `pairs` of rates, of the time per operation the first adds to the
/// second's, in nanoseconds.
fn time_over(pairs: &[(f64, f64)]) -> f64 {
    median(pairs.iter().map(|(a, b)| 1e9 / a - 1e9 / b).collect())
}
