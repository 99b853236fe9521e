//! What a guard holds, and where it was written: the seeded patterns of [`GuardFill`] and the
//! comparison of a guard read back with its pattern ([`GuardViolation`]). Pure CPU.

use attn_oracle::{DType, POISON_BF16_BITS, POISON_F16_BITS};

/// Which guard of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The bytes just before the buffer.
    Before,
    /// The bytes just after it.
    After,
}

/// What a guard is filled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardFill {
    /// Finite negative canaries in both fp16 and bf16 ([`canary_byte`]): a read past the buffer
    /// reads finite numbers.
    Finite,
    /// NaNs of the buffer's dtype with seeded sign and payload ([`nan_word`]): a read past an
    /// input turns into NaN wherever it reaches the output.
    Nan,
}

pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn side_key(side: Side) -> u64 {
    match side {
        Side::Before => 0x5afe_0000_0000_0001,
        Side::After => 0x5afe_0000_0000_0002,
    }
}

/// The finite canary byte `b` drawn for offset `i` made a canary: even offsets (low bytes) never
/// 0, odd offsets (high bytes) negative with an exponent never all ones.
fn canary_from(b: u8, i: u64) -> u8 {
    if i % 2 == 0 {
        // 1..=255
        if b == 0 {
            0x5a
        } else {
            b
        }
    } else {
        let h = 0x80 | (b & 0x7f);
        // fp16 exponent bits of the high byte are 0x7c; all ones would be Inf/NaN (and then the
        // bf16 exponent could be all ones too).
        if h & 0x7c == 0x7c {
            h ^ 0x40
        } else {
            h
        }
    }
}

/// The canary byte at offset `i` of the guard on `side` of a buffer seeded with `seed`. Even
/// offsets are the low bytes of 16-bit words: never 0. Odd offsets are the high bytes: the sign
/// bit set and the exponent bits never all ones in either fp16 (bits 10–14) or bf16 (bits 7–14),
/// so every canary word is a finite negative number in both.
pub fn canary_byte(seed: u64, side: Side, i: u64) -> u8 {
    let word = mix64(seed ^ side_key(side) ^ mix64(i / 8));
    canary_from((word >> ((i % 8) * 8)) as u8, i)
}

/// The canaries of one guard, `len` bytes ([`canary_byte`] at every offset, one hash per 8).
pub fn canaries(seed: u64, side: Side, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for block in 0..(len as u64).div_ceil(8) {
        let word = mix64(seed ^ side_key(side) ^ mix64(block));
        for j in 0..8u64 {
            let i = block * 8 + j;
            if i as usize == len {
                break;
            }
            out.push(canary_from((word >> (j * 8)) as u8, i));
        }
    }
    out
}

/// The NaN word at word offset `i` of the guard on `side` of a `dtype` buffer seeded `seed`: the
/// dtype's exponent all ones, a non-zero low byte (so the mantissa is non-zero, and a write of
/// 2.0 changes both bytes), sign and remaining payload seeded, never a poison pattern.
pub fn nan_word(dtype: DType, seed: u64, side: Side, i: u64) -> u16 {
    let drawn = mix64((seed ^ side_key(side) ^ 0x0a0a_0000_0000_0000) ^ mix64(i / 4));
    nan_from((drawn >> ((i % 4) * 16)) as u16, dtype)
}

fn nan_from(r: u16, dtype: DType) -> u16 {
    let low = match (r & 0xff) as u8 {
        0 => 0x5a,
        b => u16::from(b),
    };
    match dtype {
        // bf16: sign, exponent 0xff (bits 7–14), mantissa bits 0–6 with bit 0 forced on.
        DType::Bf16 => {
            let w = (r & 0x8000) | 0x7f80 | (low & 0x7f) | 1;
            if w == POISON_BF16_BITS {
                w ^ 0x02
            } else {
                w
            }
        }
        // fp16: sign, exponent 0x1f (bits 10–14), mantissa bits 8–9 drawn, 0–7 the low byte.
        _ => {
            let w = (r & 0x8000) | 0x7c00 | (r & 0x0300) | low;
            if w == POISON_F16_BITS || w == POISON_BF16_BITS {
                w ^ 0x0100
            } else {
                w
            }
        }
    }
}

