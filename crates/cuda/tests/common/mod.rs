//! Helpers shared by the integration tests.

use std::path::PathBuf;

/// The gpu_check example binary, which `cargo test` builds next to the test binaries (target/<profile>/examples);
/// `None` when it was not built (e.g. `cargo test --test <name>` alone).
pub fn gpu_check_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?; // target/<profile>/deps/<test> -> target/<profile>
    let bin = profile_dir
        .join("examples")
        .join(format!("gpu_check{}", std::env::consts::EXE_SUFFIX));
    bin.is_file().then_some(bin)
}
