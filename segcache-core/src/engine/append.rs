//! Appending an item: choosing the segment it goes to (taking a new one, which may evict, when
//! its TTL bucket's open segment is full) and writing its record there.

use std::sync::atomic::Ordering::Relaxed;

use crate::engine::Segcache;
use crate::error::Result;
use crate::hashtable::slot::Loc;
use crate::record::{self, CasForm};
use crate::segments::header::{SegHeader, NONE, SEG_OPEN, SEG_SEALED};
use crate::ttl_buckets::ttl;

impl Segcache {
    /// Appends a record to the open segment of its TTL bucket (and pool), opening a new segment
    /// when it is full or its expiry window has passed. Its CAS is narrow if the segment's base
    /// allows (see `record::CasForm`), unless `wide` (a key whose narrow record a rewrite in place
    /// outgrew: see `engine::rewrite`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn append_record(
        &mut self,
        key: &[u8],
        value: &[&[u8]],
        flags: u32,
        stamp: record::Stamp,
        wide: bool,
        ttl: u32,
        expire_at: u32,
        width: u32,
        pool: u8,
        now: u32,
    ) -> Result<Loc> {
        self.append_as::<false>(key, value, flags, stamp, wide, ttl, expire_at, width, pool, now)
    }

    /// `append_record` of a large item's head (`record::LARGE_HEAD`: see `engine::large`).
    #[allow(clippy::too_many_arguments)]
    #[cold]
    #[inline(never)]
    pub(crate) fn append_head(
        &mut self,
        key: &[u8],
        value: &[&[u8]],
        flags: u32,
        stamp: record::Stamp,
        ttl: u32,
        expire_at: u32,
        width: u32,
        pool: u8,
        now: u32,
    ) -> Result<Loc> {
        self.append_as::<true>(key, value, flags, stamp, false, ttl, expire_at, width, pool, now)
    }

    /// `append_record`, of a large item's head if `LARGE`: known when compiled, so that no other
    /// append tests for it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn append_as<const LARGE: bool>(
        &mut self,
        key: &[u8],
        value: &[&[u8]],
        flags: u32,
        stamp: record::Stamp,
        wide: bool,
        ttl: u32,
        expire_at: u32,
        width: u32,
        pool: u8,
        now: u32,
    ) -> Result<Loc> {
        let stamp = record::Stamp { large: LARGE, ..stamp };
        let value_len: usize = value.iter().map(|v| v.len()).sum();
        let form_in = |base| match CasForm::of(&stamp, base) {
            CasForm::Narrow if wide => CasForm::Wide,
            form => form,
        };
        let len_in = |base| record::record_len_of(key.len(), value_len, flags, form_in(base), LARGE);
        let (seg, len) = self.segment_for(len_in, ttl, expire_at, width, pool, now)?;
        let (base, create_at) = (self.seg(seg).cas_base, self.seg(seg).create_at);
        let access = record::access_code(now.saturating_sub(create_at));
        let stamp = record::Stamp { access, ..stamp };
        let form = form_in(base);
        let fill = |dst: &mut [u8]| {
            if LARGE {
                record::write_head(dst, key, value, flags, stamp, form, base)
            } else {
                record::write(dst, key, value, flags, stamp, form, base)
            }
        };
        Ok(self.segments().write_record(seg, fill, len))
    }

    /// The segment a record expiring at `expire_at` goes to, and the record's length there
    /// (`len_in` of the segment's CAS base): the open segment of its TTL bucket (and pool), or a
    /// new one when that is full or its expiry window has passed. A new segment's base is the
    /// shard's last CAS counter taken (a store takes its own before it appends), so the records
    /// appended while it is open hold theirs narrow until 2^16 more are taken. `width`: how far
    /// below `expire_at` the segment's expiry may lie (`expiry_fits`); the TTL bucket's width,
    /// or 1 for a copy that keeps its item's expiry to the second.
    pub(crate) fn segment_for(
        &mut self,
        len_in: impl Fn(u32) -> usize,
        ttl: u32,
        expire_at: u32,
        width: u32,
        pool: u8,
        now: u32,
    ) -> Result<(u32, usize)> {
        let b = ttl::bucket_of(ttl);
        let open = self.ttl_bucket(b).open[pool as usize];
        if open != NONE {
            let len = len_in(self.seg(open).cas_base);
            if self.segments().accepts(open, len, expire_at, width) {
                return Ok((open, len));
            }
        }
        let id = self.alloc_segment()?;
        // Allocation may have evicted or merged away the old open segment.
        let open = self.ttl_bucket(b).open[pool as usize];
        if open != NONE && self.seg(open).state == SEG_OPEN {
            self.seg_mut(open).state = SEG_SEALED;
        }
        let seq = self.segments().next_seq();
        let cas_base = self.meta().next_cas.load(Relaxed).wrapping_sub(1);
        *self.seg_mut(id) = SegHeader {
            seq,
            create_at: now,
            expire_at,
            ttl_bucket: b as u16,
            state: SEG_OPEN,
            pool,
            cas_base,
            ..SegHeader::EMPTY
        };
        let (mut segments, mut buckets) = self.segments_and_ttl();
        buckets.link_tail(&mut segments, b, id);
        self.ttl_bucket_mut(b).open[pool as usize] = id;
        Ok((id, len_in(cas_base)))
    }

    /// The length the record at `from`, in a segment whose CAS base is `from_base`, takes once
    /// copied into a segment whose base is `dest_base` (see `move_record`).
    pub(crate) fn moved_len(&self, from: Loc, from_base: u32, dest_base: u32) -> usize {
        let src = &self.seg_bytes(from.seg)[from.offset as usize..];
        let h = record::header(src).expect("a record that was parsed");
        let form = h.form().moved(h.stamp(src, from_base).cas, dest_base);
        // Only the CAS field's width changes (a head keeps its longer length field).
        h.total_len() + form.bytes() - h.form().bytes()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::time::Duration;

    use crate::builder::Builder;
    use crate::clock::ManualClock;
    use crate::engine::write::Mode;
    use crate::engine::Segcache;
    use crate::eviction::policy::Policy;
    use crate::hash::hash;
    use crate::hashtable::slot::Loc;
    use crate::record::CasForm;

    const T0: u32 = 1_700_000_000;
    const NEVER: Duration = Duration::ZERO;

    /// `set`, returning the new CAS value.
    fn set(c: &mut Segcache, key: &[u8], value: &[u8]) -> u64 {
        c.store_hashed(key, hash(key), value, 0, NEVER, Mode::Set).unwrap()
    }

    fn engine() -> Segcache {
        Builder::new().heap_size(1 << 20).segment_size(64 << 10).clock(ManualClock::new(T0)).build().unwrap()
    }

    /// Takes `n` of the shard's CAS counters, as `n` stores of other keys would.
    fn skip_counters(c: &mut Segcache, n: u32) {
        let next = c.meta_mut().next_cas.get_mut();
        *next = next.wrapping_add(n);
    }

    fn loc_of(c: &Segcache, key: &[u8]) -> Loc {
        let (seg, offset) = c.record_location(key).unwrap();
        Loc { seg, offset }
    }

    fn form_of(c: &Segcache, key: &[u8]) -> CasForm {
        c.record(loc_of(c, key)).unwrap().form()
    }

    /// Records appended to a segment hold their counter in 2 bytes while it lies less than 2^16
    /// above the segment's base (the counter of its first record), in 4 past that; both read
    /// back the CAS value the store returned.
    #[test]
    fn a_counter_far_from_its_segments_base_is_held_wide() {
        let mut c = engine();
        let a = set(&mut c, b"a", b"1");
        skip_counters(&mut c, 65_534);
        let b = set(&mut c, b"b", b"2");
        let d = set(&mut c, b"d", b"3");
        assert!(a < b && b < d);
        let seg = loc_of(&c, b"a").seg;
        assert!([b"b", b"d"].iter().all(|k| loc_of(&c, *k).seg == seg), "one open segment");
        assert_eq!(c.seg(seg).cas_base, c.record(loc_of(&c, b"a")).unwrap().stamp.cas);
        let forms = [b"a", b"b", b"d"].map(|k| form_of(&c, k));
        assert_eq!(
            forms,
            [CasForm::Narrow, CasForm::Narrow, CasForm::Wide],
            "65,535 above the base is the last narrow"
        );
        for (k, cas, v) in [(b"a", a, b"1"), (b"b", b, b"2"), (b"d", d, b"3")] {
            let item = c.get(k).unwrap();
            assert_eq!((item.cas(), item.value()), (cas, &v[..]));
        }
        // 1-byte keys and values: 6-byte headers, 8 with a wide counter.
        assert_eq!(c.stats().bytes, 8 + 8 + 10);
    }

    /// A rewrite in place keeps the record's CAS form: a narrow record whose new counter does
    /// not fit leaves the store to an append; a wide one takes any counter in place.
    #[test]
    fn a_rewrite_whose_counter_does_not_fit_its_narrow_record_is_appended() {
        let mut c = engine();
        let v1 = set(&mut c, b"k", b"value-1");
        let at = loc_of(&c, b"k");
        let v2 = set(&mut c, b"k", b"value-2");
        assert_eq!(loc_of(&c, b"k"), at, "rewritten in place");
        assert_eq!(form_of(&c, b"k"), CasForm::Narrow);
        skip_counters(&mut c, 70_000);
        let v3 = set(&mut c, b"k", b"value-3");
        let at3 = loc_of(&c, b"k");
        assert_ne!(at3, at, "appended");
        assert_eq!(at3.seg, at.seg, "to the same open segment, whose base is now far behind");
        assert_eq!(form_of(&c, b"k"), CasForm::Wide);
        let item = c.get(b"k").unwrap();
        assert_eq!((item.value(), item.cas()), (&b"value-3"[..], v3));
        assert!(v1 < v2 && v2 < v3);
        let v4 = set(&mut c, b"k", b"value-4");
        assert_eq!(loc_of(&c, b"k"), at3, "a wide record is rewritten in place");
        let item = c.get(b"k").unwrap();
        assert_eq!((item.value(), item.cas()), (&b"value-4"[..], v4));
        assert!(v3 < v4);
        let s = c.stats();
        assert_eq!((s.items, s.bytes), (1, 1 + 7 + 8));
    }

    /// A store that outgrows the key's narrow record appends it wide, even into a segment whose
    /// base would take the counter narrow: so a key stored less often than once in 2^16 stores
    /// to its shard is appended once, then rewritten in place, where a narrow copy would be
    /// outgrown (and appended, leaving a dead copy) at every store. A store that changes the
    /// layout, or a new key, is appended narrow as before.
    #[test]
    fn a_key_that_outgrew_its_narrow_record_is_appended_wide_then_rewritten_in_place() {
        let mut c = engine();
        let v1 = set(&mut c, b"k", b"value-1");
        set(&mut c, b"other", b"short");
        let old = loc_of(&c, b"k");
        assert_eq!(form_of(&c, b"k"), CasForm::Narrow);
        // Later stores elsewhere take 70,000 counters, then fill the open segment, so that the
        // next append goes to a segment opened after them (its base the latest counter).
        skip_counters(&mut c, 70_000);
        let filler = (1..)
            .map(|i| format!("filler-{i}").into_bytes())
            .find(|key| {
                set(&mut c, key, &[b'f'; 500]);
                loc_of(&c, key).seg != old.seg
            })
            .unwrap();
        let open = loc_of(&c, &filler).seg;
        assert_eq!(form_of(&c, &filler), CasForm::Narrow, "a new key is narrow");
        let v2 = set(&mut c, b"k", b"value-2");
        let at = loc_of(&c, b"k");
        assert_eq!((at.seg, form_of(&c, b"k")), (open, CasForm::Wide), "appended wide");
        set(&mut c, b"other", b"longer value");
        assert_eq!((loc_of(&c, b"other").seg, form_of(&c, b"other")), (open, CasForm::Narrow), "another layout");
        skip_counters(&mut c, 70_000);
        let v3 = set(&mut c, b"k", b"value-3");
        assert_eq!(loc_of(&c, b"k"), at, "rewritten in place");
        let item = c.get(b"k").unwrap();
        assert_eq!((item.value(), item.cas()), (&b"value-3"[..], v3));
        assert!(v1 < v2 && v2 < v3);
    }

    /// A store that cannot rewrite in place appends, then looks for the key's old copy to
    /// replace only if its chain held one: a new key skips the look, while a key whose record
    /// has another layout, or has expired but still holds its slot, has that slot taken over,
    /// leaving one item per key.
    #[test]
    fn an_append_replaces_the_keys_old_copy_whenever_it_had_a_slot() {
        let clock = ManualClock::new(T0);
        let mut c = Builder::new().heap_size(1 << 20).segment_size(64 << 10).clock(clock.clone()).build().unwrap();
        set(&mut c, b"k", b"short");
        set(&mut c, b"k", b"a longer value");
        assert_eq!((c.len(), c.get(b"k").unwrap().value()), (1, &b"a longer value"[..]));
        // Two expired segments: the store's expiry step frees one (the shorter TTL's first), and
        // `t`'s keeps its slot until a later step.
        c.set(b"a", b"v", 0, Duration::from_secs(2)).unwrap();
        c.set(b"t", b"v", 0, Duration::from_secs(5)).unwrap();
        clock.advance(10);
        assert!(c.get(b"t").is_none(), "expired");
        c.set(b"t", b"w", 0, Duration::from_secs(5)).unwrap();
        assert_eq!(c.get(b"t").unwrap().value(), b"w");
        assert_eq!(c.len(), 2, "k and the new t: the old t's slot was taken over");
        for i in 0..200 {
            set(&mut c, format!("new-{i}").as_bytes(), b"v");
        }
        assert_eq!(c.len(), 202);
        c.verify().unwrap();
        for i in 0..200 {
            assert_eq!(c.get(format!("new-{i}").as_bytes()).unwrap().value(), b"v");
        }
    }

    /// A touch that moves a record to another segment keeps its CAS value, re-expressed for the
    /// new segment's base: widened where it does not fit narrow, narrowed where it does.
    #[test]
    fn a_record_moved_by_a_touch_keeps_its_cas_in_the_new_segments_form() {
        let mut c = engine();
        let old = set(&mut c, b"old", b"value");
        skip_counters(&mut c, 70_000);
        let new = set(&mut c, b"new", b"value");
        assert_eq!((form_of(&c, b"old"), form_of(&c, b"new")), (CasForm::Narrow, CasForm::Wide));
        let seg = loc_of(&c, b"old").seg;
        // To a new segment (another TTL bucket), whose base is the latest counter.
        c.touch(b"old", Duration::from_secs(3600)).unwrap();
        c.touch(b"new", Duration::from_secs(3600)).unwrap();
        assert!(loc_of(&c, b"old").seg != seg && loc_of(&c, b"new").seg != seg);
        assert_eq!((form_of(&c, b"old"), form_of(&c, b"new")), (CasForm::Wide, CasForm::Narrow));
        for (k, cas) in [(&b"old"[..], old), (b"new", new)] {
            let item = c.get(k).unwrap();
            assert_eq!((item.value(), item.cas(), item.ttl()), (&b"value"[..], cas, Some(Duration::from_secs(3600))));
        }
        assert_eq!(c.stats().bytes, 2 * (3 + 5) + 6 + 8);
    }

    /// Merges copy records between segments whose bases lie far apart: every kept item keeps
    /// the CAS value its store returned, some of them widened, and a crash-recovery rebuild
    /// (with a file) reads them back and raises the counter above them all.
    fn merges_keep_every_cas_value(path: Option<PathBuf>) {
        let mut b = Builder::new()
            .heap_size(1 << 20)
            .segment_size(64 << 10)
            .eviction(Policy::Merge)
            .clock(ManualClock::new(T0));
        if let Some(p) = &path {
            b = b.path(p);
        }
        let mut c = b.build().unwrap();
        let key = |i: usize| format!("key-{i:06}").into_bytes();
        let value = |i: usize| format!("{i:0200}").into_bytes();
        let mut cas = HashMap::new();
        for i in 0..20_000 {
            if i % 500 == 0 {
                skip_counters(&mut c, 30_000);
            }
            cas.insert(i, set(&mut c, &key(i), &value(i)));
            for j in (i.saturating_sub(1000)..i).filter(|j| j % 10 == 0) {
                let _ = c.get(&key(j));
            }
        }
        assert!(c.stats().merged_items > 1000);
        let check = |c: &Segcache| {
            let (mut kept, mut wide, mut bytes) = (0, 0, 0);
            for (&i, &v) in &cas {
                let Some(item) = c.get(&key(i)) else { continue };
                assert_eq!((item.cas(), item.value()), (v, &value(i)[..]), "key {i}");
                let r = c.record(loc_of(c, &key(i))).unwrap();
                kept += 1;
                wide += usize::from(r.form() == CasForm::Wide);
                bytes += r.len as u64;
            }
            assert_eq!(c.stats().bytes, bytes);
            (kept, wide)
        };
        let (kept, wide) = check(&c);
        assert!(kept > 1000 && wide > 0, "{kept} kept, {wide} of them widened");
        if path.is_some() {
            *c.meta_mut().next_cas.get_mut() = 0;
            let (recovered, corrupt) = c.rebuild();
            assert_eq!((recovered, corrupt), (kept as u64, 0));
            assert_eq!(check(&c), (kept, wide));
            let max = cas.values().max().copied().unwrap();
            assert!(set(&mut c, b"after", b"v") > max, "the counter is raised above every record's");
        }
        drop(c);
        if let Some(p) = path {
            std::fs::remove_file(p).unwrap();
        }
    }

    #[test]
    fn merges_in_place_keep_every_cas_value() {
        merges_keep_every_cas_value(None);
    }

    #[test]
    fn merges_into_a_file_keep_every_cas_value_through_a_rebuild() {
        let path = std::env::temp_dir().join(format!("segcache-test-{}-merge-cas", std::process::id()));
        merges_keep_every_cas_value(Some(path));
    }
}
