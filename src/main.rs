//! The `haul` binary: parse, validate, run, and map the outcome to an exit code.

use clap::Parser;

use haul::cli::Cli;
use haul::config::Config;
use haul::error::exit;

fn main() {
    let cli = Cli::parse();
    let code = match Config::from_cli(cli).and_then(|cfg| haul::cmd::run(&cfg)) {
        Ok(()) => exit::OK,
        Err(haul::Error::Reported { code }) => code,
        Err(e) => {
            eprintln!("haul: error: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}
