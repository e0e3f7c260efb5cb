//! `--config FILE`: a server's options read from a TOML file.
//!
//! Owns one step before the command line is parsed: it finds
//! `--config FILE` after a subcommand that declares `--config`, reads the
//! file, and turns each key into the words of that command's long option,
//! placed right after the subcommand's name. Clap then parses one line, so
//! a value in the file is checked exactly as the same flag would be, and
//! anything on the command line, coming later, wins (the subcommands
//! parse with `args_override_self`).
//!
//! The file's keys are the command's long options (`workers`, `cpus`,
//! `evictions-per-second` or `evictions_per_second`); values are strings,
//! integers, floats, booleans, or lists of them for repeatable options:
//!
//! ```toml
//! interface = "eth1"
//! port = [7000, 7001]
//! cpus = "1-3"
//! idle = "adaptive"
//! no-table = true
//! ```
//!
//! Invariants: an unknown key, a nested table or `config` inside the file
//! is an error naming the file and the key, never ignored; a `false`
//! switch adds nothing (a switch cannot be turned off from the command
//! line either); the file is read once, before anything starts.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::PathBuf;

use clap::{ArgAction, Command};

/// Why a config file could not be used.
#[derive(Debug)]
pub struct ConfigError {
    file: PathBuf,
    what: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "config {}: {}", self.file.display(), self.what)
    }
}

impl std::error::Error for ConfigError {}

/// The command line with the file's options spliced in, and what came
/// from the file (to name it when clap rejects one of its values).
#[derive(Debug, PartialEq)]
pub struct Expanded {
    /// The words to parse.
    pub args: Vec<OsString>,
    /// The file and the long options it set, when `--config` was given.
    pub from_file: Option<(PathBuf, Vec<String>)>,
}

/// Splices the options of `--config FILE` into `args` (argv, program name
/// first) for the subcommand of `cli` named there. Without `--config`,
/// `args` come back unchanged.
pub fn expand(args: Vec<OsString>, cli: &Command) -> Result<Expanded, ConfigError> {
    let unchanged = |args| {
        Ok(Expanded {
            args,
            from_file: None,
        })
    };
    let Some((sub_at, sub)) = subcommand(&args, cli) else {
        return unchanged(args);
    };
    if !sub.get_arguments().any(|a| a.get_id() == "config") {
        return unchanged(args);
    }
    let Some(file) = config_path(&args[sub_at + 1..]) else {
        return unchanged(args);
    };
    let text = std::fs::read_to_string(&file).map_err(|e| ConfigError {
        file: file.clone(),
        what: format!("cannot read it: {e}"),
    })?;
    let (words, keys) = words_for(&text, sub, &args[sub_at + 1..]).map_err(|what| ConfigError {
        file: file.clone(),
        what,
    })?;
    let mut out = Vec::with_capacity(args.len() + words.len());
    out.extend_from_slice(&args[..=sub_at]);
    out.extend(words);
    out.extend_from_slice(&args[sub_at + 1..]);
    Ok(Expanded {
        args: out,
        from_file: Some((file, keys)),
    })
}

/// The position and the definition of the subcommand in `args`: the first
/// word after the program name that is not an option.
fn subcommand<'c>(args: &[OsString], cli: &'c Command) -> Option<(usize, &'c Command)> {
    let (at, name) = args
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, a)| !a.to_string_lossy().starts_with('-'))?;
    cli.find_subcommand(name.to_str()?).map(|c| (at, c))
}

/// The file of `--config FILE` or `--config=FILE`, before any `--`.
fn config_path(rest: &[OsString]) -> Option<PathBuf> {
    let mut words = rest
        .iter()
        .take_while(|a| a.as_os_str() != OsStr::new("--"));
    while let Some(word) = words.next() {
        let word = word.to_string_lossy();
        if word == "--config" {
            return words.next().map(PathBuf::from);
        }
        if let Some(path) = word.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    None
}

/// The command-line words for the file's keys, and the long options set.
/// A key whose option `line` sets too adds nothing: the line's values
/// replace the file's, also for a repeatable option.
fn words_for(
    text: &str,
    sub: &Command,
    line: &[OsString],
) -> Result<(Vec<OsString>, Vec<String>), String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| one_line(&e.to_string()))?;
    let mut words = Vec::new();
    let mut keys = Vec::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let arg = sub
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && long != "config")
            .ok_or_else(|| {
                format!(
                    "unknown key '{key}': the keys are the long options of steer {} (see steer {} --help)",
                    sub.get_name(),
                    sub.get_name()
                )
            })?;
        let switch = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::Count);
        let values: Vec<&toml::Value> = match value {
            toml::Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        let mut these = Vec::new();
        for value in values {
            let text = scalar(value).ok_or_else(|| {
                format!("'{key}' must be a string, a number, a boolean or a list of them")
            })?;
            match (switch, value) {
                (true, toml::Value::Boolean(true)) => these.push(format!("--{long}").into()),
                (true, toml::Value::Boolean(false)) => {}
                (true, _) => return Err(format!("'{key}' is a switch: true or false")),
                (false, _) => these.push(format!("--{long}={text}").into()),
            }
        }
        if !on_line(line, &long, arg.get_short()) {
            words.extend(these);
        }
        keys.push(long);
    }
    Ok((words, keys))
}

/// Whether the words of a command line set the option `--long` (or its
/// short form `-s`, alone or with its value attached), before any `--`.
fn on_line(line: &[OsString], long: &str, short: Option<char>) -> bool {
    line.iter()
        .map(|w| w.to_string_lossy())
        .take_while(|w| w != "--")
        .any(|w| {
            let long_form = w
                .strip_prefix("--")
                .is_some_and(|rest| rest == long || rest.starts_with(&format!("{long}=")));
            let short_form = short.is_some_and(|c| {
                w.strip_prefix('-')
                    .is_some_and(|rest| !rest.starts_with('-') && rest.starts_with(c))
            });
            long_form || short_form
        })
}

