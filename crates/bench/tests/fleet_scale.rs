//! `compare` and `plot` of large sweep records, and of records whose names are hostile: the
//! work grows in proportion to the ranks (6 times the ranks take about 6 times the CPU, not
//! 36), and text from a record reaches a picture or a pull-request comment escaped and cut.
//! docs/cluster.md's scale table gives the figures at 100,000 ranks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod synthetic;

use std::path::Path;
use std::time::Duration;

use common::{bin, scratch, text};

/// Writes the before and after sweeps of `ranks` ranks into `dir`.
fn sweeps(dir: &Path, ranks: usize) -> (String, String) {
    let (before, after) = (
        dir.join(format!("before-{ranks}.json")),
        dir.join(format!("after-{ranks}.json")),
    );
    std::fs::write(&before, synthetic::sweep(ranks, None, &synthetic::mlx5)).unwrap();
    std::fs::write(&after, synthetic::sweep(ranks, Some(700), &synthetic::mlx5)).unwrap();
    (
        before.to_str().unwrap().to_string(),
        after.to_str().unwrap().to_string(),
    )
}

/// The CPU time `rdmabench ARGS` took (on a busy machine its wall time would be its
/// neighbours' as much as its own), checking its exit status.
fn timed(args: &[&str], code: i32) -> Duration {
    let m = common::measured(bin().args(args));
    assert_eq!(m.code, Some(code), "{args:?}: {}", m.text);
    m.cpu
}

#[test]
fn compare_and_plot_grow_in_proportion_to_the_ranks() {
    let dir = scratch("fleet-scale");
    let (small, large) = (2_000, 12_000);
    let mut took = Vec::new();
    for ranks in [small, large] {
        let (before, after) = sweeps(&dir, ranks);
        let png = dir.join(format!("map-{ranks}.png"));
        let compare = timed(&["compare", &before, &after], 3);
        let plot = timed(&["plot", &after, "-o", png.to_str().unwrap()], 0);
        eprintln!(
            "{ranks} ranks: compare {:.2} s, plot {:.2} s of CPU",
            compare.as_secs_f64(),
            plot.as_secs_f64()
        );
        took.push((compare, plot));
    }
    let ratio = |a: Duration, b: Duration| b.as_secs_f64() / a.as_secs_f64();
    let (compare, plot) = (ratio(took[0].0, took[1].0), ratio(took[0].1, took[1].1));
    // 6 times the ranks: about 6 times the work when it is linear (a little more for the
    // sorted maps' logarithm, less for a fixed start-up), 36 for the square.
    assert!(
        compare < 15.0,
        "compare took {compare:.1} times as long: {took:?}"
    );
    assert!(plot < 15.0, "plot took {plot:.1} times as long: {took:?}");
    std::fs::remove_dir_all(dir).ok();
}

/// A device name of 200,000 characters that retitles the terminal, clears lines and starts a
/// Markdown heading on a line of its own.
fn hostile(r: usize) -> String {
    match r {
        3 => format!(
            "mlx5_3\x1b]0;owned\x07\x1b[1A\x1b[2K\n## injected{}",
            "x".repeat(200_000)
        ),
        _ => synthetic::mlx5(r),
    }
}

