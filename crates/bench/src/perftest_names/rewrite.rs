//! The table applied to a command line: perftest's names rewritten into rdmabench's before
//! clap reads them, a refused one answered with why and rdmabench's way (exit 2).

use std::collections::VecDeque;
use std::ffi::OsString;

use clap::CommandFactory;

use super::{by_long, by_short, Answer, PerftestName, Translation};
use crate::cli::Cli;
use crate::memory::DmaBufVia;
use crate::plan::{PlanError, TestKind};

/// [`rewrite`] for `Cli::parse_args`: a refused name ends the process with exit 2.
pub(crate) fn apply(args: Vec<OsString>) -> Vec<OsString> {
    rewrite(args).unwrap_or_else(|e| {
        eprintln!("rdmabench: error: {e}");
        std::process::exit(2)
    })
}

/// rdmabench's options of one command: which names it knows and which take a value.
struct Known {
    longs: Vec<(String, bool)>,
    shorts: Vec<(char, bool)>,
}

impl Known {
    fn of(command: &str) -> Option<Known> {
        // Its declared arguments alone: building the whole command line (every subcommand)
        // would cost more than the parse it serves.
        let cli = Cli::command();
        let sub = cli.find_subcommand(command)?;
        let mut known = Known {
            longs: vec![("help".into(), false)],
            shorts: vec![('h', false)],
        };
        for arg in sub.get_arguments() {
            let takes = arg.get_action().takes_values();
            for long in arg
                .get_long()
                .into_iter()
                .chain(arg.get_all_aliases().unwrap_or_default())
            {
                known.longs.push((long.to_string(), takes));
            }
            for c in arg
                .get_short()
                .into_iter()
                .chain(arg.get_all_short_aliases().unwrap_or_default())
            {
                known.shorts.push((c, takes));
            }
        }
        Some(known)
    }

    fn long(&self, name: &str) -> Option<bool> {
        self.longs.iter().find(|(n, _)| n == name).map(|&(_, t)| t)
    }

    fn short(&self, c: char) -> Option<bool> {
        self.shorts.iter().find(|(s, _)| *s == c).map(|&(_, t)| t)
    }
}

/// What the rest of the command line says that a translation needs.
#[derive(Debug, Default)]
struct Context {
    gbits: bool,
    rate_units: Option<String>,
    cuda_bus_id: bool,
    cuda_dmabuf: bool,
    cuda_pcie_mapping: bool,
    data_direct: bool,
    json_file: bool,
}

impl Context {
    /// How `--use_cuda_pcie_mapping` and `--use_data_direct` export and register a dma-buf.
    fn cuda_via(&self) -> DmaBufVia {
        DmaBufVia::from_perftest(self.cuda_pcie_mapping, self.data_direct)
    }

    fn of(args: &[OsString]) -> Context {
        let mut ctx = Context::default();
        let words: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
        for (i, w) in words.iter().enumerate() {
            let (name, inline) = match w.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (*w, None),
            };
            match name {
                "--report_gbits" | "--report-gbits" => ctx.gbits = true,
                "--rate_units" => {
                    ctx.rate_units = inline.or(words.get(i + 1).copied()).map(str::to_string)
                }
                "--use_cuda_bus_id" => ctx.cuda_bus_id = true,
                "--use_cuda_dmabuf" => ctx.cuda_dmabuf = true,
                "--use_data_direct" => ctx.data_direct = true,
                "--use_cuda_pcie_mapping" => ctx.cuda_pcie_mapping = true,
                "--out_json_file" => ctx.json_file = true,
                _ => {}
            }
        }
        ctx
    }
}

