// Tests of the C++17 wrapper (segcache.hpp): RAII, string_view keys, optional results,
// exceptions carrying the status, and exceptions from callbacks crossing back safely.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "segcache.hpp"

static int passed, failed;
#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (cond) passed++;                                                              \
        else { failed++; std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } \
    } while (0)

template <class F>
static segcache_status_t thrown(F &&f) {
    try { f(); } catch (const segcache::Error &e) { return e.status(); }
    return SEGCACHE_OK;
}

static segcache::Config small() {
    return segcache::Config().heap_size(8u << 20).segment_size(256u << 10).shards(4);
}

int main() {
    using namespace std::string_view_literals;
    {
        // the heap faulted in at open: the setter reaches the C config
        segcache::Cache c(small().prefault(true));
        c.set("k", "v");
        CHECK(c.get("k")->value == "v");
    }
    {
        // a flash tier: what eviction takes out of a heap of 4 segments (most of 4000 items) is read
        // back from it
        char dir[] = "/tmp/segcache-hpp-tier-XXXXXX";
        CHECK(mkdtemp(dir) != nullptr);
        std::string tier = std::string(dir) + "/tier.seg";
        auto tiered = segcache::Config().heap_size(256u << 10).segment_size(64u << 10).shards(1);
        CHECK(thrown([&] { segcache::Cache c(tiered.tier(tier, 1000)); }) == SEGCACHE_INVALID_CONFIG);
        {
            segcache::Cache c(tiered.tier(tier, 8u << 20));
            for (int i = 0; i < 4000; i++) c.set("t" + std::to_string(i), std::string(200, char('a' + i % 26)), i);
            int right = 0;
            for (int i = 0; i < 4000; i++) {
                auto it = c.get("t" + std::to_string(i));
                right += it && it->value == std::string(200, char('a' + i % 26)) && it->flags == uint32_t(i);
            }
            CHECK(right == 4000);
            CHECK(c.stats().flash_hits > 2000);
        }
        {
            // promotion on read: the second read of an item on flash brings it back at the next write
            segcache::Cache c(tiered.tier(tier, 8u << 20).tier_promote_after(2));
            for (int i = 0; i < 4000; i++) c.set("t" + std::to_string(i), std::string(200, 'p'), 0);
            // the first key whose read the tier serves, read once more
            int i = 0;
            while (c.stats().flash_hits == 0 && i < 4000) CHECK(c.get("t" + std::to_string(i++)));
            CHECK(c.get("t" + std::to_string(i - 1)));
            c.set("unrelated", "x", 0);
            CHECK(c.stats().flash_promoted == 1);
        }
        {
            // without a write queue, each eviction writes what it demoted itself
            segcache::Cache c(tiered.tier(tier, 8u << 20).tier_promote_after(0).tier_write_queue(0));
            for (int i = 0; i < 4000; i++) c.set("t" + std::to_string(i), std::string(200, 'q'), 0);
            CHECK(c.stats().flash_items > 2000);
            CHECK(c.get("t0") && c.get("t0")->value == std::string(200, 'q'));
        }
        std::remove(tier.c_str());
        rmdir(dir);
    }
    {
        // a file reopened with another heap size: refused, or its items moved with resize_file
        char dir[] = "/tmp/segcache-hpp-resize-XXXXXX";
        CHECK(mkdtemp(dir) != nullptr);
        std::string path = std::string(dir) + "/cache.seg";
        {
            segcache::Cache c(small().file(path));
            c.set("kept", "v", 3);
            c.close();
        }
        auto bigger = small().heap_size(16u << 20).file(path);
        CHECK(thrown([&] { segcache::Cache c(bigger); }) == SEGCACHE_BAD_FILE);
        {
            segcache::Cache c(bigger.resize_file(true));
            auto it = c.get("kept");
            CHECK(it && it->value == "v" && it->flags == 3);
            c.close();
        }
        std::remove(path.c_str());
        rmdir(dir);
    }
    {
        // room to grow: the limit starts at the heap, rises into the room, and no further
        segcache::Cache c(small().max_heap_size(32u << 20));
        size_t start = c.memory_limit();
        c.set("k", "v");
        c.set_memory_limit(start * 2);
        CHECK(c.memory_limit() == start * 2 && c.get("k")->value == "v");
        CHECK(thrown([&] { c.set_memory_limit(64u << 20); }) == SEGCACHE_INVALID_CONFIG);
        CHECK(c.memory_limit() == start * 2);
    }
    {
        segcache::Cache c(small());
        CHECK(c.is_open());
        CHECK(!c.get("k").has_value());
        c.set("k", "v1", 5);
        auto it = c.get("k");
        CHECK(it && it->value == "v1" && it->flags == 5 && it->ttl == 0);
        // binary keys and values
        c.set("a\0b"sv, "x\0y"sv);
        CHECK(c.get("a\0b"sv)->value == "x\0y"sv);
        CHECK(!c.get("a"sv));
        // get_into reuses and grows the buffer
        std::string buf;
        c.set("long", std::string(1000, 'z'));
        CHECK(c.get_into("long", buf) && buf == std::string(1000, 'z'));
        CHECK(!c.get_into("absent", buf) && buf.empty());
        // add / replace / cas
        CHECK(!c.add("k", "x"));
        CHECK(c.add("new", "x"));
        CHECK(!c.replace("absent", "x"));
        CHECK(c.replace("new", "y"));
        uint64_t cas = c.get("new")->cas;
        CHECK(c.cas("new", "z", cas + 1) == segcache::CasResult::Exists);
        CHECK(c.cas("new", "z", cas) == segcache::CasResult::Stored);
        CHECK(c.cas("absent", "z", 1) == segcache::CasResult::NotFound);
        CHECK(c.get("new")->value == "z");
        // item state: stale-while-revalidate, caller-chosen CAS, delete with CAS
        CHECK(!c.get_state("absent"));
        CHECK(c.invalidate("new").has_value());
        segcache_read_options_t claim{};
        claim.claim_token = true;
        auto s1 = c.get_state("new", claim);
        CHECK(s1 && s1->value == "z" && s1->info.stale && s1->info.won && !s1->info.token_sent);
        auto s2 = c.get_state("new", claim);
        CHECK(s2 && s2->info.stale && !s2->info.won && s2->info.token_sent);
        c.set("big", std::string(1000, 'b'));
        CHECK(c.invalidate("big", 30, 0, 77) == 77u);
        auto s3 = c.get_state("big", claim);  // longer than the first buffer: read twice, claimed once
        CHECK(s3 && s3->value == std::string(1000, 'b') && s3->info.won && s3->info.cas == 77 && s3->info.ttl == 30);
        CHECK(c.get_state("big", claim)->info.token_sent);
        CHECK(!c.invalidate("big", -1, 1));
        segcache_store_options_t e{};
        e.new_cas = 1234;
        CHECK(c.store("e", "v", 0, 0, e) == 1234u);
        CHECK(c.get("e")->cas == 1234);
        segcache_store_options_t add{};
        add.mode = SEGCACHE_STORE_ADD;
        CHECK(!c.store("e", "v", 0, 0, add));
        CHECK(c.del_cas("e", 1235) == segcache::CasResult::Exists);
        CHECK(c.del_cas("e", 1234) == segcache::CasResult::Stored);
        CHECK(c.del_cas("e", 1234) == segcache::CasResult::NotFound);
        // append / prepend
        CHECK(!c.append("absent", "x"));
        CHECK(c.append("new", "!") && c.prepend("new", "<"));
        CHECK(c.get("new")->value == "<z!");
        // incr / decr
        CHECK(!c.incr("n"));
        c.set("n", "41");
        CHECK(c.incr("n") == 42u);
        CHECK(c.decr("n", 50) == 0u);
        CHECK(thrown([&] { c.incr("new"); }) == SEGCACHE_NOT_NUMERIC);
        // delete / contains
        CHECK(c.contains("k"));
        CHECK(c.del("k"));
        CHECK(!c.del("k"));
        CHECK(!c.contains("k"));
        // get_many
        auto many = c.get_many({"new", "absent", "n"});
        CHECK(many.size() == 3 && many[0]->value == "<z!" && !many[1] && many[2]->value == "0");
        // zero-copy get_with
        size_t seen = 0;
        CHECK(c.get_with("long", [&](const segcache_item_t &i) { seen = i.value_len; }));
        CHECK(seen == 1000);
        CHECK(!c.get_with("absent", [&](const segcache_item_t &) { seen = 0; }));
        // an exception from the callback comes back to the caller, not through the C library
        bool caught = false;
        try {
            c.get_with("long", [](const segcache_item_t &) { throw std::runtime_error("from callback"); });
        } catch (const std::runtime_error &e) {
            caught = std::string(e.what()) == "from callback";
        }
        CHECK(caught);
        CHECK(c.contains("long"));  // the cache still works (the read lock was released)
        // key scan: every key once; an exception from the callback comes back after the step
        {
            auto ks = c.keys();
            std::sort(ks.begin(), ks.end());
            CHECK(std::adjacent_find(ks.begin(), ks.end()) == ks.end());
            CHECK(ks.size() == c.size() && std::binary_search(ks.begin(), ks.end(), "long"));
            CHECK(std::binary_search(ks.begin(), ks.end(), "new") && std::binary_search(ks.begin(), ks.end(), "n"));
            bool threw = false;
            try {
                uint64_t cur = 0;
                do cur = c.scan(cur, 1, [](std::string_view) { throw std::runtime_error("scan cb"); });
                while (cur != 0);
            } catch (const std::runtime_error &e) {
                threw = std::string(e.what()) == "scan cb";
            }
            CHECK(threw);
            CHECK(c.contains("long"));  // the shard lock was released
        }
        c.set("long", "short");
        // errors become exceptions with the status and message
        CHECK(thrown([&] { c.set("", "v"); }) == SEGCACHE_INVALID_ARGUMENT);
        CHECK(thrown([&] { c.set(std::string(251, 'k'), "v"); }) == SEGCACHE_KEY_TOO_LONG);
        CHECK(thrown([&] { c.set("big", std::string(1u << 20, 'b')); }) == SEGCACHE_TOO_LARGE);
        try {
            c.set(std::string(251, 'k'), "v");
        } catch (const segcache::Error &e) {
            CHECK(std::string(e.what()).find("key too long") != std::string::npos);
        }
        CHECK(thrown([&] { c.advance_clock(1); }) == SEGCACHE_INVALID_ARGUMENT);
        // stats and size
        auto s = c.stats();
        CHECK(s.shards == 4);
        CHECK(s.items == c.size());
        c.flush();
        CHECK(c.size() == 0);
        c.flush_after(0);
        CHECK(c.expire() == 0);
        {  // touch_ahead: segments faulted in now, or nullopt once every segment was used
            const uint64_t shards = c.stats().shards;
            std::optional<size_t> first = c.touch_ahead(2);
            CHECK(!first || *first <= 2 * shards);
            std::string value(4000, 'x');
            int i = 0;
            while (c.touch_ahead(2) && i < 100000) c.set("ahead-" + std::to_string(i++), value);
            CHECK(!c.touch_ahead(2));
        }
        // move: the moved-from object is closed and refuses calls with an exception
        segcache::Cache d = std::move(c);
        CHECK(!c.is_open() && d.is_open());
        CHECK(thrown([&] { c.set("k", "v"); }) == SEGCACHE_INVALID_ARGUMENT);
        d.set("k", "v");
        d.close();
        CHECK(!d.is_open());
        d.close();  // a second close is a no-op
    }
    {
        // TTLs on a manual clock
        segcache::Cache c(small().manual_clock(1700000000));
        CHECK(c.now() == 1700000000u);
        c.set("t", "v", 0, 10);
        CHECK(c.get("t")->ttl == 10);
        c.advance_clock(5);
        CHECK(c.touch("t", 100));
        CHECK(!c.touch("absent", 1));
        c.advance_clock(50);
        CHECK(c.get("t")->ttl == 50);
        c.advance_clock(60);
        CHECK(!c.get("t"));
    }
    {
        // max_item_size: a value larger than a segment is stored (as chunks) and read back whole,
        // one item; past the setting, and without it, such a value is refused as too large
        auto cfg = segcache::Config().heap_size(32u << 20).segment_size(256u << 10).shards(2);
        std::string big(3u << 20, '\0');
        for (size_t i = 0; i < big.size(); i++) big[i] = char((i / 7) * 31 + i % 251);
        CHECK(thrown([&] { segcache::Cache c(cfg); c.set("big", big); }) == SEGCACHE_TOO_LARGE);
        segcache::Cache c(cfg.max_item_size(4u << 20));
        c.set("big", big, 9);
        auto it = c.get("big");
        CHECK(it && it->value == big && it->flags == 9);
        CHECK(c.size() == 1);
        CHECK(thrown([&] { c.set("over", std::string(4u << 20, 'x')); }) == SEGCACHE_TOO_LARGE);
        CHECK(c.del("big"));
        CHECK(!c.get("big"));
    }
    {
        // bad configuration
        CHECK(thrown([] { segcache::Cache c(segcache::Config().segment_size(1000)); }) == SEGCACHE_INVALID_CONFIG);
        CHECK(thrown([] { segcache::Cache c(segcache::Config().eviction(static_cast<segcache_policy_t>(42))); }) ==
              SEGCACHE_INVALID_ARGUMENT);
    }
    {
        // one Cache from several threads
        segcache::Cache c(small());
        c.set("counter", "0");
        std::vector<std::thread> ts;
        for (int t = 0; t < 4; t++)
            ts.emplace_back([&c, t] {
                for (int i = 0; i < 2000; i++) {
                    c.set("k" + std::to_string(t) + "-" + std::to_string(i), std::to_string(i));
                    c.incr("counter");
                }
            });
        for (auto &t : ts) t.join();
        CHECK(c.get("counter")->value == "8000");
        CHECK(c.get("k3-1999")->value == "1999");
        CHECK(c.size() == 8001);
    }
    {
        // a Cache inherited across fork() throws SEGCACHE_FORKED from every call in the child,
        // and its destructor there frees the child's copy; the parent's stays as it was
        segcache::Cache c(small());
        c.set("k", "parent", 3);
        std::fflush(stdout);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            int bad = 0;
            auto forked = [&](auto &&f) { bad += thrown(f) != SEGCACHE_FORKED; };
            forked([&] { c.get("k"); });
            forked([&] { c.contains("k"); });
            forked([&] { c.get_many({"k"}); });
            forked([&] { c.size(); });
            forked([&] { c.stats(); });
            forked([&] { c.set("k", "child"); });
            forked([&] { c.append("k", "x"); });
            forked([&] { c.incr("n"); });
            forked([&] { c.del("k"); });
            forked([&] { c.flush(); });
            forked([&] { c.close(); });  // freed, and reported
            bad += c.is_open();
            _exit(bad == 0 ? 0 : 1);
        }
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        auto it = c.get("k");
        CHECK(it && it->value == "parent" && it->flags == 3);
    }
    {
        // Config::multi_process: a Cache opened before fork() works in the child, which shares
        // it with the parent; settings that differ from the users' are refused
        char dir[] = "/tmp/segcache-hpp-mp-XXXXXX";
        CHECK(mkdtemp(dir) != nullptr);
        std::string path = std::string(dir) + "/cache.dat";
        segcache::Cache c(small().file(path).multi_process(true));
        c.set("k", "parent", 3);
        std::fflush(stdout);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            auto it = c.get("k");
            bool ok = it && it->value == "parent" && it->flags == 3;
            c.set("child", "wrote", 4);
            c.close();
            _exit(ok ? 0 : 1);
        }
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        auto it = c.get("child");
        CHECK(it && it->value == "wrote" && it->flags == 4);
        auto fifo = small().file(path).multi_process(true).eviction(SEGCACHE_POLICY_FIFO);
        CHECK(thrown([&] { segcache::Cache other(fifo); }) == SEGCACHE_BAD_FILE);
        CHECK(thrown([&] { segcache::Cache other(small().file(path)); }) == SEGCACHE_LOCKED);
        c.close();
        std::remove(path.c_str());
        rmdir(dir);
    }
    {
        // get_or_load: single flight across threads, exceptions rethrown, a big value kept
        segcache::Cache c(small());
        constexpr int kThreads = 8;
        std::atomic<int> calls{0}, started{0};
        std::vector<std::thread> th;
        std::vector<std::string> got(kThreads);
        for (int i = 0; i < kThreads; i++) {
            th.emplace_back([&, i] {
                started++;
                got[i] = c.get_or_load("slow", [&] {
                    calls++;
                    for (int j = 0; j < 400 && started.load() < kThreads; j++)
                        std::this_thread::sleep_for(std::chrono::milliseconds(5));
                    std::this_thread::sleep_for(std::chrono::milliseconds(50));
                    return std::string("once");
                }, 60).value;
            });
        }
        for (auto &t : th) t.join();
        CHECK(calls.load() == 1);
        CHECK(std::all_of(got.begin(), got.end(), [](const std::string &v) { return v == "once"; }));
        CHECK(c.get("slow")->value == "once");
        auto hit = c.get_or_load("slow", [&]() -> std::string { throw std::logic_error("not called"); });
        CHECK(hit.value == "once" && hit.ttl > 0);
        bool threw = false;
        try {
            c.get_or_load("err", []() -> std::string { throw std::runtime_error("backend down"); });
        } catch (const std::runtime_error &e) {
            threw = std::string(e.what()) == "backend down";
        }
        CHECK(threw && !c.contains("err"));
        auto big = c.get_or_load("big", [] { return std::string(1 << 20, 'b'); });  // larger than a segment
        CHECK(big.value.size() == (1u << 20) && big.cas == 0 && !c.contains("big"));
        auto longer = c.get_or_load("longer", [] { return std::string(5000, 'l'); });
        CHECK(longer.value == std::string(5000, 'l') && longer.cas != 0);
    }
    std::printf("test_segcache_hpp: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
