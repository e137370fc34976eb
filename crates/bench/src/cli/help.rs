//! What each command's help shows: a test's help lists only the options that test accepts
//! (from the catalogue's `applies` and [`SIDE_ONLY`](super::applies::SIDE_ONLY)),
//! `cluster`'s none of those it refuses, `-h` one line per option with the ones perftest
//! users reach for first, `--help` all of them at length. The shell completions and the man
//! pages are written from the same shaped command line, so they list what the help lists.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::{Arg, Args, Command};

pub(crate) use super::applies::applies;
use super::test_args::TestArgs;
use crate::plan::TestKind;

/// The width `-h` and `--help` fit in (narrower where the terminal is).
pub(crate) const WIDTH: usize = 100;

/// A test's options in `-h`, in this order (by argument id): perftest's letters users reach
/// for first, then the rest of the everyday ones. Every other option is in `--help` only.
const TEST_SHORT: &[&str] = &[
    "server",
    "ib_dev",
    "size",
    "qps",
    "tx_depth",
    "iters",
    "duration",
    "all",
    "mem",
    "json",
    "bidirectional",
    "connection",
    "ib_port",
    "gid_index",
    "port",
    "outs",
    "atomic",
    "inline",
    "post_list",
    "cq_mod",
    "rx_depth",
    "path_mtu",
    "rdma_cm",
    "tclass",
    "sl",
    "report_gbits",
    "csv",
    "interval",
    "rate_limit",
    "validate",
    "repeat",
    "threads",
    "cpus",
    "loopback",
    "timeout",
    "token",
    "limit_bw",
    "limit_lat_p99",
];

/// How many of [`TEST_SHORT`] `cluster -h` and `triage -h` show beside their own options.
const CLUSTER_SHORT: usize = 12;

/// A subcommand as parsed and shown (`Cli`'s `mut_subcommands`).
pub(crate) fn shape_subcommand(cmd: Command) -> Command {
    let cmd = cmd.mut_args(long_help_once);
    let name = cmd.get_name().to_string();
    if let Some(kind) = TestKind::parse(&name) {
        return shape_test(cmd, kind);
    }
    match name.as_str() {
        "cluster" | "triage" => shape_cluster(cmd),
        _ => cmd,
    }
}

/// A test: the options it refuses hidden, the everyday ones first and alone in `-h`.
fn shape_test(cmd: Command, kind: TestKind) -> Command {
    let cmd = order(cmd, TEST_SHORT);
    cmd.mut_args(|arg| match arg.get_long() {
        Some(long) if applies(kind, &format!("--{long}")).is_err() => arg.hide(true),
        _ => arg,
    })
    .after_help(more_than_shown(TEST_SHORT.len()))
    .after_long_help(TEST_EXITS)
}

/// What a test's `--help` ends with.
const TEST_EXITS: &str = "Exit codes: 0 pass, 1 the run failed, 2 it cannot run as asked (a bad \
    value or combination, a device's limit), 3 a size missed a --limit-*.";

/// `cluster` and `triage` (a launch of ranks): its own options, then the tests' everyday
/// ones; none it refuses.
fn shape_cluster(cmd: Command) -> Command {
    let test_ids = test_arg_ids();
    let own: Vec<String> = cmd
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .filter(|id| !test_ids.contains(id))
        .collect();
    let mut first: Vec<&str> = own.iter().map(String::as_str).collect();
    first.extend(&TEST_SHORT[..CLUSTER_SHORT]);
    let refused = crate::cluster::args::two_node_options();
    let cmd = order(cmd, &first).after_help(more_than_shown(first.len()));
    cmd.mut_args(|arg| {
        if refused.iter().any(|(name, _)| names(&arg, name)) {
            arg.hide(true)
        } else {
            arg
        }
    })
}

/// A long help whose first paragraph (the `-h` line) the next one starts with again says it
/// once: the doc comment's second paragraph is the line at length.
fn long_help_once(arg: Arg) -> Arg {
    let (Some(short), Some(long)) = (arg.get_help(), arg.get_long_help()) else {
        return arg;
    };
    let (short, long) = (short.to_string(), long.to_string());
    match long.split_once("\n\n") {
        Some((first, rest)) if first == short && rest.starts_with(&short) => {
            let rest = rest.to_string();
            arg.long_help(rest)
        }
        _ => arg,
    }
}

/// What `-h` says under a list it cut.
fn more_than_shown(shown: usize) -> String {
    format!("-h shows {shown} options at most; --help lists them all, each at length.")
}

