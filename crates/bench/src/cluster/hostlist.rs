//! Slurm's hostlist expressions (`node[01-04,07]`, `rack[1-2]-gpu[1,3]`), expanded in order.
//! Zero padding is kept (`[08-10]` gives 08, 09, 10); several bracket groups multiply.

use thiserror::Error;

/// A hostlist that is not Slurm's syntax.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("'{list}' is not a Slurm hostlist ({why}); expected names like node[01-04,07],gpu5")]
pub struct HostlistError {
    list: String,
    why: String,
}

/// Expands a hostlist into host names, in the order written.
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let err = |why: &str| HostlistError {
        list: list.to_string(),
        why: why.to_string(),
    };
    let mut hosts = Vec::new();
    for expr in split_top_level(list).map_err(|w| err(&w))? {
        if expr.is_empty() {
            return Err(err("an empty name"));
        }
        hosts.extend(expand_one(expr).map_err(|w| err(&w))?);
    }
    Ok(hosts)
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

/// One expression: literal text and bracket groups, multiplied out left to right.
fn expand_one(expr: &str) -> Result<Vec<String>, String> {
    let mut names = vec![String::new()];
    let mut rest = expr;
    while !rest.is_empty() {
        let (literal, group, tail) = match rest.find('[') {
            None => (rest, None, ""),
            Some(open) => {
                let close = rest[open..].find(']').ok_or("a '[' without its ']'")? + open;
                (
                    &rest[..open],
                    Some(&rest[open + 1..close]),
                    &rest[close + 1..],
                )
            }
        };
        for n in &mut names {
            n.push_str(literal);
        }
        if let Some(g) = group {
            let values = expand_group(g)?;
            names = names
                .iter()
                .flat_map(|n| values.iter().map(move |v| format!("{n}{v}")))
                .collect();
        }
        rest = tail;
    }
    Ok(names)
}

/// The inside of a bracket: numbers and ranges, zero padding kept.
fn expand_group(group: &str) -> Result<Vec<String>, String> {
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
        if b - a >= 1_000_000 {
            return Err(format!("the range '{item}' has more than a million hosts"));
        }
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        out.extend((a..=b).map(|v| format!("{v:0width$}")));
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
        ] {
            let e = expand(bad).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains(why), "{bad}: {e}");
        }
    }
}
