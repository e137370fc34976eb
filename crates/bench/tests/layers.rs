//! The structure ARCHITECTURE.md states, checked: the model crate names no device crate, the
//! engine imports nothing from the layers above it, no modules import one another in a loop
//! (but two known pairs), no source file is over 1,000 lines and no function outside the
//! tests over 80.
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

/// `text` up to its inline test module (`#[cfg(test)]` then `mod tests {`), if it has one.
fn outside_tests(text: &str) -> &str {
    let inline = [
        "#[cfg(test)]\nmod tests {",
        "#[cfg(test)]\npub(crate) mod tests {",
    ];
    let end = inline.iter().filter_map(|m| text.find(m)).min();
    &text[..end.unwrap_or(text.len())]
}

/// Every function of `text` outside its tests, as (lines, first line, name): from the line
/// that declares it to the brace that closes it at its indentation (`rustfmt`'s layout).
fn functions(text: &str) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = outside_tests(text).lines().collect();
    let end = lines.len();
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

/// A crate's modules, by path ("cluster::verdict"), each with its file's text up to its
/// tests; its root is "".
fn modules(src: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for file in sources(src) {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().to_string())
            .collect();
        if parts.iter().any(|p| p == "tests") || parts.first().is_some_and(|p| p == "bin") {
            continue;
        }
        let keep: Vec<&str> = match parts.last().map(String::as_str) {
            Some("mod") => parts[..parts.len() - 1]
                .iter()
                .map(String::as_str)
                .collect(),
            Some("lib") | Some("main") if parts.len() == 1 => Vec::new(),
            _ => parts.iter().map(String::as_str).collect(),
        };
        let text = fs::read_to_string(&file).unwrap();
        out.push((keep.join("::"), outside_tests(&text).to_string()));
    }
    out
}

/// The module paths `code` (in module `here`) names through `crate::` or `super::`, groups
/// (`super::{a, b::c}`) opened, comments left out. Each path may run on into an item's name:
/// the longest module it starts with is what it imports.
fn named_paths(here: &str, code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        for (at, _) in line
            .match_indices("crate::")
            .chain(line.match_indices("super::"))
        {
            let before = line[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue; // a longer path's segment (super::super::)
            }
            let mut rest = &line[at..];
            let mut base: Vec<&str> = Vec::new();
            if let Some(r) = rest.strip_prefix("crate::") {
                rest = r;
            } else {
                base = here.split("::").filter(|s| !s.is_empty()).collect();
                while let Some(r) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = r;
                }
            }
            expand(base, rest, &mut out);
        }
    }
    out
}

/// The paths `rest` names below `base`: its leading segments, or each item of a group.
fn expand<'a>(mut base: Vec<&'a str>, rest: &'a str, out: &mut Vec<String>) {
    let mut rest = rest;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            for item in group.split(',') {
                expand(base.clone(), item.trim(), out);
            }
            return;
        }
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let seg = &rest[..len];
        if !seg.starts_with(|c: char| c.is_ascii_lowercase()) {
            break;
        }
        base.push(seg);
        match rest[len..].strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    out.push(base.join("::"));
}

/// The import circles among `src`'s modules: each a sorted list of modules that import one
/// another in a loop (strongly connected, Tarjan's algorithm).
fn circles(src: &Path) -> Vec<Vec<String>> {
    let mods = modules(src);
    let names: Vec<&str> = mods.iter().map(|(m, _)| m.as_str()).collect();
    let index = |path: &str| -> Option<usize> {
        // The longest module path that `path` starts with.
        let mut p: Vec<&str> = path.split("::").collect();
        while !p.is_empty() {
            if let Some(i) = names.iter().position(|n| *n == p.join("::")) {
                return Some(i);
            }
            p.pop();
        }
        None
    };
    let edges: Vec<Vec<usize>> = mods
        .iter()
        .enumerate()
        .map(|(i, (here, code))| {
            let mut to: Vec<usize> = named_paths(here, code)
                .iter()
                .filter_map(|p| index(p))
                .filter(|&j| j != i && !names[j].is_empty())
                .collect();
            to.sort_unstable();
            to.dedup();
            to
        })
        .collect();
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut m: Vec<String> = c.iter().map(|&i| names[i].to_string()).collect();
            m.sort();
            m
        })
        .collect()
}

/// Tarjan's strongly connected components of a graph given as adjacency lists.
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(v: usize, edges: &[Vec<usize>], s: &mut State) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &edges[v] {
            match s.index[w] {
                None => {
                    visit(w, edges, s);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut c = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                c.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(c);
        }
    }
    let n = edges.len();
    let mut s = State {
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(v, edges, &mut s);
        }
    }
    s.out
}

#[test]
fn no_import_circles_but_the_two_inside_one_concern() {
    let known = [
        ("verbs", vec!["qp".to_string(), "srq".to_string()]),
        ("cuda", vec!["driver".to_string(), "error".to_string()]),
    ];
    for krate in ["bench", "model", "verbs", "cuda", "topo", "accel", "rocm"] {
        let src = root().join("crates").join(krate).join("src");
        let found = circles(&src);
        let allowed: Vec<&Vec<String>> = known
            .iter()
            .filter(|(k, _)| *k == krate)
            .map(|(_, c)| c)
            .collect();
        let unexpected: Vec<&Vec<String>> = found.iter().filter(|c| !allowed.contains(c)).collect();
        assert!(
            unexpected.is_empty(),
            "crates/{krate}: modules that import one another: {unexpected:?}"
        );
        // The known ones are seen, so the reading of the imports is not blind.
        for c in allowed {
            assert!(
                found.contains(c),
                "crates/{krate}: {c:?} no longer found: {found:?}"
            );
        }
    }
}

#[test]
fn a_circle_is_found() {
    let dir = std::env::temp_dir().join(format!("layers-circle-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("cluster")).unwrap();
    fs::write(dir.join("lib.rs"), "pub mod cluster;\npub mod plan;\n").unwrap();
    fs::write(dir.join("plan.rs"), "use crate::cluster::verdict::judge;\n").unwrap();
    fs::write(dir.join("cluster/mod.rs"), "pub mod verdict;\n").unwrap();
    fs::write(
        dir.join("cluster/verdict.rs"),
        "use super::super::{plan::Plan, x};\n",
    )
    .unwrap();
    let found = circles(&dir);
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(
        found,
        vec![vec!["cluster::verdict".to_string(), "plan".to_string()]]
    );
}