/// `first` (argument ids) in that order and in `-h`; every other argument after them and in
/// `--help` only.
fn order(cmd: Command, first: &[&str]) -> Command {
    let ids: Vec<String> = cmd
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    ids.iter().enumerate().fold(cmd, |cmd, (n, id)| {
        let place = first.iter().position(|f| f == id);
        cmd.mut_arg(id, |arg| match place {
            Some(p) => arg.display_order(p),
            None => arg.display_order(first.len() + n).hide_short_help(true),
        })
    })
}

/// The ids of a test's arguments.
fn test_arg_ids() -> Vec<String> {
    TestArgs::augment_args(Command::new("test"))
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect()
}

/// Whether `arg` is the one a message calls `name`: "--json", "-a", or "SERVER_HOST".
fn names(arg: &Arg, name: &str) -> bool {
    if let Some(long) = name.strip_prefix("--") {
        return arg.get_long() == Some(long);
    }
    if let Some(short) = name.strip_prefix('-') {
        return arg.get_short().map(String::from).as_deref() == Some(short);
    }
    arg.get_value_names()
        .is_some_and(|v| v.iter().any(|v| v.as_str() == name))
}

/// `rdmabench completions SHELL`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell whose script to print, to stdout
    ///
    /// The shell whose script to print (to stdout; bash: source it, or put it in
    /// /usr/share/bash-completion/completions/rdmabench)
    #[arg(value_enum, value_name = "SHELL")]
    pub(crate) shell: Shell,
}

/// The shells `rdmabench completions` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Shell {
    /// bash (bash-completion)
    Bash,
    /// zsh (a `_rdmabench` file on fpath)
    Zsh,
    /// fish
    Fish,
}

/// `rdmabench man DIR`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The folder to write the pages into (created if missing)
    #[arg(value_name = "DIR")]
    pub dir: std::path::PathBuf,
}

/// Writes `shell`'s completion script for `cmd` to `out`.
pub(crate) fn completions(cmd: &mut Command, shell: Shell, out: &mut dyn Write) {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, cmd, name, out);
}

/// `rdmabench completions SHELL`: the script, to stdout.
pub fn run_completions(args: &CompletionsArgs) -> Result<()> {
    let mut out = std::io::stdout().lock();
    completions(&mut crate::cli::Cli::shaped(), args.shell, &mut out);
    Ok(out.flush()?)
}

/// `rdmabench man DIR`: the pages, and a line naming how many went where.
pub fn run_man(args: &ManArgs) -> Result<()> {
    let written = man_pages(crate::cli::Cli::shaped(), &args.dir)?;
    println!("{} man pages in {}", written.len(), args.dir.display());
    Ok(())
}

