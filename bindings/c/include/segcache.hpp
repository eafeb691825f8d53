// segcache.hpp: a thin C++17 wrapper over segcache.h.
//
// - segcache::Cache owns one segcache_t (RAII, move-only); the destructor closes it.
// - Keys and values are std::string_view (any bytes, NULs included).
// - Expected outcomes come back as values: get() -> std::optional<Item>, add()/replace()/
//   append()/prepend() -> bool (false: not stored), cas() -> CasResult, del()/touch() -> bool,
//   incr()/decr() -> std::optional<uint64_t> (nullopt: not found).
// - Everything else (bad arguments, too large, no memory, I/O, ...) throws segcache::Error,
//   which carries the status and segcache_last_error()'s message.
// - Thread safety: as the C API: one Cache may be used from many threads at once; moving,
//   close() and destruction must not race with other calls.
// - fork(): in a child, every call on a Cache opened before the fork throws segcache::Error
//   with status SEGCACHE_FORKED (reads included); close() there frees the child's copy (and
//   throws), the destructor frees it silently, and neither touches the parent's cache or file.
//   A Cache opened with Config::multi_process is the exception: the child joins the cache
//   (one file shared by processes) at its first call, and its destructor leaves it.
#ifndef SEGCACHE_HPP
#define SEGCACHE_HPP

// C++17 (string_view, optional) or later; MSVC reports its -std in _MSVC_LANG, not __cplusplus.
#if defined(_MSVC_LANG)
#define SEGCACHE_HPP_STD _MSVC_LANG
#elif defined(__cplusplus)
#define SEGCACHE_HPP_STD __cplusplus
#else
#define SEGCACHE_HPP_STD 0L
#endif
#if SEGCACHE_HPP_STD < 201703L
#error "segcache.hpp needs C++17 or later (-std=c++17, MSVC /std:c++17); from C or C++11/14 include segcache.h, the C API"
#endif
#undef SEGCACHE_HPP_STD

#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "segcache.h"

namespace segcache {

/// A failed call: its status and the library's message.
class Error : public std::runtime_error {
public:
    Error(segcache_status_t status, const std::string &message)
        : std::runtime_error(message), status_(status) {}
    segcache_status_t status() const noexcept { return status_; }

private:
    segcache_status_t status_;
};

namespace detail {
[[noreturn]] inline void fail(segcache_status_t st, const char *what) {
    std::string msg = what;
    msg += ": ";
    msg += segcache_strerror(st);
    const char *detail = segcache_last_error();
    if (detail != nullptr && detail[0] != '\0' && std::string_view(detail) != segcache_strerror(st)) {
        msg += " (";
        msg += detail;
        msg += ")";
    }
    throw Error(st, msg);
}
inline void check(segcache_status_t st, const char *what) {
    if (st != SEGCACHE_OK) fail(st, what);
}
inline const uint8_t *bytes(std::string_view s) noexcept {
    return reinterpret_cast<const uint8_t *>(s.data());
}
}  // namespace detail

/// Settings; starts from segcache_config_default().
struct Config {
    segcache_config_t raw{};
    std::string path;  // empty: no persistence file
    std::string tier_path;  // empty: no flash tier

