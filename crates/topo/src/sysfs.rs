//! Reading sysfs below an injectable root.
//!
//! Paths given to [`Sysfs`] are absolute paths as seen on the machine being described
//! (`/sys/class/infiniband`); they are resolved below the root as a chroot would, so tests
//! point the root at a fixture tree and everything else stays the same. Every read is
//! confined and bounded, so that a copy of another machine's sysfs cannot make the reader
//! show this machine's files, hang or run out of memory:
//!
//! - each symbolic link is followed inside the root (an absolute target restarts at the
//!   root, `..` never climbs above it): `ports/1/state -> /etc/passwd` reads the root's
//!   `etc/passwd`, which a sysfs copy does not have;
//! - only regular files are read, and directories listed: a FIFO, a socket or a device
//!   (`/dev/zero`) is refused before it is opened;
//! - a file is read to at most [`MAX_READ_BYTES`], a directory listed to at most
//!   [`MAX_DIR_ENTRIES`] names.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io::{ErrorKind, Read};
use std::path::{Component, Path, PathBuf};

use crate::error::{Result, TopoError};

/// How many symbolic links one resolution may follow (the kernel's own limit).
const MAX_LINK_HOPS: usize = 40;

/// The most bytes read from one file: a sysfs attribute is at most a page, a PCI function's
/// `config` 4 KiB, a kernel's `/boot/config-<release>` about 300 KB.
pub const MAX_READ_BYTES: u64 = 1 << 20;