/// Writes a man page per command into `dir`: `rdmabench.1` and `rdmabench-CMD.1`; returns
/// the files' names.
pub(crate) fn man_pages(cmd: Command, dir: &Path) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut pages = vec![cmd.clone()];
    pages.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    let mut written = Vec::new();
    for page in pages {
        // A page has no -h: the footer that points from -h to --help is left out.
        let man = clap_mangen::Man::new(page.after_help(None));
        man.generate_to(dir)
            .with_context(|| format!("cannot write {}", dir.join(man.get_filename()).display()))?;
        written.push(man.get_filename());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::Parser;

    /// Arguments that give `flag` a value other than its default, accepted by the tests it
    /// applies to: a switch alone, a whole number one above the lowest its declaration allows,
    /// and for the rest a value of their own.
    fn given(flag: &str) -> Vec<String> {
        let own: &[&str] = match flag {
            "--outs" => &["--outs", "4"],
            "--post-list" => &["--post-list", "2"],
            "--threads" => &["--threads", "2"],
            "--atomic-type" => &["--atomic-type", "CMP_AND_SWAP"],
            "--rate-limit" => &["--rate-limit", "8"],
            "--interval" => &["--duration", "5", "--interval", "1"],
            "--clock" => &["--clock", "monotonic"],
            "--limit-lat-p99" => &["--limit-lat-p99", "5"],
            _ => &[],
        };
        if !own.is_empty() {
            return own.iter().map(|a| a.to_string()).collect();
        }
        let cmd = TestArgs::augment_args(Command::new("test"));
        let arg = cmd.get_arguments().find(|a| names(a, flag)).unwrap();
        if !arg.get_action().takes_values() {
            return vec![flag.to_string()];
        }
        let param = crate::catalogue::PARAMS
            .iter()
            .find(|p| p.flag == Some(flag));
        let low = param.and_then(|p| p.range).map(|(lo, _)| lo);
        let low = low.unwrap_or_else(|| panic!("{flag}: give it a value here"));
        vec![flag.to_string(), (low.max(1) + 1).to_string()]
    }

    /// The long flags of a test's options that some test refuses.
    fn some_tests_only() -> Vec<String> {
        let cmd = TestArgs::augment_args(Command::new("test"));
        cmd.get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .filter(|f| TestKind::ALL.iter().any(|&k| applies(k, f).is_err()))
            .collect()
    }

    /// What a client of `test` with `args` meets before anything opens: Ok, or the refusal.
    fn verdict(test: &str, args: &[&str]) -> Result<(), String> {
        let start = ["rdmabench", test, "10.0.0.1"];
        let line = start.iter().chain(args);
        let cli = Cli::try_parse_from(line).map_err(|e| e.to_string())?;
        let (kind, a) = cli.command.test().unwrap();
        a.check(kind)
            .map(|_| ())
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn an_option_a_tests_help_leaves_out_is_refused_and_one_it_shows_accepted() {
        let flags = some_tests_only();
        for f in ["--outs", "--qps", "--threads", "--clock", "--limit-lat-p99"] {
            assert!(flags.iter().any(|x| x == f), "{f} applies to every test");
        }
        let mut cli = Cli::shaped();
        cli.build();
        for kind in TestKind::ALL {
            let test = kind.to_string();
            let cmd = cli.find_subcommand(&test).unwrap();
            let help = cmd.clone().render_long_help().to_string();
            for flag in &flags {
                let arg = cmd.get_arguments().find(|a| names(a, flag)).unwrap();
                let given = given(flag);
                let given: Vec<&str> = given.iter().map(String::as_str).collect();
                let verdict = verdict(&test, &given);
                match applies(kind, flag) {
                    Ok(()) => {
                        assert!(!arg.is_hide_set(), "{test} --help hides {flag}");
                        assert!(help.contains(flag.as_str()), "{test} --help lacks {flag}");
                        assert_eq!(verdict, Ok(()), "{test} {flag}");
                    }
                    Err(why) => {
                        assert!(arg.is_hide_set(), "{test} --help shows {flag}");
                        let refused = verdict.unwrap_err();
                        assert!(refused.contains(flag.as_str()), "{test}: {refused}");
                        assert!(refused.contains(why), "{test}: {refused}");
                    }
                }
            }
        }
    }

    #[test]
    fn write_lat_help_leaves_out_what_write_lat_refuses() {
        let mut cli = Cli::shaped();
        let help = cli
            .find_subcommand_mut("write-lat")
            .unwrap()
            .render_long_help()
            .to_string();
        for gone in [
            "--bidirectional",
            "--threads",
            "--qps",
            "--rate-limit",
            "--outs",
        ] {
            assert!(!help.contains(gone), "write-lat --help lists {gone}");
        }
        assert!(help.contains("--clock"), "{help}");
    }

    #[test]
    fn cluster_and_triage_help_leave_out_the_two_node_options_they_refuse() {
        let mut cli = Cli::shaped();
        cli.build();
        for (command, own) in [("cluster", "--tests"), ("triage", "--expect")] {
            let sub = cli.find_subcommand(command).unwrap();
            let help = sub.clone().render_long_help().to_string();
            assert!(!help.contains("SERVER_HOST"), "{help}");
            for (name, _) in crate::cluster::args::two_node_options() {
                let arg = sub.get_arguments().find(|a| names(a, &name));
                let arg = arg.unwrap_or_else(|| panic!("{command} has no {name}"));
                assert!(arg.is_hide_set(), "{command} --help shows {name}");
            }
            for kept in ["--json", "--mem", own, "--dry-run"] {
                assert!(help.contains(kept), "{command} --help lacks {kept}");
            }
        }
    }

    #[test]
    fn every_test_shows_the_perftest_letters_first() {
        let mut cli = Cli::shaped();
        let help = cli
            .find_subcommand_mut("write-bw")
            .unwrap()
            .render_help()
            .to_string();
        let at = |flag: &str| {
            let line = help.lines().position(|l| l.contains(flag));
            line.unwrap_or_else(|| panic!("write-bw -h lacks {flag}: {help}"))
        };
        let order = [
            "-d,", "-s,", "-q,", "-t,", "-n,", "-D,", "-a,", "--mem", "--json",
        ];
        let lines: Vec<usize> = order.iter().map(|f| at(f)).collect();
        assert!(lines.windows(2).all(|w| w[0] < w[1]), "{help}");
        assert!(lines[8] < 20, "--json is on line {}: {help}", lines[8]);
        assert!(!help.contains("--use_cuda"), "{help}");
    }
}
