//! The parameter catalogue's reach, proven: every row of `catalogue::PARAMS` reaches
//! `--help` with perftest's spelling, the wire, the record, the header, the CSV and
//! `compare`, and no field of those types lacks a row. The catalogue lives in the model
//! crate; these tests read the layers above it, so they live here.

use crate::catalogue::*;
use crate::plan::{Mode, TestKind, Verb};
use crate::report::ParamsRecord;
use crate::report::{CsvExporter, Exporter, RunRecord};
use serde_json::Value;

/// A record with every optional parameter present, so that each can be seen and changed.
fn full() -> RunRecord {
    crate::report::samples::every_param_present()
}

/// `record` with `key`'s value changed to another of its type.
fn changed(record: &RunRecord, key: &str) -> RunRecord {
    let mut json = serde_json::to_value(record).unwrap();
    let new = match &json["params"][key] {
        Value::Bool(b) => Value::from(!b),
        Value::String(s) => Value::from(format!("{s}-other")),
        Value::Number(n) => match n.as_u64() {
            Some(u) => Value::from(u + 1),
            None => Value::from(n.as_f64().unwrap() + 1.0),
        },
        other => panic!("params.{key} is {other}: give it a value in every_param_present"),
    };
    json["params"][key] = new;
    serde_json::from_value(json).unwrap_or_else(|e| panic!("params.{key}: {e}"))
}

/// What a run shows on the terminal: the header, and the table's column titles.
fn shown(record: &RunRecord) -> String {
    let table = crate::output::table::Table::of(&record.params);
    crate::output::header::render(record, false) + &table.columns()
}

#[test]
fn every_record_field_has_one_row_and_every_row_a_field() {
    let p = full().params;
    let json = serde_json::to_value(&p).unwrap();
    let fields = json.as_object().unwrap();
    let mut keys: Vec<&str> = PARAMS.iter().map(|p| p.key).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), PARAMS.len(), "a key twice");
    assert_eq!(fields.len(), PARAMS.len(), "a row without a record field");
    for (key, value) in fields {
        let row = param(key).unwrap_or_else(|| panic!("params.{key} has no row in PARAMS"));
        let shown = (row.value)(&p);
        let want = (!value.is_null()).then(|| value.to_string().trim_matches('"').to_string());
        assert_eq!(shown, want, "{key}");
        let most = if row.in_header { 13 } else { 15 };
        assert!(row.label.len() <= most, "{} is too long a label", row.label);
    }
}

#[test]
fn every_planned_row_is_on_the_wire_and_nothing_else_is() {
    let plan = crate::plan::PlanRequest::default()
        .resolve(TestKind::new(Verb::Write, Mode::Bw))
        .unwrap();
    let wire = serde_json::to_value(plan).unwrap();
    let mut on_wire: Vec<&str> = wire
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    on_wire.retain(|k| !["test", "sizes"].contains(k));
    on_wire.sort_unstable();
    let mut planned: Vec<&str> = PARAMS
        .iter()
        .filter(|p| p.agree == Agree::Plan)
        .map(|p| p.key)
        .collect();
    planned.sort_unstable();
    assert_eq!(on_wire, planned, "TestPlan's fields and the planned rows");
}

#[test]
fn every_typed_row_is_a_flag_in_help_with_perftests_spelling() {
    let mut cli = crate::cli::Cli::shaped();
    cli.build();
    for test in crate::plan::TestKind::ALL {
        let cmd = cli.find_subcommand(test.to_string()).unwrap();
        let help = cmd.clone().render_long_help().to_string();
        for p in PARAMS {
            let Some(flag) = p.flag else {
                assert_eq!(p.agree, Agree::Found, "{} has no flag", p.key);
                continue;
            };
            if crate::cli::help::applies(test, flag).is_err() {
                // Its refusal, and its absence from the help: cli/help.rs's tests.
                continue;
            }
            assert!(help.contains(flag), "{test} --help lacks {flag}");
            let long = flag.trim_start_matches("--");
            let arg = cmd.get_arguments().find(|a| a.get_long() == Some(long));
            let arg = arg.unwrap_or_else(|| panic!("{test}: no argument {flag}"));
            assert!(arg.get_help().is_some(), "{flag} has no help");
            if let Some(pt) = p.perftest {
                let spelled = |a: &clap::Arg| {
                    a.get_short().is_some_and(|s| pt == format!("-{s}"))
                        || a.get_long() == pt.strip_prefix("--")
                        || a.get_all_aliases()
                            .into_iter()
                            .flatten()
                            .any(|x| Some(x) == pt.strip_prefix("--"))
                };
                assert!(
                    cmd.get_arguments().any(spelled),
                    "{test}: perftest's {pt} ({flag}) is not accepted"
                );
            }
            if p.agree == Agree::Plan {
                assert_eq!(
                    arg.get_id().as_str(),
                    p.key,
                    "{flag}: the request field is not {}",
                    p.key
                );
            }
        }
    }
}

#[test]
fn every_row_reaches_the_screen_the_csv_and_compare() {
    let a = full();
    let csv = |r: &RunRecord| String::from_utf8(CsvExporter.render(r).unwrap()).unwrap();
    let columns = csv(&a).lines().next().unwrap().to_string();
    for p in PARAMS {
        // A run for a duration shows that, not its iterations and warm-up.
        let a = match p.key {
            "iters" | "warmup" => RunRecord {
                params: ParamsRecord {
                    duration: None,
                    ..a.params.clone()
                },
                ..a.clone()
            },
            _ => a.clone(),
        };
        let b = changed(&a, p.key);
        assert!(
            columns.split(',').any(|c| c == p.key),
            "no CSV column {}",
            p.key
        );
        assert_ne!(csv(&a), csv(&b), "the CSV does not show {}", p.key);
        if p.compare != Compared::Skip {
            assert_ne!(shown(&a), shown(&b), "the header does not show {}", p.key);
        }
        let d = crate::compare::diff::differences(&a, &b);
        let field = format!("(params.{})", p.key);
        let named = |list: &[crate::compare::diff::Difference]| {
            list.iter().any(|x| x.what.ends_with(&field))
        };
        let (warned, told) = (named(&d.warnings), named(&d.info));
        match p.compare {
            Compared::Warn => assert!(warned && !told, "{field}: {d:?}"),
            Compared::Info => assert!(told && !warned, "{field}: {d:?}"),
            Compared::Skip => assert!(!told && !warned, "{field}: {d:?}"),
        }
    }
}