#[test]
fn names_from_a_record_reach_pictures_and_markdown_escaped_and_cut() {
    let dir = scratch("fleet-hostile");
    let (before, after) = (dir.join("before.json"), dir.join("after.json"));
    std::fs::write(&before, synthetic::sweep(12, None, &hostile)).unwrap();
    std::fs::write(&after, synthetic::sweep(12, Some(3), &hostile)).unwrap();
    let (svg, png) = (dir.join("map.svg"), dir.join("map.png"));
    for picture in [&svg, &png] {
        let out = bin()
            .args([
                "plot",
                after.to_str().unwrap(),
                "-o",
                picture.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    let bad = svg
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'));
    assert_eq!(bad, None, "a control character in the SVG (invalid XML)");
    assert!(
        svg.contains("mlx5_3\\u{1b}]0;owned"),
        "escaped, not dropped"
    );
    assert!(
        svg.len() < 2_000_000,
        "the label is cut: {} bytes",
        svg.len()
    );
    // The PNG's width and height (its IHDR) stay within a screen's few thousand pixels.
    let png = std::fs::read(&png).unwrap();
    let dim = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    assert!(
        dim(16) < 4000 && dim(20) < 4000,
        "{} x {}",
        dim(16),
        dim(20)
    );
    for format in [&[][..], &["--markdown"][..]] {
        let out = bin()
            .args(["compare", before.to_str().unwrap(), after.to_str().unwrap()])
            .args(format)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        let shown = text(&out);
        assert!(!shown.contains('\x1b'), "an escape reached the terminal");
        assert!(
            !shown.lines().any(|l| l.starts_with("## injected")),
            "a line was injected: {shown}"
        );
        assert!(shown.contains("mlx5_3\\u{1b}]0;owned"), "{shown}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// The test's name in a sweep record (each pair's, the list of tests) with escape sequences
/// and a Markdown heading on a line of its own: compare's table, its findings and its
/// Markdown, and plot's picture, show it escaped.
#[test]
fn a_test_name_from_a_record_reaches_the_terminal_and_markdown_escaped() {
    let dir = scratch("fleet-hostile-test");
    let hostile = r#""write-bw\u001b]0;owned\u0007\n## injected""#;
    let (before, after) = (dir.join("before.json"), dir.join("after.json"));
    for (path, slow) in [(&before, None), (&after, Some(3))] {
        let json = synthetic::sweep(12, slow, &synthetic::mlx5).replace(r#""write-bw""#, hostile);
        std::fs::write(path, json).unwrap();
    }
    for format in [&[][..], &["--markdown"][..]] {
        let out = bin()
            .args(["compare", before.to_str().unwrap(), after.to_str().unwrap()])
            .args(format)
            .output()
            .unwrap();
        let shown = text(&out);
        assert_eq!(out.status.code(), Some(3), "{shown}");
        assert!(
            !shown.contains('\x1b'),
            "an escape reached the terminal: {shown:?}"
        );
        assert!(
            !shown.lines().any(|l| l.starts_with("## injected")),
            "a line was injected: {shown}"
        );
        assert!(
            shown.contains("write-bw\\u{1b}]0;owned\\u{7}\\n## injected"),
            "{shown}"
        );
    }
    let svg = dir.join("map.svg");
    let out = bin()
        .args(["plot", after.to_str().unwrap(), "-o", svg.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let svg = std::fs::read_to_string(&svg).unwrap();
    let bad = svg
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'));
    assert_eq!(bad, None, "a control character in the SVG (invalid XML)");
    std::fs::remove_dir_all(dir).ok();
}

/// docs/cluster.md's figures: `compare` of two 100,000-rank sweeps and `plot` of one, each
/// under 10 s of CPU, its wall time and peak memory printed, with the binary `RDMABENCH_BIN` names (the
/// figures are a release build's: `cargo build --release`, then
/// `RDMABENCH_BIN=target/release/rdmabench cargo test --test fleet_scale -- --ignored`).
#[test]
#[ignore = "a measurement for the docs, with a release build"]
fn compare_and_plot_of_100000_ranks_take_seconds() {
    let binary = std::env::var("RDMABENCH_BIN").unwrap_or(env!("CARGO_BIN_EXE_rdmabench").into());
    let dir = scratch("fleet-100k");
    let (before, after) = sweeps(&dir, 100_000);
    let png = dir.join("map.png");
    for args in [
        vec!["compare", &before, &after],
        vec!["plot", &after, "-o", png.to_str().unwrap()],
    ] {
        let mut cmd = std::process::Command::new(&binary);
        let m = common::measured(cmd.args(&args));
        eprintln!(
            "{} of 100,000 ranks ({} MB a record): {:.2} s ({:.2} s CPU), peak {} MiB",
            args[0],
            std::fs::metadata(&after).unwrap().len() >> 20,
            m.wall.as_secs_f64(),
            m.cpu.as_secs_f64(),
            m.rss_kib / 1024
        );
        let shown = &m.text[..m.text.len().min(2000)];
        assert!(matches!(m.code, Some(0 | 3)), "{shown}");
        assert!(m.cpu < Duration::from_secs(10), "{args:?}: {:?}", m.cpu);
    }
    std::fs::remove_dir_all(dir).ok();
}
