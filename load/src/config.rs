//! The command line: flags, scenarios and the run they describe.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// Millions of timers through shardwheel's engine, then what it did: throughput, memory,
/// how late timers fired, CPU.
#[derive(Parser, Debug)]
#[command(name = "shardwheel-load", version)]
pub struct Args {
    /// The workload; the other flags override its settings [default: mixed, or soak when
    /// --duration is given].
    #[arg(long, value_enum)]
    pub scenario: Option<Scenario>,
    /// Run the soak for this long, e.g. `10m` (implies `--scenario soak`; the soak's
    /// default is 10 minutes).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Timers to schedule, over all producers.
    #[arg(long)]
    pub timers: Option<u64>,
    /// Producer threads [default: the number of cores].
    #[arg(long)]
    pub producers: Option<usize>,
    /// Delays: `uniform:MIN..MAX`, `exp:MEAN` or `fixed:DELAY`, e.g. `uniform:1ms..1s`.
    #[arg(long, value_parser = parse_delays)]
    pub delay: Option<Delays>,
    /// Share of timers cancelled shortly after they are scheduled, 0 to 1.
    #[arg(long)]
    pub cancel: Option<f64>,
    /// Timers scheduled per second per producer (default: as fast as it goes; 50,000 in
    /// the soak).
    #[arg(long)]
    pub rate: Option<u64>,
    /// After scheduling, measure the CPU used over this much idle time, then stop without
    /// waiting for the timers (W5), e.g. `5s`.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub idle: Option<Duration>,
    /// The wheel's tick, e.g. `1ms` or `100us`.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub tick: Option<Duration>,
    /// Shards (reaper threads) [default: the number of cores].
    #[arg(long)]
    pub shards: Option<usize>,
    /// Print the results as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write the lateness distribution here, in HdrHistogram's `.hgrm` text format.
    #[arg(long, value_name = "FILE")]
    pub hgrm: Option<PathBuf>,
    /// Draw the lateness distribution here, as an SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// The Redis server of `--scenario durable`, e.g. `redis://127.0.0.1:6379` [default:
    /// a redis-server started for the run, which needs redis-server on the PATH].
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
}

/// The workloads of benches/README.md that exercise the engine, and a mixed default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// 10M timers from every core, delays 1 ms to 1 s, 90 % cancelled, the rest fire.
    Mixed,
    /// W1: churn, one thread: 2M schedules, each cancelled shortly after (about 1,000
    /// pending at a time), delays 1 ms to 60 s; nothing fires.
    W1,
    /// W2: one thread schedules 1M timers due within a second; all fire.
    W2,
    /// W3: request timeouts from every core, 100 ms to 10 s, 90 % cancelled.
    W3,
    /// W4: memory: 10M timers pending, due in 1 s to 600 s, then 1 idle second; stops
    /// without waiting for them.
    W4,
    /// W5: 1M timers due in 10 to 20 minutes, then 5 idle seconds: the CPU they cost.
    W5,
    /// W6: 1,000 timers a second for 5 s, due in 1 to 100 ms: precision under light load.
    W6,
    /// Soak: for --duration (10 minutes), from every core at a fixed rate (50,000 timers a
    /// second per producer), delays 1 ms to 1 s, half cancelled, a reset for every four timers,
    /// 0.1 % of callbacks panicking, periodic timers started and cancelled throughout.
    /// Prints RSS and the counts every 10 s, then checks that every timer is accounted for
    /// (fired, cancelled or handed back), that no caught panic printed anything, and that
    /// RSS ended within 10 % of its value after the first minute; exits 1 if not.
    Soak,
    /// Durable jobs through shardwheel-redis on a real Redis (--redis-url, or a redis-server
    /// started for the run with appendfsync always): 100,000 jobs from 4 producers, due in 1
    /// to 10 s, run by 2 workers; prints the rates and lateness, then checks that every job
    /// not cancelled ran once and none early; exits 1 if not.
    Durable,
}

