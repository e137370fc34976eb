//! The files rdmabench writes (`--json`, `--csv`, `plot -o`), and those it reads that the
//! user names (records, logs, `--topo`): each path is checked before any work starts, so a
//! typo costs nothing; an output is written atomically (a temporary file beside it,
//! synced, then a rename), so a reader never sees half a file. The temporary file has a random
//! name and is created only where nothing is (`O_EXCL`), so a link planted beside the output
//! is never followed. Every message names the path as the
//! user gave it. A test's record may go to stdout instead (`--json -`, `--csv -`); the other
//! outputs refuse `-`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::plan::PlanError;

/// Whether `path` is `-`: stdout as an output (`--json -`), stdin as an input.
pub fn is_dash(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Checks a test's record outputs, `(flag, path)`: `-` (stdout) for one of them at most,
/// any other path as [`check_writable`].
pub fn check_record_outputs(outputs: &[(&str, Option<&Path>)]) -> Result<(), PlanError> {
    let to_stdout: Vec<&str> = outputs
        .iter()
        .filter(|(_, path)| path.is_some_and(is_dash))
        .map(|(flag, _)| *flag)
        .collect();
    if to_stdout.len() > 1 {
        return Err(PlanError::Value(format!(
            "{} both name '-': stdout can hold one of them only; give the other a file path",
            to_stdout.join(" and ")
        )));
    }
    for (flag, path) in outputs {
        match path {
            Some(path) if !is_dash(path) => check_writable(flag, path)?,
            _ => {}
        }
    }
    Ok(())
}

/// The folder a file path lives in ("." for a bare name).
fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// 16 random hex digits.
fn random_hex() -> io::Result<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Creates a temporary file beside `path` (the same folder, so that renaming it over `path`
/// is atomic), its name random and ending in `suffix`, and only where nothing is yet
/// (`O_EXCL`: a link planted at the name is not followed).
fn create_temp(path: &Path, suffix: &str) -> io::Result<(PathBuf, File)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file path"))?;
    let mut tries = 0;
    loop {
        let hex = random_hex()?;
        let tmp = folder_of(path).join(format!(".{}.{hex}{suffix}", name.to_string_lossy()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 3 => tries += 1,
            opened => return opened.map(|file| (tmp, file)),
        }
    }
}

/// Checks that `path`, given to `flag`, can be written: it is not `-` (stdout: only a test's
/// record may go there, [`check_record_outputs`]), not a folder, its folder exists and a file
/// can be created there (tried with the temporary file the write will use, then removed). A
/// refusal is a usage error naming the flag, the path and what would do.
pub fn check_writable(flag: &str, path: &Path) -> Result<(), PlanError> {
    let shown = path.display();
    if is_dash(path) {
        return Err(PlanError::Value(format!(
            "{flag} '-': this command writes {flag} to a file, not to stdout; give a file path \
             (./- for a file named -)"
        )));
    }
    if path.is_dir() {
        return Err(PlanError::Value(format!(
            "{flag} '{shown}' is a folder; give the path of a file (in it, or elsewhere)"
        )));
    }
    if path.file_name().is_none() {
        return Err(PlanError::Value(format!(
            "{flag} '{shown}' is not a file path; give a file name"
        )));
    }
    let folder = folder_of(path);
    if !folder.is_dir() {
        let what = if folder.exists() {
            "is not a folder"
        } else {
            "does not exist"
        };
        return Err(PlanError::Value(format!(
            "{flag} '{shown}': the folder '{}' {what}; create it first, or give a path in an \
             existing folder",
            folder.display()
        )));
    }
    match create_temp(path, ".check") {
        Ok((tmp, _)) => {
            let _ = std::fs::remove_file(&tmp);
            Ok(())
        }
        Err(e) => Err(PlanError::Value(format!(
            "{flag} '{shown}': cannot create a file in the folder '{}' ({e}); give a path in a \
             folder you can write to",
            folder.display()
        ))),
    }
}

/// Checks that `path`, the input `what` names ("--topo", "the baseline record"), is a file
/// that exists, before anything is read or run: a path that is not there or is a folder is a
/// usage error naming the path, `expected` (what would do: "a JSON file written by a test's
/// --json") and what is there: the folder's files, or those of the nearest folder above a
/// missing path that exists.
pub fn check_input(what: &str, path: &Path, expected: &str) -> Result<(), PlanError> {
    let shown = path.display();
    if path.is_dir() {
        return Err(PlanError::Value(format!(
            "{what} '{shown}' is a folder; give {expected} (the folder holds {})",
            listing(path)
        )));
    }
    if path.exists() {
        return Ok(());
    }
    let nearest = path
        .ancestors()
        .skip(1)
        .map(|a| {
            if a.as_os_str().is_empty() {
                Path::new(".")
            } else {
                a
            }
        })
        .find(|a| a.is_dir())
        .unwrap_or(Path::new("."));
    Err(PlanError::Value(format!(
        "{what} '{shown}' does not exist; give {expected} ('{}' holds {})",
        nearest.display(),
        listing(nearest)
    )))
}

/// What a folder holds, for a message: its entries in order (folders with a trailing /,
/// hidden ones left out), the first dozen named and the rest counted.
fn listing(folder: &Path) -> String {
    const SHOWN: usize = 12;
    let mut names: Vec<String> = match std::fs::read_dir(folder) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.path().is_dir() {
                    format!("{name}/")
                } else {
                    name
                }
            })
            .collect(),
        Err(e) => return format!("nothing readable: {e}"),
    };
    names.sort();
    match names.len() {
        0 => "nothing".to_string(),
        n if n <= SHOWN => names.join(", "),
        n => format!("{} and {} more", names[..SHOWN].join(", "), n - SHOWN),
    }
}

