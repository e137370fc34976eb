//! The documentation is checked, not trusted: every block of README.md, CONTRIBUTING.md
//! and every `docs/*.md` fenced as ```` ```console ```` is a terminal transcript, and this
//! test runs each of its `$ rdmabench ...` commands with the binary built here, from the
//! workspace root (the fixture trees and records the docs name are paths relative to it),
//! and fails with a diff, naming the file and line, when what the command prints differs
//! from the doc's text.
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
//!
//! The example folder's page, `results/soft-roce-emulated/README.md`, is checked too: every
//! `rdmabench compare` and `rdmabench plot` line of its ` ```sh ` blocks runs on the records
//! there (its globs expanded as the shell would, its charts written to a temporary folder)
//! and must exit 0, so that a file added to the folder cannot break them unseen.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{bin, scratch, text, transcript, workspace_root};
use rdmabench::control::{admit, anyone_may_connect, dropped_line, Channel, Token};

/// The documents whose console blocks are run, relative to the workspace root: README.md,
/// CONTRIBUTING.md and every Markdown file of `docs/`, in name order.
fn documents() -> Vec<String> {
    let root = workspace_root();
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    let mut all = vec!["README.md".to_string(), "CONTRIBUTING.md".to_string()];
    all.extend(docs);
    all
}

/// One fenced block of a document: its file, its opening fence's language, first line
/// number and text.
struct Block {
    file: String,
    lang: String,
    line: usize,
    text: Vec<String>,
}

