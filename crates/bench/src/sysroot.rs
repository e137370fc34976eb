//! `--sysfs-root DIR`: examine a copy of another machine's `/sys` (and `/proc`) instead of
//! this one's, as `topo` and `doctor` do.

use std::path::{Path, PathBuf};

use topo::Sysfs;

/// clap value parser of `--sysfs-root`: a directory holding `sys/`, as `/` holds `/sys`.
pub(crate) fn parse_sysfs_root(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if !path.is_dir() {
        return Err(format!(
            "'{text}' is not a directory: give the directory that holds a copy of sys/ (and \
             proc/), e.g. crates/topo/tests/fixtures/dgx-h100"
        ));
    }
    if !path.join("sys").is_dir() {
        return Err(format!(
            "'{text}' has no sys/ directory: give the directory that holds the copy of sys/ \
             (as / holds /sys), not sys/ itself"
        ));
    }
    Ok(path)
}

/// The reader for an optional `--sysfs-root`: the live system without one.
pub(crate) fn sysfs_for(root: Option<&Path>) -> Sysfs {
    match root {
        Some(root) => Sysfs::new(root),
        None => Sysfs::system(),
    }
}

/// Whether `sysfs` reads this machine (`/`), so that verbs and this process's CPU affinity
/// describe the same machine as the files.
pub(crate) fn is_live(sysfs: &Sysfs) -> bool {
    sysfs.root() == Path::new("/")
}

/// A sysfs fixture tree of crates/topo/tests/fixtures, for unit tests.
#[cfg(test)]
pub(crate) fn fixture(name: &str) -> Sysfs {
    Sysfs::new(format!(
        "{}/../topo/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_must_hold_sys() {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../topo/tests/fixtures/dgx-h100"
        );
        assert!(parse_sysfs_root(fixture).is_ok());
        let err = parse_sysfs_root(&format!("{fixture}/sys")).unwrap_err();
        assert!(err.contains("no sys/ directory"), "{err}");
        let err = parse_sysfs_root("/nonexistent/snapshot").unwrap_err();
        assert!(
            err.contains("'/nonexistent/snapshot' is not a directory"),
            "{err}"
        );
        assert!(is_live(&sysfs_for(None)));
        assert!(!is_live(&sysfs_for(Some(Path::new(fixture)))));
    }
}
