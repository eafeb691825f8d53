//! A segment's header and its states, and the pools of S3-FIFO.

/// Marks "no segment" in links.
pub const NONE: u32 = u32::MAX;

/// Segment states.
pub const SEG_FREE: u8 = 0;
/// In a TTL chain and accepting appends.
pub const SEG_OPEN: u8 = 1;
/// In a TTL chain, full or superseded: a candidate for eviction.
pub const SEG_SEALED: u8 = 2;
/// Held back as the destination of the next merge or promotion.
pub const SEG_SPARE: u8 = 3;

/// S3-FIFO pools (other policies use `POOL_MAIN` only).
pub const POOL_MAIN: u8 = 0;
pub const POOL_SMALL: u8 = 1;

/// A segment's header, kept outside the heap so that scanning headers touches no item memory.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SegHeader {
    /// Allocation sequence number, increasing per shard: the newest copy of a key wins at recovery.
    pub seq: u64,
    /// Wrapping sum of the checksums of the records written (see `record::checksum`): lets a
    /// crash-recovery scan verify a segment that was still being written.
    pub sum: u64,
    /// XXH3 of the written bytes, taken at graceful close: a reopen verifies a segment at memory
    /// speed instead of record by record.
    pub close_sum: u64,
    pub write_offset: u32,
    pub live_bytes: u32,
    pub live_items: u32,
    pub create_at: u32,
    /// Absolute expiry (Unix seconds) of the earliest-expiring item; 0 for never.
    pub expire_at: u32,
    pub prev: u32,
    pub next: u32,
    pub ttl_bucket: u16,
    pub state: u8,
    pub pool: u8,
    /// What its records' narrow CAS counters count from (see `record::CasForm::Narrow`): the
    /// shard's counter when the segment was opened, or for a merge's destination the base of the
    /// source being drained (so that its narrow records stay narrow).
    pub cas_base: u32,
}

impl SegHeader {
    pub const EMPTY: SegHeader = SegHeader {
        seq: 0,
        sum: 0,
        close_sum: 0,
        write_offset: 0,
        live_bytes: 0,
        live_items: 0,
        create_at: 0,
        expire_at: 0,
        prev: NONE,
        next: NONE,
        ttl_bucket: 0,
        state: SEG_FREE,
        pool: POOL_MAIN,
        cas_base: 0,
    };
}