impl Block {
    /// Where the block starts, as `FILE:LINE`.
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

fn blocks(file: &str, doc: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in doc.lines().enumerate() {
        // A fence may be indented (a block inside a list item).
        match (line.trim_start().strip_prefix("```"), open.take()) {
            (Some(_), Some(block)) => out.push(block),
            (Some(lang), None) => {
                open = Some(Block {
                    file: file.to_string(),
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
    assert!(open.is_none(), "{file} ends inside a fenced block");
    out
}

/// The fenced blocks of the document at `file` (relative to the workspace root).
fn blocks_of(file: &str) -> Vec<Block> {
    let doc = std::fs::read_to_string(workspace_root().join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    blocks(file, &doc)
}

/// A command of a checked block: its arguments and the transcript the doc shows for it.
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
                .unwrap_or_else(|| panic!("{}: output before a command", block.at()));
            last.text.push_str(line.trim_end());
            last.text.push('\n');
            continue;
        };
        if command == "echo $?" {
            let last = out
                .last_mut()
                .unwrap_or_else(|| panic!("{}: `echo $?` first", block.at()));
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
            "{}: a checked block runs rdmabench only: {command}",
            block.at()
        );
        assert!(
            !command.contains(['"', '\'', '|', '>', '<', '*']),
            "{}: no quoting or shell syntax in a checked command: {command}",
            block.at()
        );
        out.push(Shown {
            text: format!("$ {}\n", args.join(" ")),
            args: args[1..].to_vec(),
        });
    }
    out
}

/// What running `shown`'s command prints, in the docs' form. A transcript without
/// `$ echo $?` stands for a command that exits 0; so is the run's, then.
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

fn diff(file: &str, want: &str, got: &str) -> String {
    similar::TextDiff::from_lines(want, got)
        .unified_diff()
        .header(file, "what rdmabench prints")
        .to_string()
}

/// Runs every console block of `blocks`: a failure (`FILE:LINE`, the command, the diff) for
/// each transcript that differs from what rdmabench prints, and the commands run.
fn check(blocks: &[Block]) -> (Vec<String>, Vec<String>) {
    let mut failures = Vec::new();
    let mut checked = Vec::new();
    for block in blocks.iter().filter(|b| b.lang == "console") {
        for shown in commands(block) {
            let got = ran(&shown);
            if got != shown.text {
                failures.push(format!(
                    "{}: `{}`\n{}",
                    block.at(),
                    shown.text.lines().next().unwrap_or_default(),
                    diff(&block.file, &shown.text, &got)
                ));
            }
            checked.push(shown.args[0].clone());
        }
    }
    (failures, checked)
}

#[test]
fn every_console_block_of_every_doc_is_what_rdmabench_prints() {
    let mut failures = Vec::new();
    let mut checked = Vec::new();
    for file in documents() {
        let (failed, ran) = check(&blocks_of(&file));
        failures.extend(failed);
        checked.extend(ran);
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    for command in ["ceiling", "topo", "doctor", "compare"] {
        assert!(
            checked.iter().any(|c| c == command),
            "no doc shows a checked `rdmabench {command}` (a ```console block)"
        );
    }
}

#[test]
fn the_docs_are_the_front_page_contributing_and_every_file_of_docs() {
    let docs = documents();
    let root = workspace_root();
    for file in [
        "README.md",
        "CONTRIBUTING.md",
        "docs/figures.md",
        "docs/ceilings.md",
    ] {
        assert!(
            docs.iter().any(|d| d == file),
            "{file} is not checked: {docs:?}"
        );
    }
    let count = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("md".as_ref()))
        .count();
    assert_eq!(docs.len(), count + 2, "{docs:?}");
}

#[test]
fn the_docs_examples_of_the_offline_commands_all_stand_in_checked_blocks() {
    for file in documents() {
        for block in blocks_of(&file).iter().filter(|b| b.lang != "console") {
            for line in &block.text {
                for command in ["ceiling", "topo", "doctor", "compare"] {
                    assert!(
                        !line
                            .trim_start()
                            .starts_with(&format!("$ rdmabench {command}")),
                        "{}: `{line}` is an example of {command}: fence its block as \
                         ```console so that it is checked",
                        block.at()
                    );
                }
            }
        }
    }
}

/// A doc whose console block shows another output than rdmabench's.
const WRONG_DOC: &str = "Some text.

```console
$ rdmabench ceiling --nic-rate 400 --pcie gen9x16
error: something else
$ echo $?
2
```
";

#[test]
fn a_changed_output_is_a_failure_with_a_diff() {
    let blocks = blocks("docs/wrong.md", WRONG_DOC);
    let (failures, checked) = check(&blocks);
    assert_eq!(checked, ["ceiling"]);
    assert_eq!(failures.len(), 1, "{failures:?}");
    let failure = &failures[0];
    assert!(failure.starts_with("docs/wrong.md:3: "), "{failure}");
    assert!(failure.contains("-error: something else"), "{failure}");
    assert!(
        failure.contains("+error: invalid value 'gen9x16'"),
        "{failure}"
    );
}

/// The example folder's page whose record-reading commands are run.
const EXAMPLES: &str = "results/soft-roce-emulated/README.md";

/// The lines of a block with each ` \`-continued line joined to the next, comments left out.
fn shell_lines(block: &Block) -> Vec<String> {
    let mut out = Vec::new();
    let mut open = String::new();
    for line in &block.text {
        let line = line.split('#').next().unwrap_or_default().trim_end();
        match line.strip_suffix('\\') {
            Some(head) => open.push_str(head),
            None => {
                open.push_str(line);
                out.push(std::mem::take(&mut open).trim().to_string());
            }
        }
    }
    out
}

/// What the shell makes of `word` run from `root`: the files a `*` in its file name matches,
/// in order; any other word as it is.
fn expand(root: &Path, word: &str) -> Vec<String> {
    let (folder, name) = word.rsplit_once('/').unwrap_or((".", word));
    let Some((head, tail)) = name.split_once('*') else {
        return vec![word.to_string()];
    };
    assert!(
        !folder.contains('*') && !tail.contains('*'),
        "{EXAMPLES}: `{word}`: one `*`, in the file name, is all this test expands"
    );
    let mut out: Vec<String> = std::fs::read_dir(root.join(folder))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() >= name.len() - 1 && n.starts_with(head) && n.ends_with(tail))
        .map(|n| format!("{folder}/{n}"))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "{EXAMPLES}: `{word}` matches no file");
    out
}

/// `line`'s arguments as the test runs them: globs expanded, `-o FILE` into `charts`.
fn example_args(root: &Path, line: &str, charts: &Path) -> Vec<String> {
    let mut args = Vec::new();
    let mut words = line.split_whitespace().skip(1);
    while let Some(word) = words.next() {
        if word == "-o" {
            let file = words.next().expect("-o names a file");
            let name = Path::new(file).file_name().expect("-o names a file");
            args.push(word.to_string());
            args.push(charts.join(name).to_string_lossy().into_owned());
        } else {
            args.extend(expand(root, word));
        }
    }
    args
}

#[test]
fn the_example_folders_commands_run_on_its_records() {
    let root = workspace_root();
    let page = std::fs::read_to_string(root.join(EXAMPLES)).unwrap();
    let charts: PathBuf = scratch("example-charts");
    let mut ran = Vec::new();
    for block in blocks(EXAMPLES, &page).iter().filter(|b| b.lang == "sh") {
        for line in shell_lines(block) {
            let Some(command) = line.strip_prefix("rdmabench ") else {
                continue;
            };
            assert!(
                command.starts_with("compare ") || command.starts_with("plot "),
                "{EXAMPLES}:{}: `{line}`: an example here that starts with rdmabench is run, \
                 and only compare and plot can run here (they read records)",
                block.line
            );
            let args = example_args(&root, &line, &charts);
            let out = bin().current_dir(&root).args(&args).output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{EXAMPLES}:{}: `{line}` (run as rdmabench {}) failed:\n{}",
                block.line,
                args.join(" "),
                text(&out)
            );
            ran.push(line);
        }
    }
    assert!(ran.len() >= 5, "{EXAMPLES}: the commands run: {ran:#?}");
    std::fs::remove_dir_all(charts).ok();
}

#[test]
fn a_glob_that_matches_a_sweep_beside_result_records_fails_the_example() {
    // What broke the page once: a sweep record beside the bandwidth records.
    let root = scratch("example-mixed");
    let folder = root.join("records");
    std::fs::create_dir_all(&folder).unwrap();
    let stored = workspace_root().join("results/soft-roce-emulated");
    for (from, to) in [
        (
            "2026-11-30T040439Z-write-bw.json",
            "2026-11-30T040439Z-write-bw.json",
        ),
        (
            "cluster/2026-12-01T222511Z-cluster-write-bw.json",
            "2026-12-01T222511Z-cluster-write-bw.json",
        ),
    ] {
        std::fs::copy(stored.join(from), folder.join(to)).unwrap();
    }
    let args = example_args(&root, "rdmabench compare records/*-write-bw.json", &root);
    assert_eq!(args.len(), 3, "{args:?}");
    let out = bin().current_dir(&root).args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    std::fs::remove_dir_all(root).ok();
}

/// The client's and the server's lines of one handshake between a server holding `server`'s
/// token and a client holding `client`'s, in the docs' form (addresses as ADDR).
fn token_lines(server: Option<&Token>, client: Option<&Token>) -> [String; 2] {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = tcp.local_addr().unwrap();
    let server = server.cloned();
    let greeter = std::thread::spawn(move || {
        let (mut stream, peer) = tcp.accept().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let why = admit(&mut stream, server.as_ref(), deadline).unwrap_err();
        dropped_line(peer, &why.0).replace(&peer.to_string(), "ADDR")
    });
    let err =
        Channel::connect("127.0.0.1", addr.port(), Duration::from_secs(5), client).unwrap_err();
    let client = format!("  client: rdmabench: error: {err:#}").replace(&addr.to_string(), "ADDR");
    [client, format!("  server: {}", greeter.join().unwrap())]
}

/// The page that quotes the token handshake's messages.
const SERVER_SAFETY: &str = "docs/server-safety.md";

#[test]
fn the_docs_token_messages_are_what_the_handshake_says() {
    let page = std::fs::read_to_string(workspace_root().join(SERVER_SAFETY)).unwrap();
    let shown: Vec<&str> = page.lines().collect();
    let ours = Token::new(b"the server's secret, long enough", "test").unwrap();
    let theirs = Token::new(b"another secret, long enough too", "test").unwrap();
    let mut lines: Vec<String> = [
        (Some(&ours), Some(&theirs)),
        (Some(&ours), None),
        (None, Some(&theirs)),
    ]
    .into_iter()
    .flat_map(|(server, client)| token_lines(server, client))
    .collect();
    lines.push(format!(
        "  server: {}",
        anyone_may_connect("0.0.0.0", 18515)
    ));
    for line in lines {
        assert!(
            shown.contains(&line.as_str()),
            "{SERVER_SAFETY} should quote, as a line of its own:\n{line}"
        );
    }
}

// Every parameter is documented where it is declared: its flag's help makes the options
// reference (docs/options.md) and its record field's documentation the schema's params table
// (results/schema.md); `tests/options_doc.rs` fails when either file differs from what the
// code generates. docs/running.md explains at length only what takes more than a sentence.