/// Rewrites perftest's names in a test's (or `cluster`'s) arguments into rdmabench's:
/// aliases renamed, translations carried over in rdmabench's units, ignored ones dropped; a
/// refused one is an error naming it, why and rdmabench's way. Other commands, rdmabench's
/// own options and everything after `--` pass unchanged.
pub(crate) fn rewrite(args: Vec<OsString>) -> Result<Vec<OsString>, PlanError> {
    let command = args.get(1).and_then(|a| a.to_str()).unwrap_or_default();
    if TestKind::parse(command).is_none() && command != "cluster" {
        return Ok(args);
    }
    let Some(known) = Known::of(command) else {
        return Ok(args);
    };
    let ctx = Context::of(&args);
    let mut out: Vec<OsString> = args[..2].to_vec();
    let mut rest: VecDeque<OsString> = args[2..].iter().cloned().collect();
    while let Some(arg) = rest.pop_front() {
        let Some(text) = arg.to_str().map(str::to_string) else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            out.push(arg);
            out.extend(rest.drain(..));
        } else if let Some(body) = text.strip_prefix("--") {
            long_option(body, &known, &ctx, &mut rest, &mut out)?;
        } else if is_letters(&text) {
            short_option(&text, &known, &ctx, &mut rest, &mut out)?;
        } else {
            out.push(arg);
        }
    }
    Ok(out)
}

/// `-x...`: letters, not a negative number.
fn is_letters(text: &str) -> bool {
    text.strip_prefix('-')
        .and_then(|t| t.chars().next())
        .is_some_and(|c| c.is_ascii_alphabetic())
}

/// `--name`, `--name=value` or `--name value`.
fn long_option(
    body: &str,
    known: &Known,
    ctx: &Context,
    rest: &mut VecDeque<OsString>,
    out: &mut Vec<OsString>,
) -> Result<(), PlanError> {
    let (name, inline) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (body, None),
    };
    let row = by_long(name);
    let passes = row.is_none_or(|r| matches!(r.answer, Answer::Same | Answer::Alias(..)));
    if let (Some(takes), true) = (known.long(name), passes) {
        out.push(format!("--{body}").into());
        if takes && inline.is_none() {
            out.extend(rest.pop_front());
        }
        return Ok(());
    }
    match row {
        Some(row) => answer(row, &format!("--{name}"), inline, ctx, rest, out),
        None => {
            out.push(format!("--{body}").into());
            Ok(())
        }
    }
}

/// `-X`, `-Xvalue`, `-X value` or switches together (`-ab`).
fn short_option(
    text: &str,
    known: &Known,
    ctx: &Context,
    rest: &mut VecDeque<OsString>,
    out: &mut Vec<OsString>,
) -> Result<(), PlanError> {
    let mut chars = text[1..].chars();
    let Some(c) = chars.next() else {
        return Ok(());
    };
    let tail = chars.as_str();
    let row = by_short(c);
    let takes = known.short(c).or(row.map(|r| r.value.is_some()));
    if takes == Some(false) && !tail.is_empty() {
        // Switches together: each on its own.
        rest.push_front(format!("-{tail}").into());
        return short_option(&format!("-{c}"), known, ctx, rest, out);
    }
    match (known.short(c), row) {
        (None, Some(row)) => {
            let inline = (!tail.is_empty()).then(|| tail.to_string());
            answer(row, &format!("-{c}"), inline, ctx, rest, out)
        }
        _ => {
            out.push(text.into());
            if takes == Some(true) && tail.is_empty() {
                out.extend(rest.pop_front());
            }
            Ok(())
        }
    }
}

/// rdmabench's answer to `row`, typed as `typed`, into `out`.
fn answer(
    row: &PerftestName,
    typed: &str,
    inline: Option<String>,
    ctx: &Context,
    rest: &mut VecDeque<OsString>,
    out: &mut Vec<OsString>,
) -> Result<(), PlanError> {
    if let Answer::Refused(why, instead) = row.answer {
        return Err(refused(typed, why, instead));
    }
    let value = match (row.value, inline) {
        (Some(_), Some(v)) => Some(v),
        (Some(_), None) => Some(
            rest.pop_front()
                .and_then(|v| v.into_string().ok())
                .ok_or_else(|| PlanError::Value(format!("perftest's {typed} needs a value")))?,
        ),
        (None, Some(v)) => {
            return Err(PlanError::Value(format!(
                "perftest's {typed} takes no value: '{v}' was given"
            )))
        }
        (None, None) => None,
    };
    let words = match row.answer {
        Answer::Same => vec![format!("--{}", row.long)],
        Answer::Alias(to, _) => vec![to.to_string()],
        Answer::Translated(t) => translate(t, typed, value.as_deref(), ctx)?,
        Answer::Ignored(_) | Answer::Refused(..) => return Ok(()),
    };
    let flag_only = matches!(row.answer, Answer::Translated(_));
    out.extend(words.into_iter().map(OsString::from));
    if !flag_only {
        out.extend(value.map(OsString::from));
    }
    Ok(())
}

