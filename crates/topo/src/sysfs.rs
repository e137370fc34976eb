//! Reading sysfs below an injectable root.
//!
//! Paths given to [`Sysfs`] are absolute paths as seen on the machine being described
//! (`/sys/class/infiniband`); they are joined below the root, so tests point the root at a
//! fixture tree and everything else stays the same. Symbolic links are resolved inside the
//! root: an absolute link target restarts at the root, and `..` never climbs above it.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use crate::error::{Result, TopoError};

/// How many symbolic links one resolution may follow (the kernel's own limit).
const MAX_LINK_HOPS: usize = 40;

/// A sysfs (and procfs) reader rooted at a directory: `/` on a live system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Self::system()
    }
}

impl Sysfs {
    /// A reader whose `/` is `root` (a fixture tree in tests).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The live system's sysfs, rooted at `/`.
    pub fn system() -> Self {
        Self::new("/")
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the in-root absolute path `path` lives on this machine.
    pub fn host_path(&self, path: &Path) -> PathBuf {
        let relative = path.strip_prefix("/").unwrap_or(path);
        self.root.join(relative)
    }

    /// Whether `path` exists (a dangling link does not).
    pub fn exists(&self, path: &Path) -> bool {
        self.host_path(path).exists()
    }

    /// The trimmed text of an attribute, or `None` when it is missing or unreadable.
    ///
    /// sysfs attributes legitimately fail to read (a port that is down answers EINVAL for
    /// its rate), so a failed read is "unknown", never an error.
    pub fn read_text(&self, path: &Path) -> Option<String> {
        let text = fs::read_to_string(self.host_path(path)).ok()?;
        Some(text.trim().to_string())
    }

    /// The raw bytes of a file (a `config` space), or `None` when missing or unreadable.
    pub fn read_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        fs::read(self.host_path(path)).ok()
    }

    /// The entry names of a directory, sorted; empty when the directory is missing.
    pub fn list(&self, path: &Path) -> Result<Vec<String>> {
        let host = self.host_path(path);
        let entries = match fs::read_dir(&host) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(TopoError::Io { path: host, source }),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| TopoError::Io {
                path: host.clone(),
                source,
            })?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// The canonical in-root path of `path`, every symbolic link on the way followed.
    ///
    /// `Ok(None)` when some component does not exist (a missing `device` link, say).
    pub fn resolve(&self, path: &Path) -> Result<Option<PathBuf>> {
        let mut done: Vec<OsString> = Vec::new();
        let mut todo: VecDeque<OsString> = VecDeque::new();
        push_components(&mut todo, path, false);
        let mut hops = 0;
        while let Some(part) = todo.pop_front() {
            if part == ".." {
                done.pop();
                continue;
            }
            done.push(part);
            let host = self.host_path(&join(&done));
            let meta = match fs::symlink_metadata(&host) {
                Ok(meta) => meta,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(source) => return Err(TopoError::Io { path: host, source }),
            };
            if !meta.file_type().is_symlink() {
                continue;
            }
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return Err(TopoError::SymlinkLoop {
                    path: path.to_path_buf(),
                });
            }
            let target = fs::read_link(&host).map_err(|source| TopoError::Io {
                path: host.clone(),
                source,
            })?;
            done.pop();
            if target.is_absolute() {
                done.clear();
            }
            push_components(&mut todo, &target, true);
        }
        Ok(Some(join(&done)))
    }

    /// The last component of the resolved `path` (a `driver` or `iommu_group` link's target).
    pub fn link_name(&self, path: &Path) -> Option<String> {
        let resolved = self.resolve(path).ok()??;
        Some(resolved.file_name()?.to_string_lossy().into_owned())
    }
}

/// Queue the components of `path`; in front of what is queued when `front`.
fn push_components(todo: &mut VecDeque<OsString>, path: &Path, front: bool) {
    let mut parts: Vec<OsString> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => parts.push(name.to_os_string()),
            Component::ParentDir => parts.push(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    if front {
        for part in parts.into_iter().rev() {
            todo.push_front(part);
        }
    } else {
        todo.extend(parts);
    }
}

/// An absolute in-root path from its components.
fn join(parts: &[OsString]) -> PathBuf {
    let mut path = PathBuf::from("/");
    path.extend(parts);
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("topo-sysfs-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn relative_links_resolve_from_the_real_directory() {
        let root = scratch("rel");
        let dev = root.join("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0");
        fs::create_dir_all(dev.join("infiniband/mlx5_0")).unwrap();
        fs::create_dir_all(root.join("sys/class/infiniband")).unwrap();
        symlink(
            "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0",
            root.join("sys/class/infiniband/mlx5_0"),
        )
        .unwrap();
        symlink(
            "../../../0000:01:00.0",
            dev.join("infiniband/mlx5_0/device"),
        )
        .unwrap();
        let sysfs = Sysfs::new(&root);
        let got = sysfs
            .resolve(Path::new("/sys/class/infiniband/mlx5_0/device"))
            .unwrap();
        assert_eq!(
            got,
            Some(PathBuf::from(
                "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
            ))
        );
    }

    #[test]
    fn absolute_links_stay_inside_the_root() {
        let root = scratch("abs");
        fs::create_dir_all(root.join("sys/devices/x")).unwrap();
        fs::create_dir_all(root.join("sys/class")).unwrap();
        symlink("/sys/devices/x", root.join("sys/class/y")).unwrap();
        symlink("../../../../../../sys/devices/x", root.join("sys/class/z")).unwrap();
        let sysfs = Sysfs::new(&root);
        for link in ["/sys/class/y", "/sys/class/z"] {
            let got = sysfs.resolve(Path::new(link)).unwrap();
            assert_eq!(got, Some(PathBuf::from("/sys/devices/x")), "{link}");
        }
    }

    #[test]
    fn missing_and_looping_links() {
        let root = scratch("loop");
        fs::create_dir_all(root.join("sys")).unwrap();
        symlink("b", root.join("sys/a")).unwrap();
        symlink("a", root.join("sys/b")).unwrap();
        let sysfs = Sysfs::new(&root);
        assert!(matches!(
            sysfs.resolve(Path::new("/sys/a")),
            Err(TopoError::SymlinkLoop { .. })
        ));
        assert_eq!(sysfs.resolve(Path::new("/sys/none")).unwrap(), None);
        assert!(sysfs.list(Path::new("/sys/none")).unwrap().is_empty());
        assert_eq!(sysfs.read_text(Path::new("/sys/none")), None);
    }
}
