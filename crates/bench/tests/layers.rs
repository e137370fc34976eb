//! The structure ARCHITECTURE.md states, checked: the model crate names no device crate, the
//! engine imports nothing from the layers above it, no modules import one another in a loop
//! (but two known pairs), no source file is over 1,000 lines and no function outside the
//! tests over 80, and the bench library makes `pub` only what something outside it names.
//! (The crate graph itself is checked by the compiler: a crate cannot import one that does
//! not name it.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
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

/// The types the outside reaches through a `pub` item's signature, field or variant without
/// naming them (`Command::Topo(TopoArgs)`, `Message::Join(Joining)`): the compiler wants them
/// `pub` (its `private_interfaces` lint, or an error where the outside uses them). Separated
/// by spaces.
const REACHED: &str = "\
    Admitted BelowLimit BounceLayout Cap CeilingArgs ClockChoice CompareArgs CompletionsArgs \
    CountersArgs DoctorArgs Finding FlowDone FlowFrom FlowTo Found FrameKeys HealthArgs \
    HeatMap HostlistError Joining LaunchArgs LogPaths ManArgs MemCaps NcclLogArgs PairRecord \
    PerftestName PinChoice PlotArgs RailGpus RailLink ScheduleError Screen SideConfig StartGate \
    Stranger SweepComparison SweepEnd TimedRead TimedWrite TopoArgs Translation TriageArgs \
    WireError Work";

/// The names `text` makes `pub` (not `pub(crate)`, not fields): its items and its `pub use`
/// re-exports, leaving out those under a `#[cfg(test)]` of their own.
fn pub_names(text: &str) -> Vec<String> {
    const KINDS: [&str; 10] = [
        "const fn ",
        "fn ",
        "struct ",
        "enum ",
        "const ",
        "static ",
        "trait ",
        "type ",
        "mod ",
        "union ",
    ];
    let mut out = Vec::new();
    let mut lines = text.lines().map(str::trim_start);
    let mut in_test = false;
    while let Some(line) = lines.next() {
        let was_test = in_test;
        in_test = line == "#[cfg(test)]"
            || in_test && (line.starts_with("#[") || line.starts_with("///"));
        let Some(rest) = line.strip_prefix("pub ").filter(|_| !was_test) else {
            continue;
        };
        if let Some(item) = KINDS.iter().find_map(|k| rest.strip_prefix(k)) {
            out.push(
                item.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect(),
            );
        } else if let Some(path) = rest.strip_prefix("use ") {
            let mut stmt = path.to_string();
            while !stmt.ends_with(';') {
                stmt += lines.next().unwrap_or(";");
            }
            let list = stmt
                .split_once('{')
                .map_or(stmt.rsplit("::").next().unwrap(), |g| g.1);
            for item in list.split(',') {
                let item = item.trim_matches(|c: char| "{}; ".contains(c));
                out.extend(
                    item.rsplit([' ', ':'])
                        .next()
                        .filter(|n| !n.is_empty())
                        .map(String::from),
                );
            }
        }
    }
    out
}

#[test]
fn pub_names_reads_items_and_re_exports_but_not_fields_or_crate_items() {
    let text = "pub fn a() {}\npub(crate) fn b() {}\n    pub c: u8,\n#[cfg(test)]\npub fn d() {}\n\
                pub const fn e() {}\npub use x::{f, g::h as i,\n    j};\npub use k::l;\n";
    assert_eq!(pub_names(text), ["a", "e", "f", "i", "j", "l"]);
}

/// The bench library is `pub` only where something outside it needs it: everything else is
/// `pub(crate)`, so that the compiler reports what nothing uses (`dead_code` is silent about
/// `pub` items). Each name an item-level `pub` declaration or `pub use` of `crates/bench/src`
/// makes public (outside inline test modules) must occur as a word in the binary
/// (`src/main.rs`), the integration tests or the crates that depend on `rdmabench` (the
/// benches), or be in [`REACHED`]. A name is a weak witness (a `pub fn run` passes while any
/// of them says `run`), but a new `pub` item that nothing outside names fails here.
#[test]
fn the_bench_library_makes_pub_only_what_its_users_name() {
    let bench = root().join("crates/bench");
    // Not this file, which names every one in REACHED.
    let mut users: Vec<PathBuf> = sources(&bench.join("tests"))
        .into_iter()
        .filter(|f| !f.ends_with("layers.rs"))
        .collect();
    users.push(bench.join("src/main.rs"));
    let workspace = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = workspace
        .lines()
        .find(|l| l.starts_with("members"))
        .unwrap();
    for member in members.split('"').skip(1).step_by(2) {
        let manifest = fs::read_to_string(root().join(member).join("Cargo.toml")).unwrap();
        if manifest.lines().any(|l| l.starts_with("rdmabench = ")) {
            users.extend(sources(&root().join(member)));
        }
    }
    let text: String = users
        .iter()
        .map(|f| fs::read_to_string(f).unwrap())
        .collect();
    let named: HashSet<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .collect();
    let reached: HashSet<&str> = REACHED.split_whitespace().collect();
    let mut public = Vec::new();
    for file in sources(&bench.join("src")) {
        if file.ends_with("main.rs") || file.ends_with("tests.rs") {
            continue;
        }
        public.extend(pub_names(outside_tests(
            &fs::read_to_string(&file).unwrap(),
        )));
    }
    assert!(
        public.len() > 100 && named.contains("rdmabench"),
        "read {public:?}"
    );
    let unnamed: Vec<&String> = public
        .iter()
        .filter(|n| !named.contains(n.as_str()) && !reached.contains(n.as_str()))
        .collect();
    assert!(
        unnamed.is_empty(),
        "pub in the bench library, named nowhere outside it: {unnamed:?}; make them \
         pub(crate) (or, if only a pub item's signature reaches them, add them to REACHED)"
    );
    for name in reached {
        assert!(
            public.iter().any(|n| n == name) && !named.contains(name),
            "{name} is in REACHED but is not pub, or is named outside: take it out"
        );
    }
}
