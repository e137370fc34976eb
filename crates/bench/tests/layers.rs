//! The structure ARCHITECTURE.md states, checked: the model crate names no device crate, the
//! engine imports nothing from the layers above it, no source file is over 1,000 lines and
//! no function outside the tests over 80.
//! (The crate graph itself is checked by the compiler: a crate cannot import one that does
//! not name it.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, recursively, leaving out test fixtures (whose sysfs trees
/// hold symbolic links that loop by design) and snapshots; links are not followed.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let name = entry.file_name();
            if name == "fixtures" || name == "snapshots" || name == "target" {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The names of the `[dependencies]` of a `Cargo.toml` (their package names where renamed).
fn dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut out = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if !in_deps || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, spec) = line.split_once('=').unwrap();
        let package = spec
            .split("package = \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next());
        out.push(package.unwrap_or(name.trim()).to_string());
    }
    out
}

#[test]
fn the_model_crate_names_no_verbs_gpu_or_system_crate() {
    let manifest = fs::read_to_string(root().join("crates/model/Cargo.toml")).unwrap();
    let deps = dependencies(&manifest);
    assert!(
        deps.iter().any(|d| d == "serde"),
        "read no dependencies: {deps:?}"
    );
    for device in [
        "rdmabench-verbs",
        "rdmabench-accel",
        "rdmabench-cuda",
        "rdmabench-rocm",
        "sideway",
        "libc",
    ] {
        assert!(
            !deps.iter().any(|d| d == device),
            "the model crate depends on {device}"
        );
    }
}

#[test]
fn the_engine_imports_nothing_from_the_layers_above_it() {
    let above = [
        "run", "cluster", "cli", "output", "report", "compare", "plot", "health", "doctor",
        "control", "counters", "nccl_log", "show",
    ];
    let engine = root().join("crates/bench/src/engine");
    let files = sources(&engine);
    assert!(files.len() > 10, "{}: {files:?}", engine.display());
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        for layer in above {
            let import = format!("crate::{layer}::");
            let whole = format!("crate::{layer};");
            assert!(
                !text.contains(&import) && !text.contains(&whole),
                "{} imports crate::{layer}, a layer above the engine",
                file.display()
            );
        }
    }
}

#[test]
fn no_source_file_is_over_a_thousand_lines() {
    let mut checked = 0;
    for dir in ["crates", "benches"] {
        for file in sources(&root().join(dir)) {
            let lines = fs::read_to_string(&file).unwrap().lines().count();
            checked += 1;
            assert!(
                lines <= 1000,
                "{} has {lines} lines: split it by concern (its tests can go to a tests.rs \
                 beside it)",
                file.display()
            );
        }
    }
    assert!(checked > 200, "checked only {checked} files");
}

/// The longest function of `text` outside its tests, as (lines, first line, name): from the
/// line that declares it to the brace that closes it at its indentation (`rustfmt`'s layout).
fn functions(text: &str) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| {
            w[0] == "#[cfg(test)]" && w[1].trim_start_matches("pub(crate) ") == "mod tests {"
        })
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    for (i, line) in lines[..end].iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let mut rest = body;
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "unsafe ",
            "extern \"C\" ",
        ] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        let Some(name) = rest.strip_prefix("fn ") else {
            continue;
        };
        let name: String = name
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = (i..end).find(|&j| lines[j].ends_with('{') || lines[j].ends_with(';'))
        else {
            continue;
        };
        if lines[open].ends_with(';') {
            continue; // a declaration without a body
        }
        let close = format!("{indent}}}");
        if let Some(last) = (open + 1..end).find(|&j| lines[j] == close) {
            out.push((last - i + 1, i + 1, name));
        }
    }
    out
}

#[test]
fn no_function_outside_the_tests_is_over_80_lines() {
    let mut checked = 0;
    for dir in ["crates", "benches"] {
        for file in sources(&root().join(dir)) {
            let path = file.to_string_lossy().to_string();
            if path.contains("/tests/") || path.ends_with("/tests.rs") {
                continue;
            }
            let text = fs::read_to_string(&file).unwrap();
            for (lines, at, name) in functions(&text) {
                checked += 1;
                assert!(
                    lines <= 80,
                    "{}:{at}: fn {name} has {lines} lines: split it into steps",
                    file.display()
                );
            }
        }
    }
    assert!(checked > 2000, "checked only {checked} functions");
}

#[test]
fn a_long_function_is_found() {
    let body = "    let x = 1;\n".repeat(90);
    let text =
        format!("fn short() {{\n}}\n\npub(crate) fn long(\n    a: u8,\n) -> u8 {{\n{body}}}\n");
    assert_eq!(
        functions(&text),
        vec![(2, 1, "short".to_string()), (94, 4, "long".to_string())]
    );
}
