//! The seeded draws that checks and timing share: one splitmix64 generator, whose every use is
//! derived from a seed the evidence records (secrets excepted, which mix in the process's own).

/// One step of splitmix64.
pub(crate) fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A random signed permutation of `d` columns as `code[j] = src_j | (negate_j << 16)`.
pub fn signed_permutation(d: usize, state: &mut u64) -> Vec<i32> {
    let mut src: Vec<i32> = (0..d as i32).collect();
    for i in (1..d).rev() {
        let j = (next_random(state) % (i as u64 + 1)) as usize;
        src.swap(i, j);
    }
    src.into_iter()
        .map(|s| s | (((next_random(state) & 1) as i32) << 16))
        .collect()
}

/// Entropy for a secret: the process's random hasher state mixed with `seed` and `i` (the seed
/// alone is recorded in evidence; this is not).
pub(crate) fn secret_entropy(seed: u64, i: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(seed);
    hasher.write_u64(i);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::signed_permutation;

    #[test]
    fn signed_permutations_permute_every_column_and_flip_some_signs() {
        let mut state = 7;
        let mut flips = 0;
        let mut previous = Vec::new();
        for _ in 0..20 {
            let code = signed_permutation(128, &mut state);
            let mut sources: Vec<i32> = code.iter().map(|c| c & 0xffff).collect();
            flips += code.iter().filter(|c| *c >> 16 == 1).count();
            assert_ne!(code, previous, "each draw is new");
            previous = code;
            sources.sort_unstable();
            assert_eq!(sources, (0..128).collect::<Vec<_>>());
        }
        assert!(flips > 20 * 128 / 4 && flips < 20 * 128 * 3 / 4, "{flips}");
    }
}
