//! The help as a user meets it: every command's `-h` fits a screen (at most 60 lines of at
//! most 100 columns, one line per option), `--help` says more, and the completion scripts
//! and man pages are written from the same command line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

/// Every subcommand, as `rdmabench -h` lists them.
const COMMANDS: &[&str] = &[
    "write-bw",
    "read-bw",
    "send-bw",
    "atomic-bw",
    "write-lat",
    "read-lat",
    "send-lat",
    "atomic-lat",
    "devices",
    "topo",
    "ceiling",
    "doctor",
    "health",
    "nccl-log",
    "counters",
    "compare",
    "plot",
    "cluster",
    "triage",
    "completions",
    "man",
];

/// `rdmabench ARGS` with its output piped, as a pager or a script sees it (no terminal: the
/// help fits 100 columns).
fn rdmabench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdmabench"))
        .args(args)
        .env_remove("COLUMNS")
        .output()
        .unwrap()
}

fn stdout(args: &[&str]) -> String {
    let out = rdmabench(args);
    assert!(out.status.success(), "rdmabench {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The lines of a help's "Options:" section.
fn options_section(help: &str) -> Vec<&str> {
    help.lines()
        .skip_while(|l| *l != "Options:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_commands_listed_here_are_the_commands_there_are() {
    let top = stdout(&["-h"]);
    let listed: Vec<&str> = top
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert_eq!(listed, COMMANDS, "{top}");
}

#[test]
fn every_short_help_fits_a_screen_one_line_per_option() {
    for cmd in [&[][..]]
        .into_iter()
        .chain(COMMANDS.iter().map(std::slice::from_ref))
    {
        let mut args = cmd.to_vec();
        args.push("-h");
        let help = stdout(&args);
        let lines = help.lines().count();
        assert!(lines <= 60, "{args:?}: {lines} lines\n{help}");
        for line in help.lines() {
            let width = line.chars().count();
            assert!(width <= 100, "{args:?}: {width} columns: {line}");
        }
        for line in options_section(&help) {
            assert!(
                line.trim_start().starts_with('-'),
                "{args:?}: a wrapped line: {line}"
            );
        }
    }
}

#[test]
fn a_tests_short_help_starts_with_perftests_letters_and_long_help_says_more() {
    let short = stdout(&["write-bw", "-h"]);
    let firsts: Vec<&str> = options_section(&short)
        .iter()
        .take(9)
        .map(|l| l.trim_start())
        .collect();
    let want = [
        "-d,", "-s,", "-q,", "-t,", "-n,", "-D,", "-a,", "--mem", "--json",
    ];
    for (line, flag) in firsts.iter().zip(want) {
        assert!(
            line.starts_with(flag),
            "{flag} is not in its place: {short}"
        );
    }
    let long = stdout(&["write-bw", "--help"]);
    for rare in ["--use_cuda", "--max-mem", "--staging-chunk", "--odp", "-F"] {
        assert!(!short.contains(rare), "write-bw -h lists {rare}");
        assert!(long.contains(rare), "write-bw --help lacks {rare}");
    }
    assert!(long.lines().count() > 2 * short.lines().count(), "{long}");
}

#[test]
fn each_test_lists_only_what_it_accepts() {
    let lat = stdout(&["write-lat", "--help"]);
    for refused in [
        "--bidirectional",
        "--threads",
        "--qps",
        "--rate-limit",
        "--outs",
    ] {
        assert!(!lat.contains(refused), "write-lat --help lists {refused}");
    }
    let out = rdmabench(&["write-lat", "10.0.0.1", "--threads", "2"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let cluster = stdout(&["cluster", "--help"]);
    for refused in ["SERVER_HOST", "--loopback", "--persistent", "--csv"] {
        assert!(!cluster.contains(refused), "cluster --help lists {refused}");
    }
}

#[test]
fn completions_name_the_commands_and_their_options() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&["completions", shell]);
        for word in ["write-bw", "cluster", "compare", "--mem", "--json"] {
            assert!(script.contains(word), "the {shell} script lacks {word}");
        }
    }
    let dir = tempdir("completions");
    let bash = dir.join("rdmabench.bash");
    std::fs::write(&bash, stdout(&["completions", "bash"])).unwrap();
    let check = Command::new("bash").arg("-n").arg(&bash).output().unwrap();
    assert!(check.status.success(), "bash -n: {check:?}");
    let out = rdmabench(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn man_writes_a_page_per_command_that_man_renders() {
    let dir = tempdir("man");
    let said = stdout(&["man", dir.to_str().unwrap()]);
    assert!(
        said.contains(&format!("{} man pages", COMMANDS.len() + 1)),
        "{said}"
    );
    for cmd in COMMANDS {
        let page = dir.join(format!("rdmabench-{cmd}.1"));
        let roff = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{cmd}: {e}"));
        assert!(
            roff.starts_with(".ie") || roff.contains(".TH"),
            "{cmd}: {roff}"
        );
        assert!(roff.contains(".TH"), "{cmd}: no .TH");
    }
    let write_bw = std::fs::read_to_string(dir.join("rdmabench-write-bw.1")).unwrap();
    assert!(write_bw.contains("\\-\\-mem"), "{write_bw}");
    let top = std::fs::read_to_string(dir.join("rdmabench.1")).unwrap();
    assert!(top.contains("write\\-bw"), "{top}");
    let man = Command::new("man")
        .arg("-l")
        .arg(dir.join("rdmabench-write-bw.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("man (man-db, installed by scripts/setup.sh) renders the pages");
    let text = String::from_utf8_lossy(&man.stdout);
    assert!(man.status.success(), "man -l: {man:?}");
    assert!(text.contains("--tx-depth"), "{text}");
}

/// A fresh folder under the target directory for one test.
fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("help_cli-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