/// Reads the file at `path` (`what` names it: "the log"), at most `limit` bytes: a larger
/// file, or a device that never ends (`/dev/zero`), is refused when the limit is passed,
/// the error naming the path and the limit (exit 2).
pub fn read_bounded(what: &str, path: &Path, limit: u64) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let shown = path.display();
    let file = File::open(path).with_context(|| format!("cannot read {what} '{shown}'"))?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {what} '{shown}'"))?;
    if bytes.len() as u64 > limit {
        return Err(PlanError::Value(format!(
            "{what} '{shown}' is larger than the {} this reads (its limit); give a smaller \
             file, e.g. the lines that matter (grep)",
            crate::units::format_size(limit)
        ))
        .into());
    }
    Ok(bytes)
}

/// Writes `bytes` to `path` atomically: a new temporary file beside it, synced to the disk,
/// then a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    write_through_temp(path, bytes).with_context(|| format!("cannot write '{}'", path.display()))
}

fn write_through_temp(path: &Path, bytes: &[u8]) -> Result<()> {
    let (tmp, mut file) = create_temp(path, ".tmp")?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    drop(file);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    replace_with(&tmp, path)?;
    // The rename itself reaches the disk with its folder (best effort: not every system
    // lets a folder be synced).
    if let Ok(folder) = File::open(folder_of(path)) {
        let _ = folder.sync_all();
    }
    Ok(())
}

