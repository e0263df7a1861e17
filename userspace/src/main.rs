//! The `sysprof` binary: parse, dispatch, print the error as one line.
//!
//! Exit codes: 0 success, 1 failure while recording or writing, 2 a problem
//! with the request (bad option, unknown pid, unwritable output).

use clap::{CommandFactory, Parser};

use sysprof::cli::{Cli, Command, Generate};
use sysprof::error::RecordError;

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Record(args) => exit_code("sysprof", sysprof::record::run(args)),
        Command::Agent(args) => exit_code("sysprof agent", sysprof::agent::run(*args)),
        Command::Show(args) => exit_code("sysprof", sysprof::show::run(args)),
        Command::View(args) => exit_code("sysprof", sysprof::view::run(args)),
        Command::Report(args) => exit_code("sysprof", sysprof::report::run(args)),
        Command::Generate { what, dir } => exit_code("sysprof", generate(what, &dir).map(|()| 0)),
        Command::Validate { path } => match sysprof::record::validate_file(&path) {
            Ok(threads) => {
                println!(
                    "{}: valid ({threads} threads)",
                    sysprof::escape::path(&path)
                );
                0
            }
            Err(e) => {
                eprintln!("sysprof: {}", sysprof::escape::escape(&e.to_string()));
                1
            }
        },
    };
    std::process::exit(code);
}

/// A command's exit status; its error, if any, said on one line after `prefix`.
fn exit_code(prefix: &str, result: Result<i32, RecordError>) -> i32 {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{prefix}: {}", sysprof::escape::escape(&e.to_string()));
            e.exit_code()
        }
    }
}

/// The man pages (into `dir`, each through an unpredictable temporary
/// renamed into place) or a shell's completion script (on stdout), from the
/// clap definitions.
fn generate(what: Generate, dir: &std::path::Path) -> Result<(), RecordError> {
    use clap_complete::Shell;
    let mut command = Cli::command();
    let shell = match what {
        Generate::Man => {
            command.build();
            let mut pages = vec![("sysprof".to_string(), command.clone())];
            for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
                let name = format!("sysprof-{}", sub.get_name());
                pages.push((name.clone(), sub.clone().name(name)));
            }
            for (name, page) in pages {
                let path = dir.join(format!("{name}.1"));
                let out = sysprof::profile::output::OutputFile::create(&path)?;
                out.commit_with(|w| clap_mangen::Man::new(page).render(w))?;
                println!("{}", path.display());
            }
            return Ok(());
        }
        Generate::Bash => Shell::Bash,
        Generate::Zsh => Shell::Zsh,
        Generate::Fish => Shell::Fish,
        Generate::Elvish => Shell::Elvish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "sysprof", &mut script);
    use std::io::Write;
    std::io::stdout()
        .lock()
        .write_all(&script)
        .map_err(RecordError::Stdout)
}
