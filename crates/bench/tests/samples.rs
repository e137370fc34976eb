//! The stored sweep samples under `results/` say how to make them again: the README beside
//! them names each record's pattern on the command that made it, unless it is the pattern a
//! sweep takes today without `--pattern` (read from `cluster --dry-run`, not written here).
//! A record made under an older default and described as made "at the default options"
//! would no longer be what that command makes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bin, text, workspace_root};

/// The pattern a sweep takes without `--pattern`, as a dry run of four ranks shows it.
fn default_pattern() -> String {
    let out = bin()
        .args(["cluster", "--dry-run"])
        .envs([
            ("RANK", "0"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "n1"),
            ("MASTER_PORT", "2000"),
        ])
        .output()
        .unwrap();
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let line = shown
        .lines()
        .find_map(|l| l.strip_prefix("pattern      "))
        .unwrap_or_else(|| panic!("no pattern line in:\n{shown}"));
    line.split(':').next().unwrap().to_string()
}

/// The part of `readme` that tells of `name`: from its first mention to the end of the
/// next `sh` block (the command that made it), or to the end.
fn section<'a>(readme: &'a str, name: &str) -> Option<&'a str> {
    let start = readme.find(name)?;
    let rest = &readme[start..];
    let end = rest
        .find("```sh")
        .and_then(|sh| rest[sh + 5..].find("```").map(|e| sh + 5 + e))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

#[test]
fn each_sweep_sample_names_the_pattern_that_made_it() {
    let folder = workspace_root().join("results/soft-roce-emulated");
    let readme = std::fs::read_to_string(folder.join("README.md")).unwrap();
    let default = default_pattern();
    let mut told = 0;
    for entry in std::fs::read_dir(folder.join("cluster")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let pattern = record["pattern"].as_str().unwrap();
        let Some(told_of) = section(&readme, &name) else {
            continue;
        };
        told += 1;
        assert!(
            pattern == default || told_of.contains(&format!("--pattern {pattern}")),
            "{name} was made with --pattern {pattern}, but its README section does not say \
             so (a sweep without --pattern runs {default} today):\n{told_of}"
        );
    }
    assert!(
        told >= 5,
        "only {told} sweep records are told of in the README"
    );
}
