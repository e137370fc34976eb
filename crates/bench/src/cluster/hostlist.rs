//! Slurm's hostlist expressions (`node[01-04,07]`, `rack[1-2]-gpu[1,3]`), expanded in order.
//! Zero padding is kept (`[08-10]` gives 08, 09, 10); several bracket groups multiply. A list
//! is parsed into its ranges and expanded lazily: its first host or its count costs the
//! length of the text, whatever the ranges span, and a whole expansion is capped.

use thiserror::Error;

/// The most hosts [`expand`] gives: as many as a sweep takes ranks (the launcher's
/// `MAX_WORLD_SIZE` is this).
pub(crate) const MAX_HOSTS: usize = 131_072;

/// A hostlist that is not Slurm's syntax.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("'{list}' is not a Slurm hostlist ({why}); expected names like node[01-04,07],gpu5")]
pub struct HostlistError {
    list: String,
    why: String,
}

/// Numbers `lo..=hi` in a bracket, printed `width` digits wide (0: as they are).
#[derive(Debug, Clone, Copy)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

/// One piece of an expression: text as written, or a bracket's ranges.
#[derive(Debug, Clone)]
enum Part<'a> {
    Literal(&'a str),
    Group(Vec<Range>),
}

impl Part<'_> {
    /// How many values the part takes (a literal: one).
    fn count(&self) -> u128 {
        match self {
            Part::Literal(_) => 1,
            Part::Group(ranges) => ranges.iter().map(|r| u128::from(r.hi - r.lo) + 1).sum(),
        }
    }

    /// Its `i`-th value (i below [`Part::count`]).
    fn nth(&self, mut i: u128, out: &mut String) {
        match self {
            Part::Literal(text) => out.push_str(text),
            Part::Group(ranges) => {
                for r in ranges {
                    let len = u128::from(r.hi - r.lo) + 1;
                    if i < len {
                        let v = u128::from(r.lo) + i;
                        out.push_str(&format!("{v:0width$}", width = r.width));
                        return;
                    }
                    i -= len;
                }
            }
        }
    }
}

/// A parsed hostlist: its expressions, each a sequence of parts multiplied out.
#[derive(Debug, Clone)]
pub(crate) struct Hostlist<'a> {
    exprs: Vec<Vec<Part<'a>>>,
}

impl<'a> Hostlist<'a> {
    /// Parses `list` without expanding it.
    pub(crate) fn parse(list: &'a str) -> Result<Hostlist<'a>, HostlistError> {
        let err = |why: String| HostlistError {
            list: list.to_string(),
            why,
        };
        let mut exprs = Vec::new();
        for expr in split_top_level(list).map_err(err)? {
            if expr.is_empty() {
                return Err(err("an empty name".to_string()));
            }
            exprs.push(parse_one(expr).map_err(err)?);
        }
        Ok(Hostlist { exprs })
    }

    /// How many hosts the list names (saturating at `u128::MAX`).
    #[cfg(test)]
    pub(crate) fn count(&self) -> u128 {
        self.exprs
            .iter()
            .map(|parts| parts.iter().fold(1u128, |n, p| n.saturating_mul(p.count())))
            .fold(0u128, u128::saturating_add)
    }

    /// The hosts in the order written, each made when it is taken.
    pub(crate) fn hosts(&self) -> impl Iterator<Item = String> + '_ {
        self.exprs.iter().flat_map(|parts| {
            let total = parts.iter().fold(1u128, |n, p| n.saturating_mul(p.count()));
            (0..total).map(move |i| name_at(parts, i))
        })
    }
}

/// The `i`-th name of an expression: the last part varies fastest.
fn name_at(parts: &[Part<'_>], mut i: u128) -> String {
    let mut digits = vec![0u128; parts.len()];
    for (k, p) in parts.iter().enumerate().rev() {
        let c = p.count();
        digits[k] = i % c;
        i /= c;
    }
    let mut name = String::new();
    for (p, d) in parts.iter().zip(digits) {
        p.nth(d, &mut name);
    }
    name
}

/// The first host of `list`, without expanding the rest.
pub fn first(list: &str) -> Result<Option<String>, HostlistError> {
    Ok(Hostlist::parse(list)?.hosts().next())
}

/// Expands a hostlist into host names, in the order written; a list of more than
/// [`MAX_HOSTS`] hosts is refused before any is made.
#[cfg(test)]
pub(crate) fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let parsed = Hostlist::parse(list)?;
    let count = parsed.count();
    if count > MAX_HOSTS as u128 {
        return Err(HostlistError {
            list: list.to_string(),
            why: format!("{count} hosts, more than the {MAX_HOSTS} a sweep takes"),
        });
    }
    Ok(parsed.hosts().collect())
}

