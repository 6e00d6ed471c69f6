//! What a run prints and writes: a table, JSON, the `.hgrm` distribution, an SVG plot.

use crate::run::Report;
use plotters::prelude::*;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// The lateness percentiles the table, the JSON and the plot show.
const QUANTILES: [(&str, f64); 5] = [
    ("p50", 0.5),
    ("p90", 0.9),
    ("p99", 0.99),
    ("p99_9", 0.999),
    ("max", 1.0),
];

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// The human-readable table.
pub fn table(report: &Report) -> String {
    let config = &report.config;
    let stats = &report.stats;
    let lateness: Vec<String> = QUANTILES
        .iter()
        .map(|(name, q)| {
            format!(
                "{} {:.2} ms",
                name.replace('_', "."),
                ms(stats.lateness(*q))
            )
        })
        .collect();
    let memory = report.bytes_per_timer.map_or("n/a".to_string(), |bytes| {
        format!("{bytes:.1} B (peak RSS growth / pending peak)")
    });
    let mut out = format!(
        "shardwheel-load: {}: {} timers, {} producers, {} shards, tick {:?}, delays {}, {:.0} % cancelled\n",
        format!("{:?}", config.scenario).to_lowercase(),
        config.timers,
        config.producers,
        config.shards,
        config.tick,
        config.delays,
        config.cancel * 100.0,
    );
    let rows = [
        (
            "throughput",
            format!(
                "{:.2} M ops/s (schedule + cancel, {} ops in {:.2} s)",
                report.operations_per_s() / 1e6,
                report.operations,
                report.producing.as_secs_f64()
            ),
        ),
        ("pending peak", report.pending_peak.to_string()),
        ("memory/timer", memory),
        ("lateness", lateness.join("  ")),
        (
            "timers",
            format!(
                "scheduled {}  fired {}  cancelled {}  reset {}  handed back {}  panicked {}",
                stats.scheduled,
                stats.fired,
                stats.cancelled,
                stats.reset,
                report.handed_back,
                stats.panicked
            ),
        ),
        (
            "reapers",
            format!(
                "{} passes, {} cascades, p99 {} messages taken per pass, {} producer yields, {} rescues",
                stats.passes,
                stats.cascaded,
                stats.drained_per_pass(0.99),
                stats.yielded,
                stats.rescued
            ),
        ),
        (
            "CPU",
            format!(
                "{:.2} s over {:.2} s{}: {:.2} cores busy",
                report.cpu.as_secs_f64(),
                config.idle.unwrap_or(report.wall).as_secs_f64(),
                if config.idle.is_some() { " idle" } else { "" },
                report.cores_busy()
            ),
        ),
    ];
    for (name, value) in rows {
        out += &format!("  {name:<14}{value}\n");
    }
    out
}

/// The same figures, for machines.
pub fn json(report: &Report) -> Value {
    let config = &report.config;
    let stats = &report.stats;
    let lateness: serde_json::Map<String, Value> = QUANTILES
        .iter()
        .map(|(name, q)| (format!("{name}_ms"), json!(ms(stats.lateness(*q)))))
        .collect();
    json!({
        "scenario": format!("{:?}", config.scenario).to_lowercase(),
        "config": {
            "timers": config.timers,
            "producers": config.producers,
            "shards": config.shards,
            "tick_ms": ms(config.tick),
            "delays": config.delays.to_string(),
            "cancel": config.cancel,
            "rate_per_producer": config.rate,
            "idle_s": config.idle.map(|idle| idle.as_secs_f64()),
        },
        "operations": report.operations,
        "operations_per_s": report.operations_per_s(),
        "producing_s": report.producing.as_secs_f64(),
        "wall_s": report.wall.as_secs_f64(),
        "pending_peak": report.pending_peak,
        "bytes_per_timer": report.bytes_per_timer,
        "lateness": lateness,
        "scheduled": stats.scheduled,
        "fired": stats.fired,
        "cancelled": stats.cancelled,
        "reset": stats.reset,
        "panicked": stats.panicked,
        "handed_back": report.handed_back,
        "passes": stats.passes,
        "yielded": stats.yielded,
        "rescued": stats.rescued,
        "slots": stats.slots,
        "cascaded": stats.cascaded,
        "cpu_s": report.cpu.as_secs_f64(),
        "cores_busy": report.cores_busy(),
    })
}