    Config() { detail::check(segcache_config_default(&raw), "segcache_config_default"); }
    Config &heap_size(size_t v) { raw.heap_size = v; return *this; }
    Config &segment_size(size_t v) { raw.segment_size = v; return *this; }
    Config &hash_power(uint8_t v) { raw.hash_power = v; return *this; }
    Config &eviction(segcache_policy_t v) { raw.eviction = static_cast<uint32_t>(v); return *this; }
    Config &shards(uint32_t v) { raw.shards = v; return *this; }
    Config &file(std::string p) { path = std::move(p); return *this; }
    Config &reset_bad_file(bool v) { raw.reset_bad_file = v; return *this; }
    Config &lazy_verify(bool v) { raw.lazy_verify = v; return *this; }
    Config &manual_clock(uint32_t start) { raw.manual_clock_start = start; return *this; }
    Config &multi_process(bool v) { raw.multi_process = v; return *this; }  // needs file()
    Config &prefault(bool v) { raw.prefault = v; return *this; }
    Config &resize_file(bool v) { raw.resize_file = v; return *this; }
    Config &max_heap_size(size_t bytes) { raw.max_heap_size = bytes; return *this; }
    /// The largest item; one larger than a segment holds is stored as chunks (up to 1 GiB).
    Config &max_item_size(size_t bytes) { raw.max_item_size = bytes; return *this; }
    /// A flash tier: a file of `bytes` where eviction writes the items it gives up.
    Config &tier(std::string p, uint64_t bytes) { tier_path = std::move(p); raw.tier_size = bytes; return *this; }
    /// With a tier: a read on it brings its item back to memory once the item has had `reads`
    /// reads, this one included; 0 (default): never.
    Config &tier_promote_after(uint8_t reads) { raw.tier_promote_after = reads; return *this; }
    Config &tier_write_queue(size_t bytes) { raw.tier_write_queue = bytes; return *this; }
};

/// An item copied out of the cache.
struct Item {
    std::string value;
    uint32_t flags = 0;
    uint64_t cas = 0;
    uint32_t ttl = 0;        // seconds left; 0: never expires
    uint32_t expire_at = 0;  // Unix seconds; 0: never expires
};

/// An item with its state, as `Cache::get_state` read it (see segcache_get_ex).
struct ItemState {
    std::string value;
    segcache_item_info_t info{};  // flags, cas, ttl, expire_at, last_access_secs, fetched, stale, won, token_sent
};

enum class CasResult { Stored, Exists, NotFound };

class Cache {
public:
    explicit Cache(const Config &config = Config()) {
        segcache_config_t raw = config.raw;
        raw.path = config.path.empty() ? nullptr : config.path.c_str();
        raw.tier_path = config.tier_path.empty() ? nullptr : config.tier_path.c_str();
        detail::check(segcache_open(&raw, &h_), "segcache_open");
    }
    ~Cache() {
        if (h_ != nullptr) (void)segcache_close(h_);
    }
    Cache(const Cache &) = delete;
    Cache &operator=(const Cache &) = delete;
    Cache(Cache &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    Cache &operator=(Cache &&o) noexcept {
        if (this != &o) {
            if (h_ != nullptr) (void)segcache_close(h_);
            h_ = std::exchange(o.h_, nullptr);
        }
        return *this;
    }

    /// Closes now and reports a failure to persist (the destructor cannot).
    void close() {
        if (h_ == nullptr) return;
        segcache_t *h = std::exchange(h_, nullptr);
        detail::check(segcache_close(h), "segcache_close");
    }
    bool is_open() const noexcept { return h_ != nullptr; }
    /// The C handle, for calls the wrapper does not cover. Still owned by this object.
    segcache_t *raw() const noexcept { return h_; }

    std::optional<Item> get(std::string_view key) const {
        Item item;
        bool found = get_with(key, [&](const segcache_item_t &it) {
            item.value.assign(reinterpret_cast<const char *>(it.value), it.value_len);
            item.flags = it.meta.flags;
            item.cas = it.meta.cas;
            item.ttl = it.meta.ttl;
            item.expire_at = it.meta.expire_at;
        });
        if (!found) return std::nullopt;
        return item;
    }

    /// Copies the value into `out` (reusing its capacity); false on a miss.
    bool get_into(std::string_view key, std::string &out, segcache_meta_t *meta = nullptr) const {
        size_t len = 0;
        for (;;) {
            out.resize(out.capacity());
            auto st = segcache_get(live(), detail::bytes(key), key.size(),
                                   reinterpret_cast<uint8_t *>(out.data()), out.size(), &len, meta);
            if (st == SEGCACHE_OK) { out.resize(len); return true; }
            if (st == SEGCACHE_NOT_FOUND) { out.clear(); return false; }
            if (st != SEGCACHE_BUFFER_TOO_SMALL) detail::fail(st, "segcache_get");
            out.reserve(len);  // the value may change between the two calls: loop
        }
    }

    /// Calls `f(const segcache_item_t&)` on a hit without copying; the item is valid only during
    /// the call, which runs under the shard's read lock (do not call into this cache from `f`).
    /// An exception from `f` is caught at the C boundary and rethrown here.
    template <class F>
    bool get_with(std::string_view key, F &&f) const {
        struct Ctx { F *f; std::exception_ptr err; } ctx{&f, nullptr};
        auto st = segcache_get_with(live(), detail::bytes(key), key.size(),
            [](void *ud, const segcache_item_t *it) {
                auto *c = static_cast<Ctx *>(ud);
                try { (*c->f)(*it); } catch (...) { c->err = std::current_exception(); }
            }, &ctx);
        if (ctx.err) std::rethrow_exception(ctx.err);
        if (st == SEGCACHE_NOT_FOUND) return false;
        detail::check(st, "segcache_get_with");
        return true;
    }

    /// The item under `key`, or on a miss the value `loader()` makes (anything convertible to
    /// std::string_view, e.g. std::string), stored with flags 0 and `ttl` seconds (0: never
    /// expires): see segcache_get_or_load. Single flight: threads that miss on one key at once
    /// wait for one loader's value. An exception from `loader` stores nothing and is rethrown
    /// here (threads waiting on it load again); a value the cache cannot keep is still returned
    /// (cas 0). `loader` may use this cache; loaders that wait for each other's keys deadlock.
    template <class F>
    Item get_or_load(std::string_view key, F &&loader, uint32_t ttl = 0) const {
        struct Ctx { F *f; std::optional<std::string> value; std::exception_ptr err; } ctx{&loader, std::nullopt, nullptr};
        segcache_load_cb cb = [](void *ud, const uint8_t *, size_t, segcache_load_t *load) -> int {
            auto *c = static_cast<Ctx *>(ud);
            try {
                c->value.emplace(std::string_view((*c->f)()));
                return segcache_load_set(load, detail::bytes(*c->value), c->value->size()) == SEGCACHE_OK ? 0 : 1;
            } catch (...) {
                c->err = std::current_exception();
                return 1;
            }
        };
        Item item;
        segcache_meta_t m{};
        size_t len = 0;
        for (;;) {
            item.value.resize(item.value.capacity());
            auto st = segcache_get_or_load(live(), detail::bytes(key), key.size(), ttl, cb, &ctx,
                                           reinterpret_cast<uint8_t *>(item.value.data()), item.value.size(), &len, &m);
            if (ctx.err) std::rethrow_exception(ctx.err);
            if (st == SEGCACHE_OK) { item.value.resize(len); break; }
            if (st != SEGCACHE_BUFFER_TOO_SMALL) detail::fail(st, "segcache_get_or_load");
            // This call's own loader made the value: keep it rather than load again.
            if (ctx.value) { item.value = std::move(*ctx.value); break; }
            item.value.reserve(len);
        }
        item.flags = m.flags;
        item.cas = m.cas;
        item.ttl = m.ttl;
        item.expire_at = m.expire_at;
        return item;
    }

    /// Looks up every key; one entry per key, nullopt for misses.
    std::vector<std::optional<Item>> get_many(const std::vector<std::string_view> &keys) const {
        std::vector<const uint8_t *> ptrs;
        std::vector<size_t> lens;
        ptrs.reserve(keys.size());
        lens.reserve(keys.size());
        for (auto k : keys) { ptrs.push_back(detail::bytes(k)); lens.push_back(k.size()); }
        struct Ctx { std::vector<std::optional<Item>> out; std::exception_ptr err; } ctx{
            std::vector<std::optional<Item>>(keys.size()), nullptr};
        auto st = segcache_get_many(live(), ptrs.data(), lens.data(), keys.size(),
            [](void *ud, size_t i, const segcache_item_t *it) {
                auto *c = static_cast<Ctx *>(ud);
                try {
                    c->out[i] = Item{std::string(reinterpret_cast<const char *>(it->value), it->value_len),
                                     it->meta.flags, it->meta.cas, it->meta.ttl, it->meta.expire_at};
                } catch (...) { c->err = std::current_exception(); }
            }, &ctx, nullptr);
        if (ctx.err) std::rethrow_exception(ctx.err);
        detail::check(st, "segcache_get_many");
        return std::move(ctx.out);
    }

    /// One step of a key scan (`segcache_scan`): calls `f(std::string_view key)` for the keys of
    /// the next stretch from `cursor` (0 to start) and returns the next cursor, 0 when done. The
    /// key is valid only during the call, which runs under the shard's lock (do not call into
    /// this cache from `f`). An exception from `f` skips the step's remaining keys and is
    /// rethrown here.
    template <class F>
    uint64_t scan(uint64_t cursor, size_t count, F &&f) const {
        struct Ctx { F *f; std::exception_ptr err; } ctx{&f, nullptr};
        uint64_t next = 0;
        auto st = segcache_scan(live(), cursor,
            [](void *ud, const uint8_t *key, size_t len) {
                auto *c = static_cast<Ctx *>(ud);
                if (c->err) return;
                try { (*c->f)(std::string_view(reinterpret_cast<const char *>(key), len)); }
                catch (...) { c->err = std::current_exception(); }
            }, &ctx, count, &next);
        if (ctx.err) std::rethrow_exception(ctx.err);
        detail::check(st, "segcache_scan");
        return next;
    }

    /// Every key, by a whole scan: a key present throughout is listed exactly once, even while
    /// other threads write.
    std::vector<std::string> keys() const {
        std::vector<std::string> out;
        uint64_t cursor = 0;
        do {
            cursor = scan(cursor, 256, [&](std::string_view k) { out.emplace_back(k); });
        } while (cursor != 0);
        return out;
    }

    bool contains(std::string_view key) const {
        auto st = segcache_contains(live(), detail::bytes(key), key.size());
        if (st == SEGCACHE_NOT_FOUND) return false;
        detail::check(st, "segcache_contains");
        return true;
    }

    void set(std::string_view key, std::string_view value, uint32_t flags = 0, uint32_t ttl = 0) {
        detail::check(segcache_set(live(), detail::bytes(key), key.size(), detail::bytes(value), value.size(), flags, ttl),
                      "segcache_set");
    }
    bool add(std::string_view key, std::string_view value, uint32_t flags = 0, uint32_t ttl = 0) {
        return stored(segcache_add(live(), detail::bytes(key), key.size(), detail::bytes(value), value.size(), flags, ttl),
                      "segcache_add");
    }
    bool replace(std::string_view key, std::string_view value, uint32_t flags = 0, uint32_t ttl = 0) {
        return stored(segcache_replace(live(), detail::bytes(key), key.size(), detail::bytes(value), value.size(), flags, ttl),
                      "segcache_replace");
    }
    CasResult cas(std::string_view key, std::string_view value, uint64_t cas, uint32_t flags = 0, uint32_t ttl = 0) {
        auto st = segcache_cas(live(), detail::bytes(key), key.size(), detail::bytes(value), value.size(), flags, ttl, cas);
        if (st == SEGCACHE_EXISTS) return CasResult::Exists;
        if (st == SEGCACHE_NOT_FOUND) return CasResult::NotFound;
        detail::check(st, "segcache_cas");
        return CasResult::Stored;
    }
    bool append(std::string_view key, std::string_view value) {
        return stored(segcache_append(live(), detail::bytes(key), key.size(), detail::bytes(value), value.size()),
                      "segcache_append");
    }
    bool prepend(std::string_view key, std::string_view value) {
        return stored(segcache_prepend(live(), detail::bytes(key), key.size(), detail::bytes(value), value.size()),
                      "segcache_prepend");
    }
    std::optional<uint64_t> incr(std::string_view key, uint64_t delta = 1) {
        uint64_t v = 0;
        auto st = segcache_incr(live(), detail::bytes(key), key.size(), delta, &v);
        if (st == SEGCACHE_NOT_FOUND) return std::nullopt;
        detail::check(st, "segcache_incr");
        return v;
    }
    std::optional<uint64_t> decr(std::string_view key, uint64_t delta = 1) {
        uint64_t v = 0;
        auto st = segcache_decr(live(), detail::bytes(key), key.size(), delta, &v);
        if (st == SEGCACHE_NOT_FOUND) return std::nullopt;
        detail::check(st, "segcache_decr");
        return v;
    }
    /// Reads `key` with `opts` (claim the recache token, recache_below, no_update) and reports its
    /// state; nullopt on a miss. A value longer than the first buffer is read again without
    /// claiming or updating: `info`'s state bits (won, token_sent, stale, fetched, last access)
    /// are the first read's, the value and the rest the second's.
    std::optional<ItemState> get_state(std::string_view key, segcache_read_options_t opts = {}) const {
        ItemState out;
        out.value.resize(256);
        size_t len = 0;
        bool retried = false;
        segcache_item_info_t first{};
        for (;;) {
            auto st = segcache_get_ex(live(), detail::bytes(key), key.size(), &opts,
                                      reinterpret_cast<uint8_t *>(out.value.data()), out.value.size(), &len, &out.info);
            if (st == SEGCACHE_NOT_FOUND) return std::nullopt;
            if (st == SEGCACHE_OK) break;
            if (st != SEGCACHE_BUFFER_TOO_SMALL) detail::fail(st, "segcache_get_ex");
            if (!retried) first = out.info;
            retried = true;
            opts.claim_token = false;
            opts.no_update = true;
            out.value.resize(len);
        }
        out.value.resize(len);
        if (retried) {
            out.info.won = first.won;
            out.info.token_sent = first.token_sent;
            out.info.stale = first.stale;
            out.info.fetched = first.fetched;
            out.info.last_access_secs = first.last_access_secs;
        }
        return out;
    }
    /// Marks the item stale (segcache_invalidate): `ttl` -1 keeps its TTL; `compare_cas` and
    /// `new_cas` 0 mean none. The new CAS value; nullopt if absent or `compare_cas` differs.
    std::optional<uint64_t> invalidate(std::string_view key, int64_t ttl = -1, uint64_t compare_cas = 0,
                                       uint64_t new_cas = 0) {
        uint64_t cas = 0;
        auto st = segcache_invalidate(live(), detail::bytes(key), key.size(), ttl, compare_cas, new_cas, &cas);
        if (st == SEGCACHE_NOT_FOUND || st == SEGCACHE_EXISTS) return std::nullopt;
        detail::check(st, "segcache_invalidate");
        return cas;
    }
    /// Stores as `opts` says (segcache_store: mode, a caller-chosen CAS value, the token); the CAS
    /// value stored, or nullopt when the mode's condition failed (NOT_STORED, EXISTS, NOT_FOUND).
    std::optional<uint64_t> store(std::string_view key, std::string_view value, uint32_t flags, uint32_t ttl,
                                  const segcache_store_options_t &opts) {
        uint64_t cas = 0;
        auto st = segcache_store(live(), detail::bytes(key), key.size(), detail::bytes(value), value.size(), flags, ttl,
                                 &opts, &cas);
        if (st == SEGCACHE_NOT_STORED || st == SEGCACHE_EXISTS || st == SEGCACHE_NOT_FOUND) return std::nullopt;
        detail::check(st, "segcache_store");
        return cas;
    }
    /// Removes `key` only if its CAS value is `cas` (segcache_delete_cas).
    CasResult del_cas(std::string_view key, uint64_t cas) {
        auto st = segcache_delete_cas(live(), detail::bytes(key), key.size(), cas);
        if (st == SEGCACHE_EXISTS) return CasResult::Exists;
        if (st == SEGCACHE_NOT_FOUND) return CasResult::NotFound;
        detail::check(st, "segcache_delete_cas");
        return CasResult::Stored;
    }
    /// `delete` is a C++ keyword.
    bool del(std::string_view key) { return found(segcache_delete(live(), detail::bytes(key), key.size()), "segcache_delete"); }
    bool touch(std::string_view key, uint32_t ttl) {
        return found(segcache_touch(live(), detail::bytes(key), key.size(), ttl), "segcache_touch");
    }
    void flush() { detail::check(segcache_flush(live()), "segcache_flush"); }
    void flush_after(uint32_t delay) { detail::check(segcache_flush_after(live(), delay), "segcache_flush_after"); }
    size_t expire() {
        size_t n = 0;
        detail::check(segcache_expire(live(), &n), "segcache_expire");
        return n;
    }
    /// segcache_touch_ahead: the segments faulted in now, or std::nullopt once nothing is left to do.
    std::optional<size_t> touch_ahead(size_t per_shard) {
        size_t n = 0;
        bool done = false;
        detail::check(segcache_touch_ahead(live(), per_shard, &n, &done), "segcache_touch_ahead");
        if (done) return std::nullopt;
        return n;
    }
    segcache_stats_t stats() const {
        segcache_stats_t s{};
        detail::check(segcache_stats(live(), &s), "segcache_stats");
        return s;
    }
    size_t size() const {
        size_t n = 0;
        detail::check(segcache_len(live(), &n), "segcache_len");
        return n;
    }
    /// segcache_set_memory_limit: up to the heap laid out (Config::max_heap_size), else throws.
    void set_memory_limit(size_t bytes) { detail::check(segcache_set_memory_limit(live(), bytes), "segcache_set_memory_limit"); }
    size_t memory_limit() const {
        size_t n = 0;
        detail::check(segcache_memory_limit(live(), &n), "segcache_memory_limit");
        return n;
    }
    uint32_t now() const {
        uint32_t t = 0;
        detail::check(segcache_now(live(), &t), "segcache_now");
        return t;
    }
    void advance_clock(uint32_t secs) { detail::check(segcache_advance_clock(live(), secs), "segcache_advance_clock"); }

private:
    segcache_t *h_ = nullptr;

    segcache_t *live() const {
        if (h_ == nullptr) throw Error(SEGCACHE_INVALID_ARGUMENT, "segcache::Cache used after close() or move");
        return h_;
    }
    static bool stored(segcache_status_t st, const char *what) {
        if (st == SEGCACHE_NOT_STORED) return false;
        detail::check(st, what);
        return true;
    }
    static bool found(segcache_status_t st, const char *what) {
        if (st == SEGCACHE_NOT_FOUND) return false;
        detail::check(st, what);
        return true;
    }
};

}  // namespace segcache

#endif  // SEGCACHE_HPP
