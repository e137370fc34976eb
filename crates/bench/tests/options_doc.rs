//! `docs/options.md` is what the command line and the catalogue say: a changed option that
//! leaves the reference behind fails here, with how to regenerate it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use rdmabench::cli::reference::{options_markdown, REGENERATE};

#[test]
fn the_options_reference_is_what_the_code_generates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/options.md");
    let generated = options_markdown();
    if std::env::var_os("RDMABENCH_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let diff = similar::TextDiff::from_lines(&checked_in, &generated)
            .unified_diff()
            .header("docs/options.md", "generated")
            .to_string();
        panic!("docs/options.md differs from what the code generates; run `{REGENERATE}`\n{diff}");
    }
}

/// `results/schema.md`'s `params` table is what the catalogue and the record's field
/// documentation say: a parameter declared once is documented there without a hand edit.
#[test]
fn the_schemas_params_table_is_what_the_code_generates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../results/schema.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    let heading = doc.find("\n### `params`\n").expect("a params section");
    let start = heading + doc[heading..].find("\n| field |").expect("its table") + 1;
    let end = start + doc[start..].find("\n\n").expect("the table's end") + 1;
    let generated = rdmabench::catalogue::params_table();
    if std::env::var_os("RDMABENCH_UPDATE_DOCS").is_some() {
        let updated = format!("{}{generated}{}", &doc[..start], &doc[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    let diff = similar::TextDiff::from_lines(&doc[start..end], &generated)
        .unified_diff()
        .header("results/schema.md", "generated")
        .to_string();
    assert!(
        diff.is_empty(),
        "results/schema.md's params table differs from what the code generates; run `{REGENERATE}`\n{diff}"
    );
}

#[test]
fn the_reference_has_every_option_with_perftests_spelling() {
    let doc = options_markdown();
    for must in [
        "| `-s, --size <SIZE>` | `-s`, `--size` |",
        "| `-q, --qps <N>` | `-q` |",
        "| `--threads <N>` |",
        "`--use-srq`",
        "## rdmabench cluster",
        "## rdmabench compare",
        "## perftest's options",
        "[figures.md](figures.md)",
    ] {
        assert!(doc.contains(must), "the reference lacks {must}");
    }
    for test_only in ["--threads", "--outs", "--clock"] {
        let row = doc
            .lines()
            .find(|l| l.contains(&format!("--{}", &test_only[2..])));
        assert!(
            row.is_some_and(|r| !r.contains("| all |")),
            "{test_only} applies to all?"
        );
    }
}