/// How delays are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Delays {
    Uniform(Duration, Duration),
    Exponential(Duration),
    Fixed(Duration),
}

impl std::fmt::Display for Delays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Delays::Uniform(min, max) => write!(f, "uniform {min:?}..{max:?}"),
            Delays::Exponential(mean) => write!(f, "exponential, mean {mean:?}"),
            Delays::Fixed(delay) => write!(f, "fixed {delay:?}"),
        }
    }
}

fn parse_delays(text: &str) -> Result<Delays, String> {
    let duration = |s: &str| {
        humantime::parse_duration(s.trim()).map_err(|e| format!("{s:?} is not a duration: {e}"))
    };
    let (kind, rest) = text.split_once(':').ok_or_else(|| {
        format!("expected uniform:MIN..MAX, exp:MEAN or fixed:DELAY, got {text:?}")
    })?;
    match kind {
        "uniform" => {
            let (min, max) = rest
                .split_once("..")
                .ok_or_else(|| format!("expected uniform:MIN..MAX, got {text:?}"))?;
            let (min, max) = (duration(min)?, duration(max)?);
            if min > max {
                return Err(format!(
                    "the minimum delay {min:?} exceeds the maximum {max:?}"
                ));
            }
            Ok(Delays::Uniform(min, max))
        }
        "exp" => Ok(Delays::Exponential(duration(rest)?)),
        "fixed" => Ok(Delays::Fixed(duration(rest)?)),
        _ => Err(format!(
            "unknown delay distribution {kind:?}: uniform, exp or fixed"
        )),
    }
}

/// A run, all settings resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub scenario: Scenario,
    pub timers: u64,
    pub producers: usize,
    pub delays: Delays,
    pub cancel: f64,
    pub rate: Option<u64>,
    pub idle: Option<Duration>,
    pub tick: Duration,
    pub shards: usize,
    /// How long a soak runs; `None` for every other scenario.
    pub duration: Option<Duration>,
    /// The durable scenario's Redis; `None`: it starts one.
    pub redis_url: Option<String>,
}

