//! The `haul` binary: parse, validate, run, and map the outcome to an exit code.

use haul::config::Config;
use haul::error::exit;

fn main() {
    // First, before any thread: every thread started later inherits the blocked signals.
    haul::signals::install();
    let cli = haul::cli::parse();
    let json = cli.json;
    let cfg = Config::from_cli(cli).inspect_err(|e| {
        // A run that fails prints its JSON object itself (cmd); here, a bad command line.
        if json {
            haul::stdio::println(&haul::progress::failure_json(&e.to_string(), e.exit_code()));
        }
    });
    let code = match cfg.and_then(|cfg| haul::cmd::run(&cfg)) {
        Ok(()) => exit::OK,
        Err(haul::Error::Reported { code }) => code,
        Err(e) => {
            eprintln!("{}", haul::progress::error_line(&e));
            e.exit_code()
        }
    };
    std::process::exit(code);
}
