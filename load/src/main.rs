//! `shardwheel-load`: millions of timers through shardwheel's engine, then a table of what
//! it did (throughput, memory, lateness percentiles, CPU), or JSON, an `.hgrm` file and an
//! SVG plot of the lateness distribution; or a soak (`--duration 10m`) that checks the
//! engine's accounting and memory over a long run; or durable jobs through shardwheel-redis
//! on a real Redis (`--scenario durable`). `shardwheel-load --help` lists the flags.

mod config;
mod durable;
mod report;
mod run;
mod soak;

use clap::Parser;
use mimalloc::MiMalloc;
use std::io::IsTerminal;
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() -> ExitCode {
    // clap prints its own errors and exits with code 2 for bad flags.
    let args = config::Args::parse();
    let config = match config::Config::from_args(&args) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("shardwheel-load: {message}");
            return ExitCode::from(2);
        }
    };
    if config.scenario == config::Scenario::Soak {
        let outcome = soak::soak(&soak::Settings::new(&config), &mut |line| {
            println!("{line}");
        });
        for line in outcome.summary() {
            println!("{line}");
        }
        return if outcome.passed() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if config.scenario == config::Scenario::Durable {
        return match durable::durable(&config) {
            Ok((lines, passed)) => {
                for line in lines {
                    println!("{line}");
                }
                if passed {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(message) => {
                eprintln!("shardwheel-load: {message}");
                ExitCode::from(2)
            }
        };
    }
    let progress = !args.json && std::io::stderr().is_terminal();
    let report = run::run(&config, progress);
    if args.json {
        println!("{}", report::json(&report));
    } else {
        print!("{}", report::table(&report));
    }
    let mut failed = false;
    if let Some(path) = &args.hgrm
        && let Err(error) = report::write_hgrm(&report, path)
    {
        eprintln!("shardwheel-load: cannot write {}: {error}", path.display());
        failed = true;
    }
    if let Some(path) = &args.plot
        && let Err(error) = report::plot(&report, path)
    {
        eprintln!("shardwheel-load: {error}");
        failed = true;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
