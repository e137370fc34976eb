//! The committed fixture trees are exactly what tests/fixtures/make-fixtures.sh writes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::fixtures_dir;

/// A file's bytes or a symlink's target text.
#[derive(Debug, PartialEq)]
enum Entry {
    File(Vec<u8>),
    Link(PathBuf),
}

/// Every file and symlink below `root`, by path relative to it; directories are implied.
fn walk(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut entries = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for item in fs::read_dir(&dir).unwrap() {
            let path = item.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let relative = path.strip_prefix(root).unwrap().to_path_buf();
            if meta.file_type().is_symlink() {
                entries.insert(relative, Entry::Link(fs::read_link(&path).unwrap()));
            } else if meta.is_dir() {
                todo.push(path);
            } else {
                entries.insert(relative, Entry::File(fs::read(&path).unwrap()));
            }
        }
    }
    entries
}

/// The fixtures: the directories beside the script.
fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn every_fixture_has_a_readme() {
    let names = fixture_names();
    assert_eq!(
        names,
        [
            "dgx-h100",
            "downtrained",
            "old-kernel",
            "rxe-vm",
            "two-socket"
        ]
    );
    for name in names {
        let readme = fixtures_dir().join(&name).join("README.md");
        assert!(readme.is_file(), "{} is missing", readme.display());
    }
}

#[test]
fn committed_fixtures_match_the_generator() {
    let out = std::env::temp_dir().join(format!("topo-fixtures-{}", std::process::id()));
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).unwrap();
    let script = fixtures_dir().join("make-fixtures.sh");
    let status = match Command::new("bash").arg(&script).arg(&out).status() {
        Ok(status) => status,
        Err(e) => {
            println!("skipped: cannot run bash ({e}); the fixtures were not compared");
            return;
        }
    };
    assert!(status.success(), "{} failed: {status}", script.display());
    for name in fixture_names() {
        let mut committed = walk(&fixtures_dir().join(&name));
        committed.remove(Path::new("README.md"));
        let generated = walk(&out.join(&name));
        let only_committed: Vec<_> = committed
            .keys()
            .filter(|k| !generated.contains_key(*k))
            .collect();
        let only_generated: Vec<_> = generated
            .keys()
            .filter(|k| !committed.contains_key(*k))
            .collect();
        assert!(
            only_committed.is_empty() && only_generated.is_empty(),
            "{name}: only committed {only_committed:?}; only generated {only_generated:?}; \
             rerun crates/topo/tests/fixtures/make-fixtures.sh"
        );
        for (path, entry) in &generated {
            assert!(
                committed.get(path) == Some(entry),
                "{name}/{}: committed content differs from the generator's; \
                 rerun crates/topo/tests/fixtures/make-fixtures.sh",
                path.display()
            );
        }
    }
    let _ = fs::remove_dir_all(&out);
}