/// Splits at the commas outside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err("a bracket inside a bracket".to_string()),
            ']' if depth == 1 => depth = 0,
            ']' => return Err("a ']' without its '['".to_string()),
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("a '[' without its ']'".to_string());
    }
    parts.push(&list[start..]);
    Ok(parts)
}

/// One expression: literal text and bracket groups, in order.
fn parse_one(expr: &str) -> Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = expr;
    while !rest.is_empty() {
        let Some(open) = rest.find('[') else {
            parts.push(Part::Literal(rest));
            break;
        };
        let close = rest[open..].find(']').ok_or("a '[' without its ']'")? + open;
        if open > 0 {
            parts.push(Part::Literal(&rest[..open]));
        }
        parts.push(Part::Group(parse_group(&rest[open + 1..close])?));
        rest = &rest[close + 1..];
    }
    Ok(parts)
}

/// The inside of a bracket: numbers and ranges, zero padding kept.
fn parse_group(group: &str) -> Result<Vec<Range>, String> {
    let mut out = Vec::new();
    for item in group.split(',') {
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let number = |s: &str| {
            s.parse::<u64>()
                .ok()
                .filter(|_| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .ok_or(format!(
                    "'{item}' in brackets is not a number or a range a-b"
                ))
        };
        let (a, b) = (number(lo)?, number(hi)?);
        if a > b {
            return Err(format!("the range '{item}' runs backwards"));
        }
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        out.push(Range {
            lo: a,
            hi: b,
            width,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(list: &str) -> Vec<String> {
        expand(list).unwrap()
    }

    #[test]
    fn ranges_lists_and_padding_expand_in_order() {
        assert_eq!(
            x("node[01-04,07]"),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(x("gpu5"), ["gpu5"]);
        assert_eq!(x("a[8-10],b"), ["a8", "a9", "a10", "b"]);
        assert_eq!(x("n[098-101]"), ["n098", "n099", "n100", "n101"]);
    }

    #[test]
    fn several_groups_multiply_and_lists_mix() {
        assert_eq!(
            x("rack[1-2]-gpu[1,3],login1"),
            [
                "rack1-gpu1",
                "rack1-gpu3",
                "rack2-gpu1",
                "rack2-gpu3",
                "login1"
            ]
        );
        assert_eq!(x("dgx-[1-2]-ib"), ["dgx-1-ib", "dgx-2-ib"]);
    }

    #[test]
    fn bad_lists_name_the_list_and_the_fault() {
        for (bad, why) in [
            ("node[01-04", "without its ']'"),
            ("node01-04]", "without its '['"),
            ("node[a-b]", "not a number"),
            ("node[5-1]", "backwards"),
            ("node[[1]]", "inside a bracket"),
            ("a,,b", "empty name"),
            ("h[0-131072]", "131073 hosts, more than the 131072"),
        ] {
            let e = expand(bad).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn the_first_host_of_a_vast_list_is_taken_without_expanding_it() {
        let list = "h[0-999999]x[0-999999],login[07-09]";
        let start = std::time::Instant::now();
        assert_eq!(first(list).unwrap().as_deref(), Some("h0x0"));
        assert!(start.elapsed() < std::time::Duration::from_millis(100));
        let parsed = Hostlist::parse(list).unwrap();
        assert_eq!(parsed.count(), 1_000_000_000_000 + 3);
        let some: Vec<String> = parsed.hosts().skip(999_999).take(2).collect();
        assert_eq!(some, ["h0x999999", "h1x0"]);
        assert!(expand(list)
            .unwrap_err()
            .to_string()
            .contains("1000000000003 hosts"));
        assert_eq!(
            first("n[18446744073709551615]").unwrap().as_deref(),
            Some("n18446744073709551615")
        );
    }
}
