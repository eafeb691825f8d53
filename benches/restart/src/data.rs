//! The benchmark's items: 16-byte keys and 64-byte values (the peers' sizes, see shared/peers.md),
//! both printable ASCII so that the same items go through memcached's text protocol. Each value is
//! a function of its key's index, so a reader can tell a right value from a wrong one.

pub const KEY_LEN: usize = 16;
pub const VALUE_LEN: usize = 64;

/// Key `i`: `k` and 15 decimal digits.
pub fn key(i: u64) -> [u8; KEY_LEN] {
    let mut k = *b"k000000000000000";
    let mut n = i;
    let mut p = KEY_LEN - 1;
    while n > 0 && p > 0 {
        k[p] = b'0' + (n % 10) as u8;
        n /= 10;
        p -= 1;
    }
    k
}

/// The value stored under key `i`: 64 lower-case letters drawn from a splitmix64 stream seeded
/// by `i`.
pub fn value(i: u64) -> [u8; VALUE_LEN] {
    let mut v = [0u8; VALUE_LEN];
    let mut state = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    for chunk in v.chunks_mut(8) {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        for (j, b) in chunk.iter_mut().enumerate() {
            *b = b'a' + ((z >> (j * 8)) as u8 % 26);
        }
    }
    v
}

/// A size on the command line (`1GiB`, `256MiB`, `64m`, `4096`), read by the engine's
/// [`segcache_core::parse_size`], so every unit is a power of 1024 as in the rest of segcache.
pub fn size_arg(s: &str) -> Result<usize, String> {
    let n = segcache_core::parse_size(s).map_err(|e| e.to_string())?;
    usize::try_from(n).map_err(|_| format!("size {s:?} does not fit in this machine's address space"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_fixed_width_ascii() {
        assert_eq!(&key(0), b"k000000000000000");
        assert_eq!(&key(1234567), b"k000000001234567");
        let mut seen = std::collections::HashSet::new();
        for i in (0..100_000u64).chain([u64::from(u32::MAX), 999_999_999_999_999]) {
            let k = key(i);
            assert!(k.iter().all(|b| b.is_ascii_alphanumeric()));
            assert!(seen.insert(k), "key {i} collides");
        }
    }

    #[test]
    fn values_are_printable_deterministic_and_differ() {
        assert_eq!(value(7), value(7));
        assert_ne!(value(7), value(8));
        assert!(value(42).iter().all(|b| b.is_ascii_lowercase()));
    }

    #[test]
    fn size_args_are_the_engines_sizes() {
        assert_eq!(size_arg("1GiB"), Ok(1 << 30));
        assert_eq!(size_arg("256MiB"), Ok(256 << 20));
        assert_eq!(size_arg("256MB"), Ok(256 << 20));
        assert_eq!(size_arg("64m"), Ok(64 << 20));
        assert_eq!(size_arg("4096"), Ok(4096));
        assert!(size_arg("lots").is_err());
        assert!(size_arg("12 parsecs").unwrap_err().contains("unknown size unit"));
        assert!(size_arg("99999999999999999999G").is_err());
    }
}