/// A value as the command line would spell it; `None` for tables and
/// dates.
fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Datetime(_) | toml::Value::Array(_) | toml::Value::Table(_) => None,
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Names the file when clap's complaint is about an option only the file
/// set (`invalid value 'x' for '--workers <N>'`).
pub fn blame(error_line: &str, expanded: &Expanded, cli_args: &[OsString]) -> Option<PathBuf> {
    let (file, keys) = expanded.from_file.as_ref()?;
    keys.iter()
        .find(|long| error_line.contains(&format!("'--{long}")) && !on_line(cli_args, long, None))
        .map(|_| file.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command as Sub};
    use clap::FromArgMatches;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    fn words(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    /// Parses as `main` does: expand, then clap with override-self.
    fn parse(line: &str) -> Result<Cli, String> {
        let command = crate::command();
        let expanded = expand(words(line), &command).map_err(|e| e.to_string())?;
        command
            .try_get_matches_from(&expanded.args)
            .and_then(|m| Cli::from_arg_matches(&m))
            .map_err(|e| e.to_string())
    }

    fn echo(cli: Cli) -> crate::echo::EchoArgs {
        match cli.command {
            Sub::Echo(a) => a,
            other => panic!("not echo: {other:?}"),
        }
    }

    const ECHO: &str = "interface = \"veth9\"\nport = [7000, 7001]\ncpus = \"1\"\nno_table = true\nsockperf = false\nduration = 2.5\n";

    #[test]
    fn a_file_sets_what_its_flags_would() {
        let f = file(ECHO);
        let args = echo(parse(&format!("steer echo --config {}", f.path().display())).unwrap());
        assert_eq!(args.engine.interface, "veth9");
        assert_eq!(args.port, vec![7000, 7001]);
        assert_eq!(
            args.engine.cpus.map(|c| c.iter().collect::<Vec<_>>()),
            Some(vec![1])
        );
        assert!(args.run.no_table);
        assert!(!args.sockperf, "a false switch adds nothing");
        assert_eq!(args.run.duration, Some(2.5));
        let same = echo(parse(&format!("steer echo --config={}", f.path().display())).unwrap());
        assert_eq!(same.port, vec![7000, 7001]);
    }

    #[test]
    fn the_command_line_overrides_the_file() {
        let f = file(ECHO);
        let line = format!(
            "steer echo -i eth7 --config {} -p 9000 --duration 1",
            f.path().display()
        );
        let args = echo(parse(&line).unwrap());
        assert_eq!(args.engine.interface, "eth7");
        assert_eq!(
            args.port,
            vec![9000],
            "a repeatable option is replaced, not appended to"
        );
        assert_eq!(args.run.duration, Some(1.0));
        assert!(
            args.run.no_table,
            "what the line does not set comes from the file"
        );
    }

    #[test]
    fn without_config_the_line_is_unchanged() {
        let line = words("steer echo -i eth0 -p 7 --cpus 1");
        let out = expand(line.clone(), &crate::command()).unwrap();
        assert_eq!(
            out,
            Expanded {
                args: line,
                from_file: None
            }
        );
        // `--config` after `--` is not an option; a subcommand without
        // `--config` is left alone.
        let line = words("steer replay -- --config x");
        assert_eq!(expand(line.clone(), &crate::command()).unwrap().args, line);
    }

    #[test]
    fn bad_files_are_refused_naming_file_and_key() {
        let cases = [
            ("wokers = 2\n", "unknown key 'wokers'"),
            ("config = \"other.toml\"\n", "unknown key 'config'"),
            ("[engine]\nworkers = 2\n", "unknown key 'engine'"),
            ("no-table = \"yes\"\n", "'no-table' is a switch"),
            ("port = 7000\nport = 7001\n", "duplicate key"),
            ("port = [[1]]\n", "'port' must be"),
        ];
        for (text, want) in cases {
            let f = file(text);
            let e = parse(&format!(
                "steer echo -i x -p 1 --config {}",
                f.path().display()
            ))
            .unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains(&f.path().display().to_string()), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let e = parse("steer echo --config /nonexistent/steer.toml").unwrap_err();
        assert!(
            e.contains("config /nonexistent/steer.toml: cannot read it"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_value_from_the_file_is_blamed_on_the_file() {
        let f = file("interface = \"x\"\nport = 1\ncpus = \"banana\"\n");
        let command = crate::command();
        // What blame says of the error `line` gets once the file is expanded.
        let blamed = |line: &str| {
            let argv = words(line);
            let expanded = expand(argv.clone(), &command).unwrap();
            let e = command
                .clone()
                .try_get_matches_from(&expanded.args)
                .unwrap_err()
                .to_string();
            (blame(&e, &expanded, &argv), e)
        };
        let (who, e) = blamed(&format!("steer echo --config {}", f.path().display()));
        assert_eq!(who, Some(f.path().to_path_buf()), "{e}");
        // The same value on the command line is the line's fault.
        let config = f.path().display();
        let (who, e) = blamed(&format!("steer echo --config {config} --cpus banana"));
        assert_eq!(who, None, "{e}");
    }

    #[test]
    fn every_server_reads_a_config() {
        for sub in ["echo", "proxy", "tcp-echo", "rfs"] {
            let command = crate::command();
            let c = command.find_subcommand(sub).unwrap();
            assert!(
                c.get_arguments().any(|a| a.get_long() == Some("config")),
                "{sub}"
            );
        }
    }
}