/// The words of one guard of `words` 16-bit words filled with `fill` for a `dtype` buffer seeded
/// `seed`.
pub fn guard_words(fill: GuardFill, dtype: DType, seed: u64, side: Side, words: usize) -> Vec<u16> {
    match fill {
        GuardFill::Finite => {
            // canaries() as words: 8 bytes (4 words) per hash.
            let mut out = vec![0u16; words];
            for (block, chunk) in out.chunks_mut(4).enumerate() {
                let drawn = mix64(seed ^ side_key(side) ^ mix64(block as u64));
                for (j, w) in chunk.iter_mut().enumerate() {
                    let i = 8 * block as u64 + 2 * j as u64;
                    let lo = canary_from((drawn >> (16 * j)) as u8, i);
                    let hi = canary_from((drawn >> (16 * j + 8)) as u8, i + 1);
                    *w = u16::from_le_bytes([lo, hi]);
                }
            }
            out
        }
        GuardFill::Nan => {
            let mut out = vec![0u16; words];
            let key = seed ^ side_key(side) ^ 0x0a0a_0000_0000_0000;
            for (block, chunk) in out.chunks_mut(4).enumerate() {
                let drawn = mix64(key ^ mix64(block as u64));
                for (j, w) in chunk.iter_mut().enumerate() {
                    *w = nan_from((drawn >> (j * 16)) as u16, dtype);
                }
            }
            out
        }
    }
}

/// Bytes that differ between what a guard should hold and what it holds: the first and last
/// offsets that differ and how many do.
pub fn mismatches(expected: &[u8], found: &[u8]) -> Option<(usize, usize, usize)> {
    let mut first = None;
    let mut last = 0;
    let mut count = 0;
    for (i, (a, b)) in expected.iter().zip(found).enumerate() {
        if a != b {
            first.get_or_insert(i);
            last = i;
            count += 1;
        }
    }
    first.map(|f| (f, last, count))
}

/// [`mismatches`] of little-endian 16-bit words, in bytes (no byte copy of a large guard).
pub fn word_mismatches(expected: &[u16], found: &[u16]) -> Option<(usize, usize, usize)> {
    let mut first = None;
    let mut last = 0;
    let mut count = 0;
    for (w, (a, b)) in expected.iter().zip(found).enumerate() {
        let diff = a ^ b;
        if diff == 0 {
            continue;
        }
        let (lo, hi) = (diff & 0x00ff != 0, diff & 0xff00 != 0);
        first.get_or_insert(if lo { 2 * w } else { 2 * w + 1 });
        last = if hi { 2 * w + 1 } else { 2 * w };
        count += usize::from(lo) + usize::from(hi);
    }
    first.map(|f| (f, last, count))
}

/// Writes found in the guards of one buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardViolation {
    /// The buffer (`"O"`, `"Q"`, ...).
    pub buffer: String,
    /// How far before the buffer the farthest changed byte lies (0: none changed).
    pub before: usize,
    /// How far after the buffer's end the farthest changed byte lies (0: none changed).
    pub after: usize,
    /// Changed bytes in both guards.
    pub changed: usize,
}

impl GuardViolation {
    /// The violation of `buffer` from the contents of its two finite guards, if any byte changed.
    pub fn find(buffer: &str, seed: u64, before: &[u8], after: &[u8]) -> Option<GuardViolation> {
        let b = mismatches(&canaries(seed, Side::Before, before.len()), before);
        let a = mismatches(&canaries(seed, Side::After, after.len()), after);
        GuardViolation::from_mismatches(buffer, before.len(), b, a)
    }

    /// The violation of `buffer` from its guards read back as words (`found`) and what they
    /// should hold (`expected`), before then after, if any byte changed.
    pub fn find_words(
        buffer: &str,
        expected: [&[u16]; 2],
        found: [&[u16]; 2],
    ) -> Option<GuardViolation> {
        let b = word_mismatches(expected[0], found[0]);
        let a = word_mismatches(expected[1], found[1]);
        GuardViolation::from_mismatches(buffer, 2 * found[0].len(), b, a)
    }

    fn from_mismatches(
        buffer: &str,
        before_len: usize,
        b: Option<(usize, usize, usize)>,
        a: Option<(usize, usize, usize)>,
    ) -> Option<GuardViolation> {
        if b.is_none() && a.is_none() {
            return None;
        }
        Some(GuardViolation {
            buffer: buffer.to_string(),
            // The guard before ends where the buffer starts: offset f is len − f bytes before it.
            before: b.map_or(0, |(first, _, _)| before_len - first),
            after: a.map_or(0, |(_, last, _)| last + 1),
            changed: b.map_or(0, |m| m.2) + a.map_or(0, |m| m.2),
        })
    }
}