fn refused(typed: &str, why: &str, instead: &str) -> PlanError {
    PlanError::Value(format!(
        "perftest's {typed} is not supported: {why}; instead: {instead}"
    ))
}

/// A bare number with `unit` appended; a value with its own unit as it is.
fn with_unit(value: &str, unit: &str) -> String {
    match value.trim().parse::<f64>() {
        Ok(_) => format!("{value}{unit}"),
        Err(_) => value.to_string(),
    }
}

/// rdmabench's words for translation `t` of `value`.
fn translate(
    t: Translation,
    typed: &str,
    value: Option<&str>,
    ctx: &Context,
) -> Result<Vec<String>, PlanError> {
    let v = value.unwrap_or_default();
    let pair = |flag: &str, value: String| Ok(vec![flag.to_string(), value]);
    match t {
        Translation::LimitBw => {
            let unit = if ctx.gbits { "Gb/s" } else { "MiB/s" };
            pair("--limit-bw", with_unit(v, unit))
        }
        Translation::RateLimit => {
            let unit = match ctx.rate_units.as_deref() {
                Some("M") => "MiB/s",
                _ => "Gb/s",
            };
            pair("--rate-limit", with_unit(v, unit))
        }
        Translation::RateUnits => match v {
            "M" | "g" => Ok(vec![]),
            "p" => Err(refused(
                &format!("{typed} p"),
                "rdmabench paces bytes, not packets",
                "--rate-limit RATE in Gb/s (packets/s x size x 8 / 1e9)",
            )),
            _ => Err(PlanError::Value(format!(
                "perftest's {typed} takes M (MiB/s), g (Gb/s) or p (packets/s): '{v}' is none"
            ))),
        },
        Translation::RateLimitType => match v {
            "SW" => Ok(vec![]),
            "HW" | "PP" => Err(refused(
                &format!("{typed} {v}"),
                "rdmabench paces in software only (no NIC rate limiter or packet pacing)",
                "--rate-limit RATE, software pacing as --rate_limit_type SW",
            )),
            _ => Err(PlanError::Value(format!(
                "perftest's {typed} takes HW, SW or PP: '{v}' is none"
            ))),
        },
        Translation::OutJson if ctx.json_file => Ok(vec![]),
        Translation::OutJson => pair("--json", "perftest_out.json".into()),
        Translation::OutJsonFile => pair("--json", v.to_string()),
        Translation::CudaBusId => {
            let mode = if ctx.cuda_dmabuf {
                format!("cuda{}", ctx.cuda_via().suffix())
            } else {
                "cuda-peermem".to_string()
            };
            pair("--mem", format!("{mode}:{v}"))
        }
        Translation::CudaDmabuf if ctx.cuda_bus_id => Ok(vec![]),
        Translation::CudaDmabuf => Ok(vec!["--use_cuda_dmabuf".into()]),
        Translation::CudaDmabufVia if !ctx.cuda_dmabuf => Err(PlanError::Value(format!(
            "perftest's {typed} needs --use_cuda_dmabuf (it changes how a dma-buf is mapped); \
             rdmabench's: --mem cuda{}:GPU",
            ctx.cuda_via().suffix()
        ))),
        Translation::CudaDmabufVia if ctx.cuda_bus_id => Ok(vec![]),
        Translation::CudaDmabufVia => Ok(vec![typed.to_string()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perftest_names::NAMES;

    fn words(args: &[&str]) -> Vec<OsString> {
        ["rdmabench", "write-bw"]
            .iter()
            .chain(args)
            .map(OsString::from)
            .collect()
    }

    fn parse(args: &[&str]) -> Result<Cli, String> {
        let args = rewrite(words(args)).map_err(|e| e.message().to_string())?;
        clap::Parser::try_parse_from(args).map_err(|e: clap::Error| e.to_string())
    }

    /// What a test's arguments mean: the plan, this side, the files and the limits.
    fn meaning(args: &[&str]) -> String {
        let cli = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let (kind, a) = cli.command.test().unwrap();
        format!(
            "{:?} {:?} {:?} {:?} {:?}",
            a.plan.resolve(kind),
            a.side(),
            a.files,
            a.limit_bw,
            a.pin()
        )
    }

    fn whole(args: &[&str]) -> String {
        format!(
            "{:?}",
            parse(args)
                .unwrap_or_else(|e| panic!("{args:?}: {e}"))
                .command
        )
    }

    /// The spellings of `row` with its example value: `--name v`, `--name=v`, and `-X v`
    /// where rdmabench does not take the letter itself.
    fn spellings(row: &PerftestName) -> Vec<Vec<String>> {
        let long = format!("--{}", row.long);
        let mut all = match row.value {
            Some(v) => vec![vec![long.clone(), v.into()], vec![format!("{long}={v}")]],
            None => vec![vec![long]],
        };
        let letters = Known::of("write-bw").unwrap();
        if let Some(c) = row.short.filter(|&c| letters.short(c).is_none()) {
            all.push(
                [format!("-{c}")]
                    .into_iter()
                    .chain(row.value.map(String::from))
                    .collect(),
            );
        }
        all
    }

    #[test]
    fn every_accepted_name_means_what_its_rdmabench_spelling_means() {
        let known = Known::of("write-bw").unwrap();
        for row in NAMES {
            for typed in spellings(row) {
                let typed: Vec<&str> = typed.iter().map(String::as_str).collect();
                match row.answer {
                    Answer::Same if matches!(row.long, "help" | "version") => {
                        let e = parse(&typed).unwrap_err();
                        assert!(e.contains("Usage") || e.contains("rdmabench"), "{e}");
                    }
                    Answer::Same => {
                        assert!(known.long(row.long).is_some(), "--{}", row.long);
                        parse(&typed).unwrap_or_else(|e| panic!("{typed:?}: {e}"));
                    }
                    Answer::Alias(to, _) => {
                        let mut theirs = vec![to];
                        theirs.extend(row.value);
                        assert_eq!(whole(&typed), whole(&theirs), "{typed:?}");
                    }
                    Answer::Ignored(_) => assert_eq!(whole(&typed), whole(&[]), "{typed:?}"),
                    // Alone, as in perftest, refused: they change a dma-buf's mapping.
                    Answer::Translated(Translation::CudaDmabufVia) => {
                        let e = parse(&typed).unwrap_err();
                        assert!(e.contains("needs --use_cuda_dmabuf"), "{e}");
                    }
                    Answer::Translated(t) => {
                        let long = format!("--{}", row.long);
                        let shown = |w: &&str| w.split('=').next() == Some(long.as_str());
                        assert!(
                            TRANSLATIONS.iter().any(|(p, _)| p.iter().any(shown)),
                            "{t:?}: {long} has no example in TRANSLATIONS"
                        );
                        parse(&typed).unwrap_or_else(|e| panic!("{typed:?}: {e}"));
                    }
                    Answer::Refused(..) => {
                        let e = parse(&typed).unwrap_err();
                        let name = typed[0].split('=').next().unwrap_or_default();
                        let said = format!("perftest's {name} is not supported: ");
                        assert!(e.starts_with(&said) && e.contains("; instead: "), "{e}");
                    }
                }
            }
        }
    }

    /// perftest's spelling of a translated option, and rdmabench's.
    const TRANSLATIONS: &[(&[&str], &[&str])] = &[
        (&["--limit_bw", "1000"], &["--limit-bw", "1000MiB/s"]),
        (
            &["-w", "100", "--report_gbits"],
            &["--limit-bw", "100Gb/s", "--report-gbits"],
        ),
        (
            &["-w100", "--report-gbits"],
            &["--limit-bw", "12.5GB", "--report-gbits"],
        ),
        (&["--limit_bw=20Gb"], &["--limit-bw", "2.5GB/s"]),
        (&["--rate_limit=10"], &["--rate-limit", "1.25GB/s"]),
        (&["--rate_limit", "10"], &["--rate-limit", "10"]),
        (
            &["--rate_limit", "800", "--rate_units", "M"],
            &["--rate-limit", "800MiB/s"],
        ),
        (
            &["--rate_limit", "10", "--rate_units=g"],
            &["--rate-limit", "10Gb/s"],
        ),
        (
            &["--rate_limit", "10", "--rate_limit_type", "SW"],
            &["--rate-limit", "10G"],
        ),
        (&["--out_json"], &["--json", "perftest_out.json"]),
        (
            &["--out_json", "--out_json_file", "r.json"],
            &["--json", "r.json"],
        ),
        (&["--out_json_file=r.json"], &["--json", "r.json"]),
        (
            &["--use_cuda_bus_id", "0000:41:00.0"],
            &["--mem", "cuda-peermem:0000:41:00.0"],
        ),
        (
            &["--use_cuda_bus_id=41:00.0", "--use_cuda_dmabuf"],
            &["--mem", "cuda:41:00.0"],
        ),
        (
            &["--use_cuda", "1", "--use_cuda_dmabuf"],
            &["--mem", "cuda:1"],
        ),
        (
            &[
                "--use_cuda=1",
                "--use_cuda_dmabuf",
                "--use_cuda_pcie_mapping",
            ],
            &["--mem", "cuda-pcie:1"],
        ),
        (
            &[
                "--use_cuda_bus_id=41:00.0",
                "--use_cuda_dmabuf",
                "--use_data_direct",
            ],
            &["--mem", "cuda-data-direct:41:00.0"],
        ),
        (
            // perftest: Data Direct implies the PCIe mapping.
            &[
                "--use_cuda",
                "0",
                "--use_cuda_dmabuf",
                "--use_data_direct",
                "--use_cuda_pcie_mapping",
            ],
            &["--mem", "cuda-data-direct:0"],
        ),
    ];

    #[test]
    fn translations_carry_perftests_units_into_rdmabenchs() {
        for (perftest, ours) in TRANSLATIONS {
            assert_eq!(meaning(perftest), meaning(ours), "{perftest:?}");
        }
        let cli = parse(&["--rate_limit=10"]).unwrap();
        assert_eq!(cli.command.test().unwrap().1.plan.rate_limit, Some(1.25));
    }

    #[test]
    fn refused_values_of_translated_options_say_why() {
        for (args, said) in [
            (
                &["--rate_limit", "10", "--rate_units", "p"][..],
                "perftest's --rate_units p is not supported: rdmabench paces bytes",
            ),
            (
                &["--rate_limit_type=HW"],
                "perftest's --rate_limit_type HW is not supported",
            ),
            (
                &["--rate_units", "X"],
                "perftest's --rate_units takes M (MiB/s), g (Gb/s) or p",
            ),
            (&["--rate_limit"], "perftest's --rate_limit needs a value"),
            (
                &["--rdma_cm=1"],
                "perftest's --rdma_cm takes no value: '1' was given",
            ),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.starts_with(said), "{args:?}: {e}");
        }
    }

    #[test]
    fn the_issues_examples_are_answered_by_name() {
        assert_eq!(
            meaning(&["--rdma_cm", "--qp", "4"]),
            meaning(&["-R", "-q", "4"])
        );
        assert_eq!(
            meaning(&["--post_list", "8", "--inline_size=64"]),
            meaning(&["-l", "8", "-I", "64"])
        );
        assert_eq!(meaning(&["--tos", "0x68"]), meaning(&["--tclass", "104"]));
        assert_eq!(
            meaning(&["-T", "104", "-R"]),
            meaning(&["--tclass", "0x68", "-R"])
        );
        assert_eq!(whole(&["--report-both", "-b"]), whole(&["-b"]));
        assert_eq!(whole(&["-bN"]), whole(&["-b"]));
        for name in [
            "--cpu_util",
            "--perform_warm_up",
            "--run_infinitely",
            "--margin=2",
            "--hop_limit=1",
            "--flow_label=3",
            "--use_old_post_send",
        ] {
            let e = parse(&[name]).unwrap_err();
            assert!(
                !e.contains("tip:") && e.contains(name.split('=').next().unwrap_or_default()),
                "{e}"
            );
        }
    }

    #[test]
    fn rdmabenchs_own_options_and_values_pass_unchanged() {
        let args = ["-s", "64K", "--json", "-e", "10.0.0.1", "--", "--margin"];
        let out = rewrite(words(&args)).unwrap();
        assert_eq!(out, words(&args));
        let other = vec![
            OsString::from("rdmabench"),
            "compare".into(),
            "--margin".into(),
        ];
        assert_eq!(rewrite(other.clone()).unwrap(), other);
    }
}
