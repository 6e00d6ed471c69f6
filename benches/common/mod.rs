//! What the benchmarks share: the seeded random stream of benches/README.md, medians
//! and percentiles, the machine's load (quoted with every run), and the cheapest clock.

#![allow(dead_code)] // each bench uses part of it

/// CPU time, the process's and other processes' (through libc, a dependency of the
/// `engine` feature: the churn bench builds without it).
#[cfg(feature = "engine")]
pub mod cpu;

/// The cheapest clock, for the peers that stand for a timer's least cost.
pub mod clock;

/// SplitMix64, seeded 42 for every implementation (benches/README.md).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (multiply-shift, no division on the hot path).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + ((u128::from(self.next()) * u128::from(hi - lo + 1)) >> 64) as u64
    }
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The `p`-th quantile (0..=1) of `sorted` (nearest rank), or 0 for no values.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A size field of /proc/self/status ("VmRSS:", "VmHWM:"), in bytes; 0 if it cannot be read.
pub fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}
