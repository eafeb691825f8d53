//! Keys and values of the benchmarks: 16-byte ASCII keys (`k` + 15 decimal digits, as a client
//! would format an id) and 64-byte values, so every item carries an 80-byte payload.

/// Key length in bytes.
pub const KEY_LEN: usize = 16;
/// Value length in bytes.
pub const VALUE_LEN: usize = 64;
/// Key plus value: the payload that peers without a byte budget are sized by.
pub const PAYLOAD: usize = KEY_LEN + VALUE_LEN;

/// One fixed-size key.
pub type Key = [u8; KEY_LEN];

/// The value every benchmark stores: recognisable bytes, so a wrong read is visible in a debugger.
pub const VALUE: [u8; VALUE_LEN] = *b"segcache-bench-value-0123456789abcdefghijklmnopqrstuvwxyzABCDEFG";

/// Formats key number `i` into `out`: `k` then 15 zero-padded decimal digits. This is the key
/// formatting that the `set` benchmark times (as a client formatting an id would).
#[inline]
pub fn format_key(mut i: u64, out: &mut Key) {
    out[0] = b'k';
    for b in out[1..].iter_mut().rev() {
        *b = b'0' + (i % 10) as u8;
        i /= 10;
    }
}

/// Key number `i`.
#[inline]
pub fn key(i: u64) -> Key {
    let mut k = [0u8; KEY_LEN];
    format_key(i, &mut k);
    k
}

/// Keys `start..start + n`, pre-formatted so that reads time the cache, not the formatting.
pub fn keys(start: u64, n: usize) -> Vec<Key> {
    (start..start + n as u64).map(key).collect()
}

/// Reads the first and last byte of a value so that every library's read really touches the
/// value's memory (as a caller using it would), without copying it.
#[inline]
pub fn touch(v: &[u8]) -> usize {
    match (v.first(), v.last()) {
        (Some(a), Some(b)) => *a as usize + *b as usize,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sixteen_distinct_bytes() {
        assert_eq!(&key(42), b"k000000000000042");
        assert_eq!(&key(999_999_999_999_999), b"k999999999999999");
        let ks = keys(0, 1000);
        let set: std::collections::HashSet<_> = ks.iter().collect();
        assert_eq!(set.len(), 1000);
    }

    #[test]
    fn touch_reads_both_ends() {
        assert_eq!(touch(&[1, 2, 3]), 4);
        assert_eq!(touch(&[]), 0);
    }
}
