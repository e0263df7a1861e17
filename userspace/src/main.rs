//! The `sysprof` binary: parse, dispatch, print the error as one line.
//!
//! Exit codes: 0 success, 1 failure while recording or writing, 2 a problem
//! with the request (bad option, unknown pid, unwritable output).

use clap::Parser;

use sysprof::cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Record(args) => match sysprof::record::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("sysprof: {e}");
                e.exit_code()
            }
        },
        Command::Agent(args) => match sysprof::agent::run(*args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("sysprof agent: {e}");
                e.exit_code()
            }
        },
        Command::Show(args) => match sysprof::show::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("sysprof: {e}");
                e.exit_code()
            }
        },
        Command::Validate { path } => match sysprof::record::validate_file(&path) {
            Ok(threads) => {
                println!("{}: valid ({threads} threads)", path.display());
                0
            }
            Err(e) => {
                eprintln!("sysprof: {e}");
                1
            }
        },
    };
    std::process::exit(code);
}