/// Writes the `.hgrm` lateness distribution to `path`.
///
/// # Errors
///
/// The file's.
pub fn write_hgrm(report: &Report, path: &Path) -> std::io::Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    report.stats.write_hgrm(&mut file)?;
    std::io::Write::flush(&mut file)
}

/// Draws lateness against percentile, on the "nines" scale of HdrHistogram's plots.
///
/// # Errors
///
/// What plotters reports (a file that cannot be written, say), as text.
pub fn plot(report: &Report, path: &Path) -> Result<(), String> {
    // x: the number of nines, -log10(1 - q), up to six (p99.9999), where the maximum sits.
    let nines = |q: f64| (-(1.0 - q).log10()).min(6.0);
    let points: Vec<(f64, f64)> = (0..=600)
        .map(|step| {
            let x = f64::from(step) / 100.0;
            let q = if step == 600 {
                1.0
            } else {
                1.0 - 10f64.powf(-x)
            };
            (nines(q), ms(report.stats.lateness(q)))
        })
        .collect();
    let top = points.iter().map(|&(_, y)| y).fold(0.0, f64::max).max(0.01) * 1.1;
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    let error = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| error(&e))?;
    let title = format!(
        "shardwheel lateness, {}: {} timers, tick {:?}",
        format!("{:?}", report.config.scenario).to_lowercase(),
        report.config.timers,
        report.config.tick
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        // Room for the last percentile label, centred on the right edge.
        .margin_right(40)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..6.0, 0.0..top)
        .map_err(|e| error(&e))?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("lateness (ms)")
        .x_labels(7)
        .x_label_formatter(&|x| {
            let percent = 100.0 * (1.0 - 10f64.powf(-x));
            let digits = format!("{percent:.4}");
            format!("{}%", digits.trim_end_matches('0').trim_end_matches('.'))
        })
        .draw()
        .map_err(|e| error(&e))?;
    chart
        .draw_series(LineSeries::new(points, &BLUE))
        .map_err(|e| error(&e))?;
    root.present().map_err(|e| error(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Delays, Scenario};

    fn small_report() -> Report {
        let config = Config {
            scenario: Scenario::W2,
            timers: 5_000,
            producers: 1,
            delays: Delays::Uniform(Duration::ZERO, Duration::from_millis(20)),
            cancel: 0.0,
            rate: None,
            idle: None,
            tick: Duration::from_millis(1),
            shards: 1,
            duration: None,
            redis_url: None,
        };
        crate::run::run(&config, false)
    }

    #[test]
    fn the_outputs_have_their_shape() {
        let report = small_report();
        let json = json(&report);
        for key in [
            "operations_per_s",
            "pending_peak",
            "bytes_per_timer",
            "scheduled",
            "fired",
            "cancelled",
            "cpu_s",
        ] {
            assert!(json.get(key).is_some(), "no {key} in {json}");
        }
        assert_eq!(json["scenario"], "w2");
        assert_eq!(json["fired"], 5_000);
        assert!(json["lateness"]["p99_ms"].as_f64().unwrap() >= 0.0);
        let text = serde_json::to_string(&json).unwrap();
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["fired"], json["fired"]);
        assert!(table(&report).contains("fired 5000"));

        let dir = std::env::temp_dir().join(format!("shardwheel-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let hgrm = dir.join("lateness.hgrm");
        write_hgrm(&report, &hgrm).unwrap();
        let hgrm = std::fs::read_to_string(hgrm).unwrap();
        assert!(hgrm.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)"));
        assert!(hgrm.contains("#[Max     ="), "{hgrm}");
        // The last row of the distribution counts every timer that fired.
        let last = hgrm
            .lines()
            .rfind(|l| !l.starts_with('#') && !l.trim().is_empty());
        assert_eq!(last.unwrap().split_whitespace().nth(2), Some("5000"));
        let svg = dir.join("lateness.svg");
        plot(&report, &svg).unwrap();
        let svg = std::fs::read_to_string(svg).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
