//! The benchmark's buffers: one slot per QP in one registered region, and the payload
//! pattern that `--validate` writes on one side and checks on the other.

/// The byte at `offset` of a message of `size` bytes sent on QP `qp`. It depends on all
/// three, so bytes from another QP, another size or a stale run do not pass for it.
#[inline]
pub fn pattern_byte(qp: u32, size: u64, offset: u64) -> u8 {
    let seed = u64::from(qp) * 131 + u64::from(size.trailing_zeros()) * 17 + size % 251;
    ((offset + seed) % 251) as u8 ^ 0x5a
}

/// Writes the pattern for (`qp`, `size`) into `buf`.
pub fn fill_pattern(buf: &mut [u8], qp: u32, size: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(qp, size, i as u64);
    }
}

/// Checks `buf` carries the pattern for (`qp`, `size`); the error names the first bad byte.
pub fn check_pattern(buf: &[u8], qp: u32, size: u64) -> Result<(), String> {
    match buf
        .iter()
        .enumerate()
        .find(|(i, b)| **b != pattern_byte(qp, size, *i as u64))
    {
        None => Ok(()),
        Some((i, b)) => Err(format!(
            "QP {qp}, size {size}: byte {i} is {b:#04x}, expected {:#04x}",
            pattern_byte(qp, size, i as u64)
        )),
    }
}

/// Rounds a slot up to whole pages, so every QP's buffer starts page-aligned.
pub fn slot_len(max_size: u64) -> u64 {
    max_size.div_ceil(verbs::PAGE_SIZE as u64) * verbs::PAGE_SIZE as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_buffer_checks_out() {
        let mut buf = vec![0u8; 4096];
        fill_pattern(&mut buf, 3, 4096);
        assert_eq!(check_pattern(&buf, 3, 4096), Ok(()));
    }

    #[test]
    fn zeros_a_flipped_byte_or_another_qps_bytes_fail() {
        let zeros = vec![0u8; 64];
        assert!(check_pattern(&zeros, 0, 64).is_err());
        let mut buf = vec![0u8; 64];
        fill_pattern(&mut buf, 0, 64);
        buf[17] ^= 1;
        let err = check_pattern(&buf, 0, 64).unwrap_err();
        assert!(err.contains("byte 17"), "{err}");
        fill_pattern(&mut buf, 1, 64);
        assert!(check_pattern(&buf, 0, 64).is_err());
    }

    #[test]
    fn slots_are_whole_pages() {
        assert_eq!(slot_len(2), 4096);
        assert_eq!(slot_len(4096), 4096);
        assert_eq!(slot_len(65537), 69632);
    }
}
