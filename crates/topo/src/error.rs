//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong while reading topology or parsing a planner value.
///
/// Each message names the path or value at fault and what would have been valid.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// A file or directory that must exist could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path on this machine (the injected root included).
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A sysfs attribute held a value this crate does not understand.
    #[error("{path}: unexpected value {value:?}; expected {expected}")]
    Parse {
        /// The attribute's path on this machine.
        path: PathBuf,
        /// The text that was read, trimmed.
        value: String,
        /// The accepted forms.
        expected: &'static str,
    },

    /// No RDMA device of that name.
    #[error(
        "no RDMA device {name:?} under {dir}; present: {present}. \
         `rdma link` or `ibv_devices` lists the devices"
    )]
    NoRdmaDevice {
        /// The name asked for.
        name: String,
        /// The directory searched.
        dir: PathBuf,
        /// The names that are there, comma separated, or "none".
        present: String,
    },

    /// No PCI function at that address.
    #[error("no PCI function {bdf} under {dir}; `lspci -D` lists the functions present")]
    NoPciFunction {
        /// The normalised address asked for.
        bdf: String,
        /// The directory searched.
        dir: PathBuf,
    },

    /// A PCI address that is not of the form domain:bus:device.function.
    #[error(
        "{value:?} is not a PCI address; expected domain:bus:device.function such as \
         0000:17:00.0 (nvidia-smi's 00000000:17:00.0 and lspci's 17:00.0 are accepted too)"
    )]
    BadBdf {
        /// The text given.
        value: String,
    },

    /// A PCI function whose sysfs directory is not below a `pciDDDD:BB` host bridge.
    #[error(
        "{bdf} resolves to {path}, which is not below a /sys/devices/pciDDDD:BB host bridge; \
         cannot place it in the PCIe hierarchy"
    )]
    NotInPciTree {
        /// The function's address.
        bdf: String,
        /// Where its sysfs directory resolved to (inside the sysfs root).
        path: PathBuf,
    },

    /// A file that is not there (links followed inside the sysfs root).
    #[error("cannot read {path}: no such file inside the root")]
    NotFound {
        /// The path on this machine (the injected root included).
        path: PathBuf,
    },

    /// Something other than a regular file where a file is read under the sysfs root.
    #[error("{path} is {kind}, not a regular file: refused (only files, directories and links inside the sysfs root are read)")]
    NotAFile {
        /// The path on this machine (the injected root included).
        path: PathBuf,
        /// What it is: "a FIFO", "a device", ...
        kind: &'static str,
    },

    /// A file or directory beyond what one read takes.
    #[error("{path} holds more than {limit} {what}, the most read from one file or directory under the sysfs root: refused")]
    TooLarge {
        /// The path on this machine (the injected root included).
        path: PathBuf,
        /// The limit.
        limit: u64,
        /// "bytes" or "entries".
        what: &'static str,
    },

    /// Symbolic links that loop or chain too deeply.
    #[error("too many levels of symbolic links resolving {path} (a loop?)")]
    SymlinkLoop {
        /// The path being resolved (inside the sysfs root).
        path: PathBuf,
    },

    /// A malformed planner value (`--pcie`, `--rate`, `--mtu`, `--link-layer`, `--mps`).
    #[error("bad {what} {value:?}: {reason}; valid: {valid}")]
    BadValue {
        /// What the value was for, e.g. "PCIe link".
        what: &'static str,
        /// The text given.
        value: String,
        /// What is wrong with it.
        reason: String,
        /// The accepted forms.
        valid: &'static str,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = TopoError> = std::result::Result<T, E>;