/// `"128 bytes after O"`, `"2 bytes before O"`, or both joined by "and".
impl std::fmt::Display for GuardViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = &self.buffer;
        match (self.before, self.after) {
            (0, after) => write!(f, "{after} bytes after {name}"),
            (before, 0) => write!(f, "{before} bytes before {name}"),
            (before, after) => write!(
                f,
                "{before} bytes before {name} and {after} bytes after {name}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_finite_negative(word: u16) -> bool {
        let f16 = half::f16::from_bits(word);
        let bf16 = half::bf16::from_bits(word);
        f16.is_finite() && bf16.is_finite() && f16.is_sign_negative() && bf16.is_sign_negative()
    }

    fn is_nan(dtype: DType, word: u16) -> bool {
        match dtype {
            DType::Bf16 => half::bf16::from_bits(word).is_nan(),
            _ => half::f16::from_bits(word).is_nan(),
        }
    }

    #[test]
    fn every_canary_word_is_finite_negative_with_a_non_zero_low_byte() {
        for seed in [0, 1, 0xdead_beef, u64::MAX] {
            for side in [Side::Before, Side::After] {
                let bytes = canaries(seed, side, 1 << 16);
                for w in bytes.chunks_exact(2) {
                    assert_ne!(w[0], 0);
                    let word = u16::from_le_bytes([w[0], w[1]]);
                    assert!(is_finite_negative(word), "{word:#06x}");
                    assert_ne!(word, POISON_F16_BITS);
                    assert_ne!(word, POISON_BF16_BITS);
                }
                // Not a constant pattern: many distinct words.
                let mut words: Vec<_> = bytes.chunks_exact(2).map(|w| (w[0], w[1])).collect();
                words.sort_unstable();
                words.dedup();
                assert!(words.len() > 5000, "{}", words.len());
            }
        }
        // Seeds and sides give different guards.
        assert_ne!(canaries(1, Side::Before, 64), canaries(2, Side::Before, 64));
        assert_ne!(canaries(1, Side::Before, 64), canaries(1, Side::After, 64));
    }

    #[test]
    fn the_block_canaries_are_the_canary_bytes_at_every_length() {
        for len in [0, 1, 7, 8, 9, 100, 4096] {
            let per_byte: Vec<u8> = (0..len as u64)
                .map(|i| canary_byte(42, Side::After, i))
                .collect();
            assert_eq!(canaries(42, Side::After, len), per_byte, "len {len}");
        }
    }

    #[test]
    fn every_nan_guard_word_is_a_nan_of_its_dtype_seeded_and_never_poison() {
        for dtype in [DType::F16, DType::Bf16] {
            for seed in [0, 1, 0xdead_beef, u64::MAX] {
                for side in [Side::Before, Side::After] {
                    let words = guard_words(GuardFill::Nan, dtype, seed, side, 1 << 15);
                    for (i, &w) in words.iter().enumerate() {
                        assert!(is_nan(dtype, w), "{dtype} {w:#06x}");
                        assert_ne!(w & 0xff, 0, "non-zero low byte");
                        assert_ne!(w, POISON_F16_BITS);
                        assert_ne!(w, POISON_BF16_BITS);
                        assert_eq!(w, nan_word(dtype, seed, side, i as u64));
                    }
                    // Both signs and many payloads: a kernel cannot predict them.
                    assert!(words.iter().any(|w| w & 0x8000 != 0));
                    assert!(words.iter().any(|w| w & 0x8000 == 0));
                    let mut distinct = words.clone();
                    distinct.sort_unstable();
                    distinct.dedup();
                    let payloads = if dtype == DType::Bf16 { 64 } else { 1000 };
                    assert!(distinct.len() > payloads, "{dtype}: {}", distinct.len());
                }
            }
            let nans = |seed, side| guard_words(GuardFill::Nan, dtype, seed, side, 64);
            assert_ne!(nans(1, Side::Before), nans(2, Side::Before));
            assert_ne!(nans(1, Side::Before), nans(1, Side::After));
            assert_eq!(nans(3, Side::After), nans(3, Side::After));
        }
        // The finite fill is the canaries as words, whatever the dtype.
        for words in [0, 1, 3, 4, 5, 1000] {
            let finite = guard_words(GuardFill::Finite, DType::Bf16, 9, Side::After, words);
            let bytes: Vec<u8> = finite.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert_eq!(bytes, canaries(9, Side::After, 2 * words), "{words} words");
        }
    }

    #[test]
    fn a_small_positive_value_changes_both_bytes_of_any_guard_word() {
        // What a planted kernel writes: 2.0 is 0x4000 in both fp16 and bf16; 1.0 is 0x3c00 in
        // fp16 (bf16's 0x3f80 has a low byte a canary may share, so planted kernels write 2.0).
        let two = 0x4000u16.to_le_bytes();
        for i in (0..1 << 14).step_by(2) {
            for side in [Side::Before, Side::After] {
                let c = [canary_byte(9, side, i), canary_byte(9, side, i + 1)];
                assert_ne!(c[0], two[0]);
                assert_ne!(c[1], two[1]);
                for dtype in [DType::F16, DType::Bf16] {
                    let n = nan_word(dtype, 9, side, i / 2).to_le_bytes();
                    assert_ne!(n[0], two[0]);
                    assert_ne!(n[1], two[1]);
                }
            }
        }
    }

    #[test]
    fn violations_are_measured_from_the_buffer() {
        let seed = 77;
        let len = 4096;
        let clean_before = canaries(seed, Side::Before, len);
        let clean_after = canaries(seed, Side::After, len);
        assert_eq!(
            GuardViolation::find("O", seed, &clean_before, &clean_after),
            None
        );
        // 64 fp16 elements of 2.0 written just past the end of O: 128 bytes after O.
        let mut after = clean_after.clone();
        for w in after[..128].chunks_exact_mut(2) {
            w.copy_from_slice(&0x4000u16.to_le_bytes());
        }
        let v = GuardViolation::find("O", seed, &clean_before, &after).unwrap();
        assert_eq!((v.before, v.after, v.changed), (0, 128, 128));
        assert_eq!(v.to_string(), "128 bytes after O");
        // One element written just before O: 2 bytes before O.
        let mut before = clean_before.clone();
        before[len - 2..].copy_from_slice(&0x4000u16.to_le_bytes());
        let v = GuardViolation::find("O", seed, &before, &clean_after).unwrap();
        assert_eq!(v.to_string(), "2 bytes before O");
        // A sparse write far out counts to the farthest byte; both sides are named.
        let mut far = clean_after.clone();
        far[1000] ^= 0xff;
        let v = GuardViolation::find("K", seed, &before, &far).unwrap();
        assert_eq!(v.to_string(), "2 bytes before K and 1001 bytes after K");
        assert_eq!(v.changed, 3);
    }

    #[test]
    fn word_violations_measure_as_byte_ones_on_nan_guards() {
        let dtype = DType::F16;
        let before = guard_words(GuardFill::Nan, dtype, 5, Side::Before, 2048);
        let after = guard_words(GuardFill::Nan, dtype, 5, Side::After, 2048);
        let found =
            |b: &[u16], a: &[u16]| GuardViolation::find_words("K", [&before, &after], [b, a]);
        assert_eq!(found(&before, &after), None);
        // One element of 2.0 just past K, one just before it.
        let (mut b, mut a) = (before.clone(), after.clone());
        a[0] = 0x4000;
        assert_eq!(found(&before, &a).unwrap().to_string(), "2 bytes after K");
        b[2047] = 0x4000;
        let v = found(&b, &a).unwrap();
        assert_eq!(v.to_string(), "2 bytes before K and 2 bytes after K");
        assert_eq!(v.changed, 4);
        // Only the high byte of word 10 (bytes 20 and 21) changed: 22 bytes after, one changed.
        let mut high = after.clone();
        high[10] ^= 0x0100;
        let v = found(&before, &high).unwrap();
        assert_eq!((v.after, v.changed), (22, 1));
        // The same as the byte comparison.
        let bytes = |w: &[u16]| -> Vec<u8> { w.iter().flat_map(|x| x.to_le_bytes()).collect() };
        assert_eq!(
            word_mismatches(&after, &high),
            mismatches(&bytes(&after), &bytes(&high))
        );
    }
}