impl Config {
    /// The scenario's settings, overridden by the flags given.
    ///
    /// # Errors
    ///
    /// A message for a setting out of range.
    pub fn from_args(args: &Args) -> Result<Config, String> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ms = Duration::from_millis;
        let scenario = args.scenario.unwrap_or(if args.duration.is_some() {
            Scenario::Soak
        } else {
            Scenario::Mixed
        });
        let mut config = match scenario {
            Scenario::Mixed => {
                Config::preset(10_000_000, cores, Delays::Uniform(ms(1), ms(1_000)), 0.9)
            }
            Scenario::W1 => Config::preset(2_000_000, 1, Delays::Uniform(ms(1), ms(60_000)), 1.0),
            Scenario::W2 => Config::preset(1_000_000, 1, Delays::Uniform(ms(0), ms(1_000)), 0.0),
            Scenario::W3 => {
                Config::preset(10_000_000, cores, Delays::Uniform(ms(100), ms(10_000)), 0.9)
            }
            Scenario::W4 => Config {
                idle: Some(Duration::from_secs(1)),
                ..Config::preset(10_000_000, 1, Delays::Uniform(ms(1_000), ms(600_000)), 0.0)
            },
            Scenario::W5 => Config {
                idle: Some(Duration::from_secs(5)),
                ..Config::preset(
                    1_000_000,
                    1,
                    Delays::Uniform(ms(601_000), ms(1_200_000)),
                    0.0,
                )
            },
            Scenario::W6 => Config {
                rate: Some(1_000),
                ..Config::preset(5_000, 1, Delays::Uniform(ms(1), ms(100)), 0.0)
            },
            Scenario::Durable => {
                Config::preset(100_000, 4, Delays::Uniform(ms(1_000), ms(10_000)), 0.0)
            }
            // Timers without end: the soak stops when its time is up.
            Scenario::Soak => Config {
                rate: Some(50_000),
                duration: Some(Duration::from_secs(600)),
                ..Config::preset(u64::MAX, cores, Delays::Uniform(ms(1), ms(1_000)), 0.5)
            },
        };
        config.scenario = scenario;
        if scenario == Scenario::Soak {
            Config::refuse(
                args,
                "the soak, which runs for --duration and prints its own lines",
                &[(args.timers.is_some(), "--timers")],
            )?;
        } else if scenario == Scenario::Durable {
            Config::refuse(
                args,
                "the durable scenario, whose engine is Redis and which prints its own lines",
                &[
                    (args.tick.is_some(), "--tick"),
                    (args.shards.is_some(), "--shards"),
                    (args.rate.is_some(), "--rate"),
                ],
            )?;
        } else if args.redis_url.is_some() {
            return Err("--redis-url is for --scenario durable".into());
        }
        if scenario != Scenario::Soak && args.duration.is_some() {
            return Err(format!(
                "--duration is the soak's: --scenario {} runs until its timers are done",
                format!("{scenario:?}").to_lowercase()
            ));
        }
        config.shards = cores;
        if let Some(timers) = args.timers {
            config.timers = timers;
        }
        if let Some(producers) = args.producers {
            config.producers = producers;
        }
        if let Some(delays) = args.delay {
            config.delays = delays;
        }
        if let Some(cancel) = args.cancel {
            config.cancel = cancel;
        }
        config.rate = args.rate.or(config.rate);
        config.idle = args.idle.or(config.idle);
        config.tick = args.tick.unwrap_or(config.tick);
        config.shards = args.shards.unwrap_or(config.shards);
        config.duration = args.duration.or(config.duration);
        config.redis_url.clone_from(&args.redis_url);
        config.check()?;
        Ok(config)
    }

    fn preset(timers: u64, producers: usize, delays: Delays, cancel: f64) -> Config {
        Config {
            scenario: Scenario::Mixed,
            timers,
            producers,
            delays,
            cancel,
            rate: None,
            idle: None,
            tick: Duration::from_millis(1),
            shards: 1,
            duration: None,
            redis_url: None,
        }
    }

    /// Refuses the flags that `what` (a scenario printing its own lines) has no use for:
    /// the report's and `others`.
    fn refuse(args: &Args, what: &str, others: &[(bool, &str)]) -> Result<(), String> {
        let report = [
            (args.idle.is_some(), "--idle"),
            (args.json, "--json"),
            (args.hgrm.is_some(), "--hgrm"),
            (args.plot.is_some(), "--plot"),
        ];
        match others.iter().chain(&report).find(|(given, _)| *given) {
            Some((_, flag)) => Err(format!("{flag} is not for {what}")),
            None => Ok(()),
        }
    }

    fn check(&self) -> Result<(), String> {
        if self.timers == 0 {
            return Err("--timers must be at least 1".into());
        }
        if self.producers == 0 {
            return Err("--producers must be at least 1".into());
        }
        if self.shards == 0 {
            return Err("--shards must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.cancel) {
            return Err(format!(
                "--cancel is a share between 0 and 1, not {}",
                self.cancel
            ));
        }
        if self.rate == Some(0) {
            return Err("--rate must be at least 1 timer a second".into());
        }
        if self.tick.is_zero() {
            return Err("--tick must be longer than zero".into());
        }
        if self.duration.is_some_and(|duration| duration.is_zero()) {
            return Err("--duration must be longer than zero".into());
        }
        if self.scenario == Scenario::Soak && self.rate.is_none() {
            return Err("the soak runs at a fixed --rate".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(flags: &[&str]) -> Result<Config, String> {
        let args =
            Args::try_parse_from(std::iter::once("shardwheel-load").chain(flags.iter().copied()))
                .map_err(|e| e.to_string())?;
        Config::from_args(&args)
    }

    #[test]
    fn flags_override_the_scenario() {
        let config = parse(&["--scenario", "w3", "--timers", "1000", "--cancel", "0.5"]).unwrap();
        assert_eq!(config.scenario, Scenario::W3);
        assert_eq!((config.timers, config.cancel), (1000, 0.5));
        assert_eq!(
            config.delays,
            Delays::Uniform(Duration::from_millis(100), Duration::from_secs(10))
        );
        let config = parse(&["--delay", "exp:250ms", "--tick", "100us", "--shards", "3"]).unwrap();
        assert_eq!(config.scenario, Scenario::Mixed);
        assert_eq!(
            config.delays,
            Delays::Exponential(Duration::from_millis(250))
        );
        assert_eq!(
            (config.tick, config.shards),
            (Duration::from_micros(100), 3)
        );
        let w5 = parse(&["--scenario", "w5"]).unwrap();
        assert_eq!(w5.idle, Some(Duration::from_secs(5)));
        let w1 = parse(&["--scenario", "w1"]).unwrap();
        assert_eq!((w1.producers, w1.cancel), (1, 1.0));
        assert_eq!(w1.duration, None);
    }

    #[test]
    fn a_duration_means_the_soak() {
        let soak = parse(&["--duration", "90s", "--rate", "1000"]).unwrap();
        assert_eq!(soak.scenario, Scenario::Soak);
        assert_eq!(soak.duration, Some(Duration::from_secs(90)));
        assert_eq!(soak.rate, Some(1000));
        let soak = parse(&["--scenario", "soak"]).unwrap();
        assert_eq!(soak.duration, Some(Duration::from_secs(600)));
        assert_eq!(
            soak.delays,
            Delays::Uniform(Duration::from_millis(1), Duration::from_secs(1))
        );
    }

    #[test]
    fn the_durable_scenario_is_asked_for_and_takes_a_redis_url() {
        assert_eq!(parse(&[]).unwrap().scenario, Scenario::Mixed);
        let durable = parse(&["--scenario", "durable"]).unwrap();
        assert_eq!(
            (durable.timers, durable.producers, durable.redis_url),
            (100_000, 4, None)
        );
        let durable = parse(&[
            "--scenario",
            "durable",
            "--redis-url",
            "redis://10.0.0.1:6379",
            "--timers",
            "500",
            "--cancel",
            "0.25",
        ])
        .unwrap();
        assert_eq!(durable.redis_url.as_deref(), Some("redis://10.0.0.1:6379"));
        assert_eq!((durable.timers, durable.cancel), (500, 0.25));
    }

    #[test]
    fn bad_flags_are_errors_with_a_reason() {
        for (flags, reason) in [
            (&["--cancel", "1.5"][..], "between 0 and 1"),
            (&["--timers", "0"], "at least 1"),
            (&["--producers", "0"], "at least 1"),
            (&["--delay", "uniform:1s..1ms"], "exceeds the maximum"),
            (&["--delay", "normal:1s"], "unknown delay distribution"),
            (&["--delay", "fixed:soon"], "not a duration"),
            (&["--tick", "0s"], "longer than zero"),
            (&["--scenario", "w7"], "invalid value"),
            (&["--timers", "-3"], "unexpected argument"),
            (&["--duration", "0s"], "longer than zero"),
            (&["--scenario", "w2", "--duration", "1m"], "the soak's"),
            (&["--duration", "1m", "--timers", "5"], "not for the soak"),
            (&["--duration", "1m", "--json"], "not for the soak"),
            (
                &["--redis-url", "redis://127.0.0.1"],
                "for --scenario durable",
            ),
            (&["--scenario", "durable", "--json"], "not for the durable"),
            (
                &["--scenario", "durable", "--tick", "1ms"],
                "not for the durable",
            ),
            (&["--scenario", "durable", "--duration", "1m"], "the soak's"),
        ] {
            let error = parse(flags).expect_err(&format!("{flags:?} accepted"));
            assert!(error.contains(reason), "{flags:?}: {error}");
        }
    }
}
