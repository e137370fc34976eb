//! The README is checked, not trusted: every block of README.md fenced as ```` ```console ````
//! is a terminal transcript, and this test runs each of its `$ rdmabench ...` commands with
//! the binary built here, from the workspace root (the fixture trees and records the README
//! names are paths relative to it), and fails with a diff when what the command prints
//! differs from the README's text.
//!
//! The form of a checked block:
//! - a line `$ rdmabench ARGS` is a command (a line ending in ` \` continues on the next);
//!   the lines up to the next `$ ` line are what it prints, stdout then stderr;
//! - `$ echo $?` and the next line give its exit code; without them the command must exit 0;
//! - lines are compared without their trailing spaces (which Markdown editors drop).
//!
//! Blocks fenced otherwise (` ``` `, ` ```sh `, ` ```text `) are not run: usage synopses,
//! scripts, and figures measured elsewhere. A `$ rdmabench ceiling|topo|doctor|compare`
//! line must stand in a checked block, so those examples cannot fall out of the check.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{transcript, workspace_root};

/// One fenced block of the README: its opening fence's language, first line number and text.
struct Block {
    lang: String,
    line: usize,
    text: Vec<String>,
}

fn blocks(readme: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in readme.lines().enumerate() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(_), Some(block)) => out.push(block),
            (Some(lang), None) => {
                open = Some(Block {
                    lang: lang.trim().to_string(),
                    line: i + 1,
                    text: Vec::new(),
                })
            }
            (None, Some(mut block)) => {
                block.text.push(line.to_string());
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "README.md ends inside a fenced block");
    out
}

/// A command of a checked block: its arguments and the transcript the README shows for it.
struct Shown {
    args: Vec<String>,
    text: String,
}

/// Splits a console block into its commands, each with the lines that follow it (the
/// continuation lines of the command joined).
fn commands(block: &Block) -> Vec<Shown> {
    let mut out: Vec<Shown> = Vec::new();
    let mut lines = block.text.iter();
    while let Some(line) = lines.next() {
        let Some(command) = line.strip_prefix("$ ") else {
            let last = out
                .last_mut()
                .unwrap_or_else(|| panic!("README.md:{}: output before a command", block.line));
            last.text.push_str(line.trim_end());
            last.text.push('\n');
            continue;
        };
        if command == "echo $?" {
            let last = out
                .last_mut()
                .unwrap_or_else(|| panic!("README.md:{}: `echo $?` first", block.line));
            last.text.push_str("$ echo $?\n");
            continue;
        }
        let mut command = command.to_string();
        while let Some(head) = command.strip_suffix('\\') {
            let next = lines.next().expect("a continued command goes on");
            command = format!("{} {}", head.trim_end(), next.trim());
        }
        let args: Vec<String> = command.split_whitespace().map(str::to_string).collect();
        assert_eq!(
            args.first().map(String::as_str),
            Some("rdmabench"),
            "README.md:{}: a checked block runs rdmabench only: {command}",
            block.line
        );
        assert!(
            !command.contains(['"', '\'', '|', '>', '<', '*']),
            "README.md:{}: no quoting or shell syntax in a checked command: {command}",
            block.line
        );
        out.push(Shown {
            text: format!("$ {}\n", args.join(" ")),
            args: args[1..].to_vec(),
        });
    }
    out
}

/// What running `shown`'s command prints, in the README's form. A README transcript
/// without `$ echo $?` stands for a command that exits 0; so is the run's, then.
fn ran(shown: &Shown) -> String {
    let args: Vec<&str> = shown.args.iter().map(String::as_str).collect();
    let full = transcript(&workspace_root(), &args);
    let trimmed: String = full
        .lines()
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    if shown.text.contains("$ echo $?\n") {
        return trimmed;
    }
    match trimmed.strip_suffix("$ echo $?\n0\n") {
        Some(without) => without.to_string(),
        None => trimmed,
    }
}

fn diff(want: &str, got: &str) -> String {
    similar::TextDiff::from_lines(want, got)
        .unified_diff()
        .header("README.md", "what rdmabench prints")
        .to_string()
}

#[test]
fn every_console_block_of_the_readme_is_what_rdmabench_prints() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let blocks = blocks(&readme);
    let mut failures = Vec::new();
    let mut checked = Vec::new();
    for block in blocks.iter().filter(|b| b.lang == "console") {
        for shown in commands(block) {
            let got = ran(&shown);
            if got != shown.text {
                failures.push(format!(
                    "README.md:{}: `{}`\n{}",
                    block.line,
                    shown.text.lines().next().unwrap_or_default(),
                    diff(&shown.text, &got)
                ));
            }
            checked.push(shown.args[0].clone());
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    for command in ["ceiling", "topo", "doctor", "compare"] {
        assert!(
            checked.iter().any(|c| c == command),
            "README.md shows no checked `rdmabench {command}` (a ```console block)"
        );
    }
}

#[test]
fn the_readmes_examples_of_the_offline_commands_all_stand_in_checked_blocks() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    for block in blocks(&readme).iter().filter(|b| b.lang != "console") {
        for line in &block.text {
            for command in ["ceiling", "topo", "doctor", "compare"] {
                assert!(
                    !line.starts_with(&format!("$ rdmabench {command}")),
                    "README.md:{}: `{line}` is an example of {command}: fence its block as \
                     ```console so that it is checked",
                    block.line
                );
            }
        }
    }
}

#[test]
fn a_changed_output_is_a_failure_with_a_diff() {
    let block = Block {
        lang: "console".to_string(),
        line: 1,
        text: vec![
            "$ rdmabench ceiling --nic-rate 400 --pcie gen9x16".to_string(),
            "error: something else".to_string(),
            "$ echo $?".to_string(),
            "2".to_string(),
        ],
    };
    let shown = commands(&block);
    assert_eq!(shown.len(), 1);
    let got = ran(&shown[0]);
    assert_ne!(got, shown[0].text);
    let d = diff(&shown[0].text, &got);
    assert!(d.contains("-error: something else"), "{d}");
    assert!(d.contains("+error: invalid value 'gen9x16'"), "{d}");
}