/// Renames the finished temporary file `tmp` over `path`, which keeps the mode of the file
/// it replaces (a `--prom` file made 0600 stays 0600; a new file takes the usual 0666 less
/// the umask); on failure the temporary file is removed and the error names `path` (the
/// caller adds what was being written).
pub fn replace_with(tmp: &Path, path: &Path) -> Result<()> {
    // Only a regular file's: a link at `path` is replaced by the rename, not followed.
    let kept = match std::fs::symlink_metadata(path) {
        Ok(old) if old.is_file() => std::fs::set_permissions(tmp, old.permissions()),
        _ => Ok(()),
    };
    kept.and_then(|()| std::fs::rename(tmp, path)).map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        anyhow::anyhow!(
            "cannot move the finished file into place as '{}': {e}",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("rdmabench-files-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn a_writable_path_passes_and_leaves_nothing_behind() {
        let dir = scratch("ok");
        check_writable("--json", &dir.join("run.json")).unwrap();
        assert!(names(&dir).is_empty(), "{:?}", names(&dir));
        write_atomically(&dir.join("run.json"), b"{}").unwrap();
        assert_eq!(std::fs::read(dir.join("run.json")).unwrap(), b"{}");
        assert_eq!(names(&dir), vec!["run.json"]);
        // An existing file is replaced.
        check_writable("--json", &dir.join("run.json")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_link_planted_at_a_predictable_temporary_name_is_not_followed() {
        let dir = scratch("planted");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        // Where a temporary name made of the process id would be, for each use of one.
        for suffix in [".tmp", ".check"] {
            let planted = dir.join(format!(".run.json.{}{suffix}", std::process::id()));
            std::os::unix::fs::symlink(&victim, planted).unwrap();
        }
        let path = dir.join("run.json");
        check_writable("--json", &path).unwrap();
        write_atomically(&path, b"{}").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
        assert!(kind.is_file(), "{kind:?}");
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        let mut left = names(&dir);
        left.retain(|n| n.ends_with(".tmp") || n.ends_with(".check"));
        assert_eq!(left.len(), 2, "only the planted links: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporary_files_have_random_names_and_are_created_new() {
        let dir = scratch("random");
        let path = dir.join("run.json");
        let (first, _) = create_temp(&path, ".tmp").unwrap();
        let (second, _) = create_temp(&path, ".tmp").unwrap();
        assert_ne!(first, second);
        assert_eq!(first.parent(), Some(dir.as_path()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_folder_is_refused_naming_the_path_given() {
        let dir = scratch("missing");
        let path = dir.join("nope").join("run.json");
        let err = check_writable("--json", &path).unwrap_err();
        assert_eq!(
            err.message(),
            format!(
                "--json '{}': the folder '{}' does not exist; create it first, or give a path in \
                 an existing folder",
                path.display(),
                dir.join("nope").display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_folder_or_a_file_as_folder_is_refused() {
        let dir = scratch("folder");
        let err = check_writable("--csv", &dir).unwrap_err();
        assert!(
            err.message()
                .contains("is a folder; give the path of a file"),
            "{err}"
        );
        std::fs::write(dir.join("file"), b"").unwrap();
        let err = check_writable("-o", &dir.join("file").join("x.svg")).unwrap_err();
        assert!(err.message().contains("is not a folder"), "{err}");
        let err = check_writable("--json", Path::new("..")).unwrap_err();
        assert!(err.message().contains("'..'"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_input_names_what_the_nearest_folder_holds_and_a_folder_its_files() {
        let dir = scratch("input");
        std::fs::create_dir_all(dir.join("baselines/fw-old")).unwrap();
        std::fs::write(dir.join("baselines/fw-old/write-bw.json"), b"{}").unwrap();
        std::fs::write(dir.join("baselines/.hidden"), b"").unwrap();
        check_input("x", &dir.join("baselines/fw-old/write-bw.json"), "a record").unwrap();
        let missing = dir.join("baselines/fw_old/write-bw.json");
        let err = check_input("the baseline", &missing, "a record").unwrap_err();
        assert_eq!(
            err.message(),
            format!(
                "the baseline '{}' does not exist; give a record ('{}' holds fw-old/)",
                missing.display(),
                dir.join("baselines").display()
            )
        );
        let err = check_input("--topo", &dir.join("baselines/fw-old"), "a file").unwrap_err();
        assert!(
            err.message()
                .ends_with("is a folder; give a file (the folder holds write-bw.json)"),
            "{err}"
        );
        for i in 0..14 {
            std::fs::write(dir.join(format!("f{i:02}")), b"").unwrap();
        }
        assert!(
            listing(&dir).ends_with("f10 and 3 more"),
            "{}",
            listing(&dir)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stdout_is_one_record_output_at_most_and_no_other_output() {
        let dir = scratch("stdout");
        let file = dir.join("run.csv");
        let dash = Path::new("-");
        check_record_outputs(&[("--json", Some(dash)), ("--csv", Some(&file))]).unwrap();
        check_record_outputs(&[("--json", None), ("--csv", Some(dash))]).unwrap();
        let err =
            check_record_outputs(&[("--json", Some(dash)), ("--csv", Some(dash))]).unwrap_err();
        assert_eq!(
            err.message(),
            "--json and --csv both name '-': stdout can hold one of them only; give the other a \
             file path"
        );
        let err = check_writable("--json", dash).unwrap_err();
        assert_eq!(
            err.message(),
            "--json '-': this command writes --json to a file, not to stdout; give a file path \
             (./- for a file named -)"
        );
        assert!(names(&dir).is_empty(), "{:?}", names(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_replaced_file_keeps_its_mode_and_a_new_one_takes_the_usual() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = scratch("mode");
        let (kept, new) = (dir.join("node.prom"), dir.join("new.prom"));
        std::fs::write(&kept, "old\n").unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomically(&kept, b"new\n").unwrap();
        write_atomically(&new, b"new\n").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&kept), 0o600, "the replaced file's mode");
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "new\n");
        let usual = std::fs::File::create(dir.join("plain")).map(|_| mode(&dir.join("plain")));
        assert_eq!(mode(&new), usual.unwrap());
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_read_stops_at_its_limit_naming_it() {
        let dir = scratch("bounded");
        let file = dir.join("big.log");
        std::fs::write(&file, vec![b'x'; 2048]).unwrap();
        assert_eq!(read_bounded("the log", &file, 2048).unwrap().len(), 2048);
        let e = read_bounded("the log", &file, 1024).unwrap_err();
        assert!(e.downcast_ref::<PlanError>().is_some(), "exit 2");
        let e = e.to_string();
        assert!(
            e.contains("the log '") && e.contains("big.log") && e.contains("1 KiB"),
            "{e}"
        );
        let e = read_bounded("the log", Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(e.to_string().contains("larger than the 1 MiB"), "{e}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_failed_write_names_the_path_not_the_temporary_file() {
        let dir = scratch("fail");
        let path = dir.join("gone").join("run.json");
        let err = format!("{:#}", write_atomically(&path, b"{}").unwrap_err());
        assert!(
            err.starts_with(&format!("cannot write '{}'", path.display())),
            "{err}"
        );
        assert!(!err.contains(".tmp"), "{err}");
        // The rename's failure too: a folder stands where the file should go.
        std::fs::create_dir_all(dir.join("run.json").join("inside")).unwrap();
        let err = format!(
            "{:#}",
            write_atomically(&dir.join("run.json"), b"{}").unwrap_err()
        );
        assert!(
            err.contains(&format!("as '{}'", dir.join("run.json").display())),
            "{err}"
        );
        assert!(!err.contains(".tmp"), "{err}");
        assert_eq!(
            names(&dir),
            vec!["run.json"],
            "the temporary file was removed"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