/// The most names listed from one directory (`/sys/bus/pci/devices` of a large host has a
/// few thousand).
pub const MAX_DIR_ENTRIES: usize = 100_000;

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

    /// Where the in-root absolute path `path` lives on this machine, its links not followed
    /// (for naming a path in a message; [`read`](Self::read) resolves it first).
    pub fn host_path(&self, path: &Path) -> PathBuf {
        let relative = path.strip_prefix("/").unwrap_or(path);
        self.root.join(relative)
    }

    /// Whether `path` exists inside the root (a dangling link, or one whose target is not
    /// inside the root, does not).
    pub fn exists(&self, path: &Path) -> bool {
        matches!(self.resolve(path), Ok(Some(_)))
    }

    /// The bytes of the regular file `path`, resolved inside the root: at most
    /// [`MAX_READ_BYTES`]; an error names the file and why it was not read (missing, not a
    /// regular file, too large, or the operating system's error).
    pub fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let host = self.host_path(path);
        let found = self.resolve(path)?.map(|p| self.host_path(&p));
        let Some(real) = found else {
            return Err(TopoError::NotFound { path: host });
        };
        // The type is checked before opening: opening a FIFO waits for a writer.
        let io = |source| TopoError::Io {
            path: host.clone(),
            source,
        };
        let kind = fs::symlink_metadata(&real).map_err(io)?.file_type();
        if !kind.is_file() {
            return Err(not_a_file(&host, kind));
        }
        let file = fs::File::open(&real).map_err(io)?;
        let kind = file.metadata().map_err(io)?.file_type();
        if !kind.is_file() {
            return Err(not_a_file(&host, kind));
        }
        let mut bytes = Vec::new();
        // One byte beyond the limit tells a file that is too large.
        file.take(MAX_READ_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.len() as u64 > MAX_READ_BYTES {
            return Err(TopoError::TooLarge {
                path: host,
                limit: MAX_READ_BYTES,
                what: "bytes",
            });
        }
        Ok(bytes)
    }

    /// The trimmed text of an attribute, or `None` when it cannot be read
    /// ([`read`](Self::read) says why).
    ///
    /// sysfs attributes legitimately fail to read (a port that is down answers EINVAL for
    /// its rate), so a failed read is "unknown", never an error.
    pub fn read_text(&self, path: &Path) -> Option<String> {
        let bytes = self.read(path).ok()?;
        Some(String::from_utf8_lossy(&bytes).trim().to_string())
    }

    /// The raw bytes of a file (a `config` space), or `None` when it cannot be read.
    pub fn read_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        self.read(path).ok()
    }

    /// Why `path` cannot be read (missing, refused, the operating system's error), or
    /// `None` when it can.
    pub fn why_unreadable(&self, path: &Path) -> Option<String> {
        self.read(path).err().map(|e| e.to_string())
    }

    /// The entry names of a directory, resolved inside the root, sorted; empty when the
    /// directory is missing; at most [`MAX_DIR_ENTRIES`] of them.
    pub fn list(&self, path: &Path) -> Result<Vec<String>> {
        let host = self.host_path(path);
        let Some(real) = self.resolve(path)? else {
            return Ok(Vec::new());
        };
        let entries = match fs::read_dir(self.host_path(&real)) {
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
            if names.len() == MAX_DIR_ENTRIES {
                return Err(TopoError::TooLarge {
                    path: host,
                    limit: MAX_DIR_ENTRIES as u64,
                    what: "entries",
                });
            }
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// The canonical in-root path of `path`, every symbolic link on the way followed inside
    /// the root.
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
                Err(e) if is_absent(&e) => return Ok(None),
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

/// Whether a lookup failed because the path is not there: missing, or a file where a
/// directory was needed on the way (`rate/x`).
fn is_absent(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

/// The refusal of something that is not a regular file.
fn not_a_file(path: &Path, kind: fs::FileType) -> TopoError {
    use std::os::unix::fs::FileTypeExt;
    let kind = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    TopoError::NotAFile {
        path: path.to_path_buf(),
        kind,
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

    /// A port directory under `root` whose `state` is what `make` leaves there.
    fn port_dir(root: &Path) -> PathBuf {
        let port = root.join("sys/class/infiniband/mlx5_0/ports/1");
        fs::create_dir_all(&port).unwrap();
        port
    }

    #[test]
    fn links_out_of_the_root_read_inside_it() {
        let root = scratch("escape");
        let port = port_dir(&root);
        symlink("/etc/passwd", port.join("state")).unwrap();
        symlink("../../../../../../../../etc/passwd", port.join("rate")).unwrap();
        symlink("/dev/zero", port.join("phys_state")).unwrap();
        let sysfs = Sysfs::new(&root);
        for name in ["state", "rate", "phys_state"] {
            let path = Path::new("/sys/class/infiniband/mlx5_0/ports/1").join(name);
            assert_eq!(sysfs.read_text(&path), None, "{name}");
            assert!(!sysfs.exists(&path), "{name}");
            let why = sysfs.why_unreadable(&path).unwrap();
            assert!(
                why.ends_with(&format!("ports/1/{name}: no such file inside the root")),
                "{why}"
            );
        }
        // The same link reads the root's own copy.
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::write(root.join("etc/passwd"), "4: ACTIVE\n").unwrap();
        let state = Path::new("/sys/class/infiniband/mlx5_0/ports/1/state");
        assert_eq!(sysfs.read_text(state).as_deref(), Some("4: ACTIVE"));
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let root = scratch("fifo");
        let dir = root.join("sys/class/infiniband/mlx5_0");
        fs::create_dir_all(&dir).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.join("fw_ver"))
            .status()
            .unwrap();
        assert!(made.success());
        symlink("fw_ver", dir.join("node_type")).unwrap();
        let sysfs = Sysfs::new(&root);
        let (done, got) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let path = Path::new("/sys/class/infiniband/mlx5_0/fw_ver");
            let _ = done.send((sysfs.read_text(path), sysfs.why_unreadable(path)));
        });
        let (text, why) = got
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("reading a FIFO hung");
        assert_eq!(text, None);
        let why = why.unwrap();
        assert!(
            why.contains("fw_ver is a FIFO, not a regular file"),
            "{why}"
        );
        let sysfs = Sysfs::new(&root);
        let why = sysfs
            .why_unreadable(Path::new("/sys/class/infiniband/mlx5_0/node_type"))
            .unwrap();
        assert!(why.contains("node_type is a FIFO"), "{why}");
        let why = sysfs.why_unreadable(Path::new("/sys/class")).unwrap();
        assert!(why.contains("is a directory, not a regular file"), "{why}");
    }

    #[test]
    fn a_device_is_refused_before_it_is_read() {
        // /dev/zero never ends: read, it would fill memory.
        let why = Sysfs::system()
            .why_unreadable(Path::new("/dev/zero"))
            .unwrap();
        assert_eq!(
            why,
            "/dev/zero is a device, not a regular file: refused (only files, directories and \
             links inside the sysfs root are read)"
        );
    }

    #[test]
    fn a_file_over_the_limit_is_refused_naming_it() {
        let root = scratch("large");
        let port = port_dir(&root);
        let big = fs::File::create(port.join("rate")).unwrap();
        big.set_len(MAX_READ_BYTES + 1).unwrap();
        fs::write(port.join("state"), vec![b'x'; MAX_READ_BYTES as usize]).unwrap();
        let sysfs = Sysfs::new(&root);
        let rate = Path::new("/sys/class/infiniband/mlx5_0/ports/1/rate");
        assert_eq!(sysfs.read_bytes(rate), None);
        let why = sysfs.why_unreadable(rate).unwrap();
        assert!(
            why.contains("ports/1/rate holds more than 1048576 bytes, the most read"),
            "{why}"
        );
        let state = Path::new("/sys/class/infiniband/mlx5_0/ports/1/state");
        assert_eq!(sysfs.read_bytes(state).map(|b| b.len()), Some(1 << 20));
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
