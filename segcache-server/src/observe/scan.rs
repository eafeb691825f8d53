//! Walking every live item, a step of the engine's key cursor at a time (key dumps, `stats
//! sizes`), so that writers wait at most one step.

use segcache_core::Item;

use crate::state::Ctx;

/// Items read per step of the engine's key cursor (a dump, `stats sizes`): writers wait at most
/// that long for one step.
pub const SCAN_STEP: usize = 256;

/// Calls `f` on every live item, a step of the engine's key cursor at a time, until `f`
/// returns `false`.
pub fn each_item(ctx: &Ctx<'_>, mut f: impl FnMut(&Item<'_>) -> bool) {
    let cache = &ctx.shared.cache;
    let mut cursor = 0;
    let mut more = true;
    loop {
        cursor = cache.scan_with(cursor, SCAN_STEP, |item| {
            if more {
                more = f(&item);
            }
        });
        if cursor == 0 || !more {
            return;
        }
    }
}
