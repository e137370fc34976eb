//! Shared helpers of the integration tests.

use std::path::PathBuf;

use topo::Sysfs;

/// The directory of the committed fixture trees.
#[allow(dead_code)]
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A sysfs reader rooted at fixture `name`.
#[allow(dead_code)]
pub fn fixture(name: &str) -> Sysfs {
    Sysfs::new(fixtures_dir().join(name))
}
