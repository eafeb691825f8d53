//! Allocating a segment: from the free list, else by expiring, else by evicting; and the memory
//! limit that caps the segments a shard holds.

use crate::engine::Segcache;
use crate::error::{Error, Result};
use crate::eviction::policy::Policy;
use crate::segments::header::{NONE, SEG_FREE};

impl Segcache {
    /// Takes the free list's head (see `Segments::pop_free`), noting it as the writers'.
    pub(crate) fn pop_free(&mut self) -> Option<u32> {
        let id = self.segments().pop_free()?;
        self.mark_taken(id);
        Some(id)
    }

    /// Notes segment `id` as the writers': they fault it in as they fill it, so
    /// `SharedCache::touch_ahead` has nothing left to do there.
    fn mark_taken(&self, id: u32) {
        self.mem.region.resident.insert(self.mem.index * self.geo.segments + id as usize);
    }

    /// Notes the segments that hold items at the open (a reopened file's) as the writers'.
    pub(crate) fn mark_segments_in_use(&self) {
        for id in 0..self.geo.segments as u32 {
            if self.seg(id).state != SEG_FREE {
                self.mark_taken(id);
            }
        }
    }

    /// The segments that the next `n` allocations will take from the free list (fewer where the
    /// list or the cap runs out first), in the order they will be taken.
    pub(crate) fn next_free(&self, n: usize) -> Vec<u32> {
        let in_use = self.geo.segments as u32 - self.meta().free_count;
        let room = self.segment_cap().saturating_sub(in_use) as usize;
        let mut ids = Vec::with_capacity(n.min(room));
        let mut id = self.meta().free_head;
        while id != NONE && ids.len() < n.min(room) {
            ids.push(id);
            id = self.seg(id).next;
        }
        ids
    }

    /// A free segment for a new item, unless the shard holds its cap (`set_memory_limit`).
    fn take_free(&mut self) -> Option<u32> {
        let in_use = self.geo.segments as u32 - self.meta().free_count;
        if in_use >= self.segment_cap() {
            return None;
        }
        self.pop_free()
    }

    /// A free segment: from the free list, else by expiring, else by evicting.
    pub(crate) fn alloc_segment(&mut self) -> Result<u32> {
        if let Some(id) = self.take_free() {
            return Ok(id);
        }
        // Expired segments go before any live one, from a pass of their own: this second's pass
        // may have gone past chains whose heads expired since.
        self.start_expiry_pass();
        // Above a lowered cap, each round frees one more segment.
        let over = (self.geo.segments as u32 - self.meta().free_count).saturating_sub(self.segment_cap()) as usize;
        for round in 0..=(2 * self.geo.segments + over) {
            if let Some(id) = self.take_free() {
                return Ok(id);
            }
            self.free_step(round)?;
        }
        self.take_free().ok_or(Error::NoMemory)
    }

    /// Round `round` of freeing room: a segment whose items expired if there is one, else an
    /// eviction by the policy, or by FIFO once `2 * segments` rounds have passed (merges and
    /// promotions may free nothing when they keep everything; FIFO always frees a segment).
    pub(crate) fn free_step(&mut self, round: usize) -> Result<()> {
        if self.expire_some(1) > 0 {
            Ok(())
        } else if round >= 2 * self.geo.segments {
            self.evict_by(Policy::Fifo)
        } else {
            self.evict()
        }
    }

    /// Limits the segments this engine holds to `bytes` of heap (at least one segment), or lifts
    /// the limit up to the whole heap. Segments held above a lowered limit are given up as new
    /// items need room (by expiry, else by eviction), not at once. `InvalidConfig` when `bytes`
    /// is more than the heap, which cannot grow.
    ///
    /// ```
    /// use std::time::Duration;
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).segment_size(64 << 10).build()?;
    /// cache.set_memory_limit(1 << 20)?;
    /// for i in 0..20_000 {
    ///     cache.set(format!("key{i}").as_bytes(), &[0; 100], 0, Duration::ZERO)?;
    /// }
    /// let stats = cache.stats();
    /// assert!(stats.evicted_items > 0);
    /// assert!(stats.segments_total - stats.segments_free <= 16); // 1 MiB of 64 KiB segments
    /// assert!(cache.set_memory_limit(8 << 20).is_err()); // more than the heap
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn set_memory_limit(&mut self, bytes: usize) -> Result<()> {
        if bytes > self.geo.heap_len() {
            return Err(Error::InvalidConfig(format!(
                "memory limit {bytes} is more than the heap ({} bytes)",
                self.geo.heap_len()
            )));
        }
        self.meta_mut().segment_cap = (bytes / self.geo.segment_size).max(1) as u32;
        Ok(())
    }

    /// Segments that the next allocations can take from the free list without eviction (fewer
    /// than the list holds where the cap comes first).
    pub(crate) fn free_room(&self) -> usize {
        let in_use = self.geo.segments as u32 - self.meta().free_count;
        (self.segment_cap().saturating_sub(in_use)).min(self.meta().free_count) as usize
    }

    /// Segments the shard may hold at once.
    pub(crate) fn segment_cap(&self) -> u32 {
        match self.meta().segment_cap {
            0 => self.geo.segments as u32,
            cap => cap,
        }
    }

    /// The heap this engine may use now: `set_memory_limit`'s, else the whole heap.
    ///
    /// ```
    /// use segcache_core::Builder;
    ///
    /// let mut cache = Builder::new().heap_size(4 << 20).segment_size(64 << 10).build()?;
    /// assert_eq!(cache.memory_limit(), 4 << 20);
    /// cache.set_memory_limit(1 << 20)?;
    /// assert_eq!(cache.memory_limit(), 1 << 20);
    /// # Ok::<(), segcache_core::Error>(())
    /// ```
    pub fn memory_limit(&self) -> usize {
        self.segment_cap() as usize * self.geo.segment_size
    }
}
