//! The `loom` command-line tool (native only).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::conformance::{self, CheckKind, Outcome};

#[derive(Parser)]
#[command(name = "loom", about = "Inspect, convert and check Loom checkpoints", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Loom-written conformance corpus (manifest.json + cases/) and compare our output with Loom's.
    Conformance {
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = Check::Formats)]
        check: Check,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Check {
    Formats,
    Forward,
    All,
}

/// Entry point of the `loom` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Conformance { dir, check } => {
            let kind = match check {
                Check::Formats => CheckKind::Formats,
                Check::Forward => CheckKind::Forward,
                Check::All => CheckKind::All,
            };
            match conformance::run(&dir, kind) {
                Ok(report) => {
                    for (id, outcome) in &report.cases {
                        if let Outcome::Failed(reason) = outcome {
                            println!("FAIL {id}: {reason}");
                        }
                    }
                    println!("{}", report.summary());
                    if report.failed() > 0 {
                        ExitCode::from(1)
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                Err(e) => {
                    eprintln!("loom conformance: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
