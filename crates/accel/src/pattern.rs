//! The `--validate` payload pattern: a byte stream that depends on the seed and on each byte's offset, so a
//! transfer that moved the right amount of the wrong bytes (stale buffer, wrong offset, reused bounce buffer)
//! is caught, not just one that moved nothing. Pure code; a GPU side writes and checks it through copies
//! to and from host memory ([`crate::GpuBuffer::copy_from_host`]).

/// SplitMix64's output function: a cheap, well-mixed 64-bit hash.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 8 pattern bytes of the 8-byte word at index `word` (byte offset `word * 8`).
fn word(seed: u64, word: u64) -> [u8; 8] {
    mix(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ word).to_le_bytes()
}

/// The pattern byte at `offset`.
pub fn byte_at(seed: u64, offset: u64) -> u8 {
    word(seed, offset / 8)[(offset % 8) as usize]
}

/// Writes the pattern for offsets `start .. start + out.len()` into `out`.
pub fn fill(seed: u64, start: u64, out: &mut [u8]) {
    let mut offset = start;
    let mut rest = out;
    while !rest.is_empty() {
        let w = word(seed, offset / 8);
        let skip = (offset % 8) as usize;
        let n = (8 - skip).min(rest.len());
        let (head, tail) = rest.split_at_mut(n);
        head.copy_from_slice(&w[skip..skip + n]);
        offset += n as u64;
        rest = tail;
    }
}

/// The first byte of `data` (which holds offsets `start ..`) that differs from the pattern:
/// `(index into data, expected, found)`.
pub fn first_mismatch(seed: u64, start: u64, data: &[u8]) -> Option<(usize, u8, u8)> {
    let mut expected = [0u8; 4096];
    let mut done = 0usize;
    for chunk in data.chunks(expected.len()) {
        let exp = &mut expected[..chunk.len()];
        fill(seed, start + done as u64, exp);
        if exp != chunk {
            let i = exp.iter().zip(chunk).position(|(a, b)| a != b)?;
            return Some((done + i, exp[i], chunk[i]));
        }
        done += chunk.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_matches_byte_at_at_any_start() {
        for start in [0u64, 1, 7, 8, 9, 4095, 1 << 20] {
            let mut buf = vec![0u8; 100];
            fill(42, start, &mut buf);
            for (i, &b) in buf.iter().enumerate() {
                assert_eq!(b, byte_at(42, start + i as u64), "start {start} index {i}");
            }
        }
    }

    #[test]
    fn depends_on_seed_and_offset() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        fill(1, 0, &mut a);
        fill(2, 0, &mut b);
        assert_ne!(a, b);
        fill(1, 4096, &mut b);
        assert_ne!(
            a, b,
            "a block copied to the wrong offset must not look right"
        );
        // Not degenerate: all byte values show up in 64 KiB.
        let mut big = vec![0u8; 65536];
        fill(7, 0, &mut big);
        let mut seen = [false; 256];
        big.iter().for_each(|&x| seen[x as usize] = true);
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn finds_the_first_mismatch() {
        let mut buf = vec![0u8; 10_000];
        fill(5, 123, &mut buf);
        assert_eq!(first_mismatch(5, 123, &buf), None);
        let good = buf[9_000];
        buf[9_000] ^= 0xff;
        buf[9_500] ^= 0x01;
        assert_eq!(
            first_mismatch(5, 123, &buf),
            Some((9_000, good, good ^ 0xff))
        );
        assert!(first_mismatch(6, 123, &buf).is_some());
        assert_eq!(first_mismatch(5, 0, &[]), None);
    }
}
