//! `docs/options.md`, generated: every option of every command from the shaped command line
//! (its `-h` line, its default, its values) and the catalogue (perftest's spelling, the
//! range, the tests it applies to). `tests/options_doc.rs` fails when the checked-in file
//! differs from this.

use clap::{Arg, Args, Command};

use crate::catalogue::PARAMS;
use crate::cli::{help, Cli, TestArgs};
use crate::plan::TestKind;

/// The command that regenerates the file.
pub const REGENERATE: &str = "RDMABENCH_UPDATE_DOCS=1 cargo test -p rdmabench --test options_doc";

/// The whole of `docs/options.md`.
pub fn options_markdown() -> String {
    let mut cli = Cli::shaped();
    cli.build();
    let mut out = format!(
        "# Options\n\n\
         Every option of every command, one sentence each: what `-h` says, perftest's \
         spelling where perftest has one, the default and the values it takes. `--help` \
         says more about each; what the figures mean, the `-D` window included, is in \
         [figures.md](figures.md).\n\n\
         This file is generated from the command line; do not edit it. After a change to an \
         option, regenerate it with `{REGENERATE}`.\n"
    );
    let tests: Vec<String> = TestKind::ALL.iter().map(|t| t.to_string()).collect();
    out += &section(
        &format!("The tests: {}", tests.join(", ")),
        "Each test takes these options; where one applies to some tests only, its row says \
         which, and the others refuse it (exit 2) and leave it out of their help.",
        &test_table(),
    );
    for cmd in cli.get_subcommands() {
        let name = cmd.get_name();
        if tests.iter().any(|t| t == name) || name == "help" {
            continue;
        }
        let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
        out += &section(&format!("rdmabench {name}"), &about, &table(cmd));
    }
    out += "\n## perftest's options\n\n";
    out += &perftest_names();
    out
}

/// perftest's long options and how each is answered (`perftest_names.rs`).
fn perftest_names() -> String {
    crate::perftest_names::reference_markdown()
}

fn section(title: &str, about: &str, table: &str) -> String {
    format!("\n## {title}\n\n{about}\n\n{table}")
}

/// A test's options, with the tests each applies to.
fn test_table() -> String {
    let cmd = TestArgs::augment_args(Command::new("test"));
    let mut rows = vec![
        "| Option | perftest | Default | Values | Tests | What it does |".to_string(),
        "| --- | --- | --- | --- | --- | --- |".to_string(),
    ];
    for arg in documented(&cmd) {
        let tests = match arg.get_long() {
            Some(long) => tests_of(&format!("--{long}")),
            None => "all".to_string(),
        };
        let [option, default, values, what] = cells(arg);
        let perftest = perftest_of(arg);
        rows.push(format!(
            "| {option} | {perftest} | {default} | {values} | {tests} | {what} |"
        ));
    }
    rows.join("\n") + "\n"
}

/// A command's options.
fn table(cmd: &Command) -> String {
    let mut rows = vec![
        "| Option | Default | Values | What it does |".to_string(),
        "| --- | --- | --- | --- |".to_string(),
    ];
    for arg in documented(cmd) {
        let [option, default, values, what] = cells(arg);
        rows.push(format!("| {option} | {default} | {values} | {what} |"));
    }
    rows.join("\n") + "\n"
}

/// The arguments a user can give (not `--help`, nor what the command refuses).
fn documented(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments().filter(|a| {
        let id = a.get_id().as_str();
        id != "help" && id != "version" && !a.is_hide_set()
    })
}

/// perftest's spelling of a test's option: the catalogue's, else perftest's option of the
/// same letter or name where rdmabench takes it.
fn perftest_of(arg: &Arg) -> String {
    use crate::perftest_names::{by_long, by_short};
    let long = arg.get_long().map(|l| format!("--{l}"));
    let row = PARAMS
        .iter()
        .find(|p| p.flag.is_some() && p.flag == long.as_deref());
    if let Some(spelled) = row.and_then(|p| p.perftest) {
        return code(spelled);
    }
    let short = arg
        .get_short()
        .and_then(by_short)
        .map(|n| format!("-{}", n.short.unwrap_or_default()));
    let long = arg
        .get_long()
        .and_then(by_long)
        .filter(|n| n.accepted())
        .map(|n| format!("--{}", n.long));
    let names: Vec<String> = short.into_iter().chain(long).map(|n| code(&n)).collect();
    names.join(", ")
}

/// The tests option `flag` applies to: "all", or their names.
fn tests_of(flag: &str) -> String {
    let some: Vec<String> = TestKind::ALL
        .iter()
        .filter(|&&k| help::applies(k, flag).is_ok())
        .map(|k| k.to_string())
        .collect();
    if some.len() == TestKind::ALL.len() {
        "all".to_string()
    } else {
        some.join(", ")
    }
}

/// An argument's cells: its spelling, its default, its values, its sentence.
fn cells(arg: &Arg) -> [String; 4] {
    let long = arg.get_long().map(|l| format!("--{l}"));
    let row = PARAMS
        .iter()
        .find(|p| p.flag.is_some() && p.flag == long.as_deref());
    let values = match (row.and_then(|p| p.range), arg.get_possible_values()) {
        (Some((lo, hi)), _) => format!("{lo} to {hi}"),
        (None, v) if arg.get_action().takes_values() && !v.is_empty() => v
            .iter()
            .map(|p| code(p.get_name()))
            .collect::<Vec<_>>()
            .join(", "),
        (None, _) => String::new(),
    };
    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    let (what, short_default) = split_default(&help, arg);
    // The long help says a default the short one leaves to it ("see --help").
    let long = arg
        .get_long_help()
        .map(|h| h.to_string())
        .unwrap_or_default();
    let (_, long_default) = split_default(&long.replace('\n', " "), arg);
    let default = match short_default.as_str() {
        "see --help" if !long_default.is_empty() => long_default,
        _ => short_default,
    };
    [code(&spelling(arg)), default, values, escape(&what)]
}

/// `-s, --size <SIZE>`, as the help shows it.
fn spelling(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|_| arg.get_action().takes_values());
    if arg.is_positional() {
        return value.unwrap_or_default();
    }
    let mut names: Vec<String> = arg
        .get_short()
        .map(|s| format!("-{s}"))
        .into_iter()
        .collect();
    names.extend(arg.get_long().map(|l| format!("--{l}")));
    let mut text = names.join(", ");
    if let Some(v) = value {
        text = format!("{text} {v}");
    }
    text
}

/// The sentence without its "[default: ...]", and the default: clap's, else the sentence's.
fn split_default(help: &str, arg: &Arg) -> (String, String) {
    let declared: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let (what, said) = match help.rfind(" [default: ") {
        Some(at) => {
            let said = help[at + " [default: ".len()..].trim_end_matches(']');
            (help[..at].to_string(), said.to_string())
        }
        None => (help.to_string(), String::new()),
    };
    let default = if declared.is_empty() {
        escape(&said)
    } else {
        code(&declared.join(","))
    };
    (what, default)
}

fn code(text: &str) -> String {
    format!("`{}`", text.replace('|', "\\|"))
}

fn escape(text: &str) -> String {
    text.replace('|', "\\|")
}
