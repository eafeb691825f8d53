//! Items larger than a segment through the C API: `max_item_size` in the config lets a store
//! take one, `segcache_get` copies it whole into the caller's buffer (or says how long a buffer
//! it needs), and an item over `max_item_size` is refused.

use std::ptr;

use segcache::*;
use segcache_status_t::*;

#[test]
fn a_value_of_several_segments_round_trips_into_the_callers_buffer() {
    let mut cfg = std::mem::MaybeUninit::<segcache_config_t>::uninit();
    let mut h = ptr::null_mut();
    // SAFETY: valid pointers to local storage.
    unsafe {
        assert_eq!(segcache_config_default(cfg.as_mut_ptr()), SEGCACHE_OK);
        let mut cfg = cfg.assume_init();
        assert_eq!(cfg.max_item_size, 0, "the default: what a segment holds");
        cfg.heap_size = 16 << 20;
        cfg.segment_size = 256 << 10;
        cfg.shards = 2;
        cfg.max_item_size = 2 << 20;
        assert_eq!(segcache_open(&cfg, &mut h), SEGCACHE_OK);
    }
    let value: Vec<u8> = (0..(1500 << 10)).map(|i: u32| (i % 251) as u8).collect();
    let mut buf = vec![0u8; 2 << 20];
    let mut len = 0usize;
    // SAFETY: live handle, valid buffers of the lengths given.
    unsafe {
        assert_eq!(segcache_set(h, b"big".as_ptr(), 3, value.as_ptr(), value.len(), 7, 0), SEGCACHE_OK);
        assert_eq!(
            segcache_get(h, b"big".as_ptr(), 3, buf.as_mut_ptr(), buf.len(), &mut len, ptr::null_mut()),
            SEGCACHE_OK
        );
        assert!(len == value.len() && buf[..len] == value[..]);
        assert_eq!(
            segcache_get(h, b"big".as_ptr(), 3, buf.as_mut_ptr(), 1000, &mut len, ptr::null_mut()),
            SEGCACHE_BUFFER_TOO_SMALL
        );
        assert_eq!(len, value.len());
        let over = vec![0u8; (2 << 20) + 1];
        assert_eq!(segcache_set(h, b"over".as_ptr(), 4, over.as_ptr(), over.len(), 0, 0), SEGCACHE_TOO_LARGE);
        assert_eq!(segcache_delete(h, b"big".as_ptr(), 3), SEGCACHE_OK);
        assert_eq!(
            segcache_get(h, b"big".as_ptr(), 3, buf.as_mut_ptr(), buf.len(), &mut len, ptr::null_mut()),
            SEGCACHE_NOT_FOUND
        );
        assert_eq!(segcache_close(h), SEGCACHE_OK);
    }
}
