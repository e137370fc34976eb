// `promtool check metrics` (Debian's `prometheus` package, which `scripts/setup.sh`
// installs), shared by the integration tests (`common`) and the exporter's unit tests
// (`src/report/prom.rs`, which include this file by path).

use std::io::Write as _;
use std::process::{Command, Stdio};

/// promtool's complaints about `text`; empty when it is valid and lint-clean.
pub fn check(text: &[u8]) -> String {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package): run scripts/setup.sh");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(text).expect("write to promtool");
    }
    let out = child.wait_with_output().expect("promtool's answer");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        said
    } else {
        format!("promtool failed ({}): {said}", out.status)
    }
}
