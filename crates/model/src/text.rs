//! Text from outside (a peer, a sysfs copy, an expectations file, a log) made safe to print:
//! one function for what "printable" means, used wherever such text reaches a terminal, a
//! status line or a report.

/// Most characters of an outside text shown.
pub const SHOWN_CHARS: usize = 1000;

/// `text` made safe for a terminal and for one line: every control character (a newline, an
/// escape sequence's ESC, a carriage return) escaped as Rust writes it (`\n`, `\u{1b}`), at
/// most [`SHOWN_CHARS`] characters, `…` where more were cut.
pub fn printable(text: &str) -> String {
    printable_within(text, SHOWN_CHARS)
}

/// [`printable`] cut at `most` characters of `text` (a label that sizes a picture or a
/// column), `…` where more were cut.
pub fn printable_within(text: &str, most: usize) -> String {
    let mut out = String::new();
    for c in text.chars().take(most) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if text.chars().nth(most).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_text_cannot_drive_the_terminal() {
        assert_eq!(printable("v1\x1b[2J\n"), "v1\\u{1b}[2J\\n");
        assert_eq!(printable("a\rb\x07\u{9b}c"), "a\\rb\\u{7}\\u{9b}c");
        assert_eq!(printable("mlx5_0 ✓"), "mlx5_0 ✓");
        assert_eq!(printable(&"x".repeat(5000)).chars().count(), 1001);
        assert_eq!(printable_within("mlx5_10 of node7", 7), "mlx5_10…");
    }
}
