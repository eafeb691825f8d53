/*
 * Tests of the segcache C API: every function, every status, the bad-argument paths, several
 * threads at once, persistence, and processes that share one cache file (multi_process). Built
 * with gcc -std=c11 -Wall -Wextra -Werror and run plain, under valgrind and under
 * AddressSanitizer by `make -C bindings/c test`.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "segcache.h"

static int passed, failed;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            passed++;                                                                \
        } else {                                                                     \
            failed++;                                                                \
            fprintf(stderr, "%s:%d: %s: CHECK failed: %s (last error: %s)\n", __FILE__, \
                    __LINE__, __func__, #cond, segcache_last_error());               \
        }                                                                            \
    } while (0)

#define CHECK_ST(call, want)                                                          \
    do {                                                                              \
        segcache_status_t st_ = (call);                                               \
        if (st_ == (want)) {                                                          \
            passed++;                                                                 \
        } else {                                                                      \
            failed++;                                                                 \
            fprintf(stderr, "%s:%d: %s: %s returned %d (%s), want %s (last error: %s)\n", \
                    __FILE__, __LINE__, __func__, #call, (int)st_, segcache_strerror(st_), \
                    #want, segcache_last_error());                                    \
        }                                                                             \
    } while (0)

#define K(s) (const uint8_t *)(s), strlen(s)

static segcache_t *open_small(uint32_t manual_clock) {
    segcache_config_t cfg;
    if (segcache_config_default(&cfg) != SEGCACHE_OK) abort();
    cfg.heap_size = 8u << 20;
    cfg.segment_size = 256u << 10;
    cfg.shards = 4;
    cfg.manual_clock_start = manual_clock;
    segcache_t *c = NULL;
    segcache_status_t st = segcache_open(&cfg, &c);
    if (st != SEGCACHE_OK || c == NULL) {
        fprintf(stderr, "open failed: %s\n", segcache_last_error());
        abort();
    }
    return c;
}

/* Reads key into a static buffer as a C string; returns the status. */
static segcache_status_t get_str(segcache_t *c, const char *key, char *out, size_t cap, segcache_meta_t *meta) {
    size_t len = 0;
    segcache_status_t st = segcache_get(c, K(key), (uint8_t *)out, cap - 1, &len, meta);
    if (st == SEGCACHE_OK) out[len] = '\0';
    return st;
}

static void test_version_and_strerror(void) {
    const char *v = segcache_version();
    CHECK(v != NULL && strncmp(v, "0.", 2) == 0);
    CHECK(SEGCACHE_ABI_VERSION == 0);
    for (int s = SEGCACHE_OK; s <= SEGCACHE_NO_SPACE; s++) {
        const char *m = segcache_strerror(s);
        CHECK(m != NULL && m[0] != '\0' && strcmp(m, "unknown status") != 0);
        for (int t = SEGCACHE_OK; t < s; t++) CHECK(strcmp(segcache_strerror(t), m) != 0);
    }
    CHECK(strcmp(segcache_strerror(SEGCACHE_NOT_FOUND), "not found") == 0);
    CHECK(strcmp(segcache_strerror(-1), "unknown status") == 0);
    CHECK(strstr(segcache_strerror(SEGCACHE_FORKED), "fork") != NULL);
    CHECK(strcmp(segcache_strerror(SEGCACHE_NO_SPACE + 1), "unknown status") == 0);
    CHECK(strcmp(segcache_strerror(1 << 30), "unknown status") == 0);
}

static void test_config_default(void) {
    segcache_config_t cfg;
    memset(&cfg, 0xAB, sizeof cfg);
    CHECK_ST(segcache_config_default(&cfg), SEGCACHE_OK);
    CHECK(cfg.heap_size == 64u << 20);
    CHECK(cfg.segment_size == 1u << 20);
    CHECK(cfg.hash_power == 0);
    CHECK(cfg.eviction == SEGCACHE_POLICY_MERGE);
    CHECK(cfg.shards == 0);
    CHECK(cfg.path == NULL);
    CHECK(cfg.reset_bad_file == false);
    CHECK(cfg.lazy_verify == false);
    CHECK(cfg.manual_clock_start == 0);
    CHECK(cfg.multi_process == false);
    CHECK(cfg.prefault == false);
    CHECK(cfg.resize_file == false);
    CHECK(cfg.max_heap_size == 0);
    CHECK(cfg.tier_path == NULL);
    CHECK(cfg.tier_size == 0);
    CHECK(cfg.tier_promote_after == 0);
    CHECK(cfg.tier_write_queue == (size_t)8 << 20);
    CHECK_ST(segcache_config_default(NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "config") != NULL);
}

static void test_open_errors(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 1u << 20;
    cfg.segment_size = 64u << 10;
    segcache_t *c = (segcache_t *)&cfg; /* any non-NULL value: open must reset it to NULL */

    CHECK_ST(segcache_open(NULL, &c), SEGCACHE_INVALID_ARGUMENT);
    CHECK(c == NULL);
    CHECK_ST(segcache_open(&cfg, NULL), SEGCACHE_INVALID_ARGUMENT);

    segcache_config_t bad = cfg;
    bad.eviction = 99;
    c = (segcache_t *)&cfg;
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_ARGUMENT);
    CHECK(c == NULL);
    CHECK(strstr(segcache_last_error(), "policy") != NULL);

    bad = cfg;
    bad.segment_size = 1000;
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_CONFIG);
    CHECK(strstr(segcache_last_error(), "segment_size") != NULL);
    CHECK(c == NULL);

    bad = cfg;
    bad.shards = 3;
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_CONFIG);
    CHECK(strstr(segcache_last_error(), "shards") != NULL);

    bad = cfg;
    bad.hash_power = 2;
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_CONFIG);
    CHECK(strstr(segcache_last_error(), "hash_power") != NULL);

    bad = cfg;
    bad.heap_size = 4096;
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_CONFIG);
    CHECK(strstr(segcache_last_error(), "heap_size") != NULL);

    bad = cfg;
    bad.path = "";
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_ARGUMENT);

    /* Every policy opens. */
    for (uint32_t p = SEGCACHE_POLICY_NONE; p <= SEGCACHE_POLICY_S3FIFO; p++) {
        segcache_config_t ok = cfg;
        ok.eviction = p;
        ok.hash_power = 10;
        ok.shards = 2;
        c = NULL;
        CHECK_ST(segcache_open(&ok, &c), SEGCACHE_OK);
        CHECK(c != NULL);
        CHECK_ST(segcache_set(c, K("k"), K("v"), 0, 0), SEGCACHE_OK);
        CHECK_ST(segcache_close(c), SEGCACHE_OK);
    }

    /* A heap the OS cannot give: refused with a status, never an abort. */
    { /* heap larger than the address space -> MAP_FAILED */
        bad = cfg;
        bad.heap_size = (size_t)1 << 62;
        bad.segment_size = 4u << 20;
        bad.hash_power = 16;
        bad.shards = 1;
        segcache_status_t st = segcache_open(&bad, &c);
        CHECK(st == SEGCACHE_MAP_FAILED || st == SEGCACHE_INVALID_CONFIG);
        CHECK(c == NULL);
    }
}

static void test_set_get(void) {
    segcache_t *c = open_small(0);
    char buf[256];
    segcache_meta_t meta;
    size_t len = 12345;

    CHECK_ST(segcache_get(c, K("absent"), (uint8_t *)buf, sizeof buf, &len, NULL), SEGCACHE_NOT_FOUND);
    CHECK(len == 12345); /* untouched on a miss */

    CHECK_ST(segcache_set(c, K("hello"), K("world"), 42, 0), SEGCACHE_OK);
    memset(&meta, 0xFF, sizeof meta);
    CHECK_ST(get_str(c, "hello", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "world") == 0);
    CHECK(meta.flags == 42);
    CHECK(meta.ttl == 0);
    CHECK(meta.expire_at == 0);
    CHECK(meta.cas != 0);

    /* A second set replaces the value and changes the CAS. */
    uint64_t cas1 = meta.cas;
    CHECK_ST(segcache_set(c, K("hello"), K("there!"), 7, 0), SEGCACHE_OK);
    CHECK_ST(get_str(c, "hello", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "there!") == 0 && meta.flags == 7 && meta.cas != cas1);

    /* Buffer too small: needed length reported, buffer untouched. */
    memset(buf, 'x', sizeof buf);
    len = 0;
    CHECK_ST(segcache_get(c, K("hello"), (uint8_t *)buf, 3, &len, &meta), SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(len == 6);
    CHECK(buf[0] == 'x' && buf[1] == 'x' && buf[2] == 'x');
    CHECK(meta.flags == 7);
    CHECK(strstr(segcache_last_error(), "buffer") != NULL);
    /* Length query with a NULL buffer. */
    len = 0;
    CHECK_ST(segcache_get(c, K("hello"), NULL, 0, &len, NULL), SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(len == 6);
    /* Exact fit. */
    CHECK_ST(segcache_get(c, K("hello"), (uint8_t *)buf, 6, &len, NULL), SEGCACHE_OK);
    CHECK(len == 6 && memcmp(buf, "there!", 6) == 0);

    /* Empty value (NULL pointer allowed with length 0), read with a NULL buffer. */
    CHECK_ST(segcache_set(c, K("empty"), NULL, 0, 1, 0), SEGCACHE_OK);
    len = 99;
    CHECK_ST(segcache_get(c, K("empty"), NULL, 0, &len, &meta), SEGCACHE_OK);
    CHECK(len == 0 && meta.flags == 1);

    /* Binary keys and values, NUL bytes included. */
    const uint8_t bkey[] = {0, 1, 2, 0, 255};
    const uint8_t bval[] = {0, 0, 7, 0};
    uint8_t out[8];
    CHECK_ST(segcache_set(c, bkey, sizeof bkey, bval, sizeof bval, 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_get(c, bkey, sizeof bkey, out, sizeof out, &len, NULL), SEGCACHE_OK);
    CHECK(len == sizeof bval && memcmp(out, bval, sizeof bval) == 0);
    CHECK_ST(segcache_get(c, bkey, 4, out, sizeof out, &len, NULL), SEGCACHE_NOT_FOUND);

    /* Longest key works; one more byte is KEY_TOO_LONG everywhere. */
    char longkey[SEGCACHE_MAX_KEY_LEN + 2];
    memset(longkey, 'k', sizeof longkey);
    CHECK_ST(segcache_set(c, (uint8_t *)longkey, SEGCACHE_MAX_KEY_LEN, K("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_get(c, (uint8_t *)longkey, SEGCACHE_MAX_KEY_LEN, (uint8_t *)buf, sizeof buf, &len, NULL), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, (uint8_t *)longkey, SEGCACHE_MAX_KEY_LEN + 1, K("v"), 0, 0), SEGCACHE_KEY_TOO_LONG);
    CHECK(strstr(segcache_last_error(), "too long") != NULL);
    CHECK_ST(segcache_get(c, (uint8_t *)longkey, SEGCACHE_MAX_KEY_LEN + 1, (uint8_t *)buf, sizeof buf, &len, NULL), SEGCACHE_KEY_TOO_LONG);
    CHECK_ST(segcache_delete(c, (uint8_t *)longkey, SEGCACHE_MAX_KEY_LEN + 1), SEGCACHE_KEY_TOO_LONG);

    /* contains */
    CHECK_ST(segcache_contains(c, K("hello")), SEGCACHE_OK);
    CHECK_ST(segcache_contains(c, K("nope")), SEGCACHE_NOT_FOUND);

    size_t n = 0;
    CHECK_ST(segcache_len(c, &n), SEGCACHE_OK);
    CHECK(n == 4);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_too_large(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 64u << 10;
    cfg.segment_size = 4096;
    cfg.shards = 1;
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    char *big = calloc(1, 8192);
    CHECK_ST(segcache_set(c, K("big"), (uint8_t *)big, 8192, 0, 0), SEGCACHE_TOO_LARGE);
    CHECK(strstr(segcache_last_error(), "too large") != NULL);
    CHECK_ST(segcache_set(c, K("ok"), (uint8_t *)big, 1000, 0, 0), SEGCACHE_OK);
    /* append that would outgrow the segment */
    CHECK_ST(segcache_append(c, K("ok"), (uint8_t *)big, 4000), SEGCACHE_TOO_LARGE);
    free(big);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_no_memory(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 64u << 10;
    cfg.segment_size = 4096;
    cfg.shards = 1;
    cfg.eviction = SEGCACHE_POLICY_NONE;
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    uint8_t val[500] = {0};
    segcache_status_t st = SEGCACHE_OK;
    int i;
    for (i = 0; i < 10000 && st == SEGCACHE_OK; i++) {
        char key[32];
        snprintf(key, sizeof key, "fill-%d", i);
        st = segcache_set(c, K(key), val, sizeof val, 0, 0);
    }
    CHECK_ST(st, SEGCACHE_NO_MEMORY);
    CHECK(i > 10 && i < 10000);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_bad_arguments(void) {
    segcache_t *c = open_small(0);
    uint8_t buf[16];
    size_t len;
    segcache_meta_t meta;
    segcache_stats_t stats;
    uint64_t u64;
    uint32_t u32;

    /* NULL handle: every function that takes one. */
    CHECK_ST(segcache_close(NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "NULL") != NULL);
    CHECK_ST(segcache_advance_clock(NULL, 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get(NULL, K("k"), buf, sizeof buf, &len, &meta), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_with(NULL, K("k"), NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_many(NULL, NULL, NULL, 0, NULL, NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_contains(NULL, K("k")), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_and_touch(NULL, K("k"), 0, buf, sizeof buf, &len, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_stats(NULL, &stats), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_len(NULL, &len), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_now(NULL, &u32), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_set(NULL, K("k"), K("v"), 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_add(NULL, K("k"), K("v"), 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_replace(NULL, K("k"), K("v"), 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_cas(NULL, K("k"), K("v"), 0, 0, 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_append(NULL, K("k"), K("v")), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_prepend(NULL, K("k"), K("v")), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_incr(NULL, K("k"), 1, &u64), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_decr(NULL, K("k"), 1, &u64), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_delete(NULL, K("k")), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_touch(NULL, K("k"), 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_flush(NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_flush_after(NULL, 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_expire(NULL, NULL), SEGCACHE_INVALID_ARGUMENT);

    /* Pointers that are not a live handle: misaligned, or a foreign object. */
    alignas(16) unsigned char fake[256];
    memset(fake, 0, sizeof fake);
    CHECK_ST(segcache_set((segcache_t *)(void *)fake, K("k"), K("v"), 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "not a live") != NULL);
    CHECK_ST(segcache_close((segcache_t *)(void *)fake), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get((segcache_t *)(void *)(fake + 1), K("k"), buf, sizeof buf, &len, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "misaligned") != NULL);

    /* NULL and empty keys. */
    CHECK_ST(segcache_set(c, NULL, 1, K("v"), 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "key is NULL") != NULL);
    CHECK_ST(segcache_set(c, (const uint8_t *)"k", 0, K("v"), 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "empty") != NULL);
    CHECK_ST(segcache_get(c, NULL, 0, buf, sizeof buf, &len, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_with(c, (const uint8_t *)"k", 0, NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_contains(c, NULL, 3), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_add(c, NULL, 3, K("v"), 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_replace(c, (const uint8_t *)"k", 0, K("v"), 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_cas(c, NULL, 1, K("v"), 0, 0, 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_append(c, NULL, 1, K("v")), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_prepend(c, (const uint8_t *)"k", 0, K("v")), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_incr(c, NULL, 1, 1, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_decr(c, (const uint8_t *)"k", 0, 1, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_delete(c, NULL, 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_touch(c, (const uint8_t *)"k", 0, 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_and_touch(c, NULL, 1, 1, buf, sizeof buf, &len, NULL), SEGCACHE_INVALID_ARGUMENT);

    /* NULL value with a length, NULL buffer with a length, missing out-pointers. */
    CHECK_ST(segcache_set(c, K("k"), NULL, 5, 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "value is NULL") != NULL);
    CHECK_ST(segcache_add(c, K("k"), NULL, 5, 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_append(c, K("k"), NULL, 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_set(c, K("k"), K("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_get(c, K("k"), NULL, 10, &len, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "buf is NULL") != NULL);
    CHECK_ST(segcache_get(c, K("k"), buf, sizeof buf, NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_and_touch(c, K("k"), 0, buf, sizeof buf, NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_stats(c, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_len(c, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_now(c, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_with(c, K("k"), NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "callback") != NULL);
    CHECK_ST(segcache_get_many(c, NULL, NULL, 0, NULL, NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    /* The system clock cannot be advanced. */
    CHECK_ST(segcache_advance_clock(c, 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "system clock") != NULL);

    /* After all that the handle still works and nothing was stored by the refused calls. */
    size_t n = 0;
    CHECK_ST(segcache_len(c, &n), SEGCACHE_OK);
    CHECK(n == 1);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_add_replace_cas(void) {
    segcache_t *c = open_small(0);
    char buf[64];
    segcache_meta_t meta;
    CHECK_ST(segcache_replace(c, K("k"), K("r"), 0, 0), SEGCACHE_NOT_STORED);
    CHECK(strcmp(segcache_last_error(), "not stored") == 0);
    CHECK_ST(segcache_add(c, K("k"), K("a"), 1, 0), SEGCACHE_OK);
    CHECK_ST(segcache_add(c, K("k"), K("b"), 2, 0), SEGCACHE_NOT_STORED);
    CHECK_ST(get_str(c, "k", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "a") == 0 && meta.flags == 1);
    CHECK_ST(segcache_replace(c, K("k"), K("r"), 3, 0), SEGCACHE_OK);
    CHECK_ST(get_str(c, "k", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "r") == 0 && meta.flags == 3);

    uint64_t cas = meta.cas;
    CHECK_ST(segcache_cas(c, K("k"), K("c1"), 4, 0, cas + 1000), SEGCACHE_EXISTS);
    CHECK(strstr(segcache_last_error(), "exists") != NULL);
    CHECK_ST(segcache_cas(c, K("k"), K("c1"), 4, 0, cas), SEGCACHE_OK);
    CHECK_ST(segcache_cas(c, K("k"), K("c2"), 5, 0, cas), SEGCACHE_EXISTS); /* stale now */
    CHECK_ST(get_str(c, "k", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "c1") == 0 && meta.flags == 4 && meta.cas != cas);
    CHECK_ST(segcache_cas(c, K("absent"), K("x"), 0, 0, 1), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_append_prepend(void) {
    segcache_t *c = open_small(0);
    char buf[64];
    segcache_meta_t meta;
    CHECK_ST(segcache_append(c, K("s"), K("x")), SEGCACHE_NOT_STORED);
    CHECK_ST(segcache_prepend(c, K("s"), K("x")), SEGCACHE_NOT_STORED);
    CHECK_ST(segcache_set(c, K("s"), K("mid"), 9, 0), SEGCACHE_OK);
    CHECK_ST(segcache_append(c, K("s"), K("-end")), SEGCACHE_OK);
    CHECK_ST(segcache_prepend(c, K("s"), K("start-")), SEGCACHE_OK);
    CHECK_ST(segcache_append(c, K("s"), NULL, 0), SEGCACHE_OK);
    CHECK_ST(get_str(c, "s", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "start-mid-end") == 0);
    CHECK(meta.flags == 9);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_incr_decr(void) {
    segcache_t *c = open_small(0);
    char buf[64];
    uint64_t v = 0;
    CHECK_ST(segcache_incr(c, K("n"), 1, &v), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_decr(c, K("n"), 1, &v), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_set(c, K("n"), K("10"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_incr(c, K("n"), 5, &v), SEGCACHE_OK);
    CHECK(v == 15);
    CHECK_ST(segcache_incr(c, K("n"), 1, NULL), SEGCACHE_OK);
    CHECK_ST(get_str(c, "n", buf, sizeof buf, NULL), SEGCACHE_OK);
    CHECK(strcmp(buf, "16") == 0);
    CHECK_ST(segcache_decr(c, K("n"), 6, &v), SEGCACHE_OK);
    CHECK(v == 10);
    CHECK_ST(segcache_decr(c, K("n"), 100, &v), SEGCACHE_OK);
    CHECK(v == 0); /* stops at zero */
    CHECK_ST(segcache_set(c, K("big"), K("18446744073709551615"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_incr(c, K("big"), 2, &v), SEGCACHE_OK);
    CHECK(v == 1); /* wraps at 2^64 */
    CHECK_ST(segcache_set(c, K("word"), K("abc"), 0, 0), SEGCACHE_OK);
    v = 77;
    CHECK_ST(segcache_incr(c, K("word"), 1, &v), SEGCACHE_NOT_NUMERIC);
    CHECK(v == 77);
    CHECK(strstr(segcache_last_error(), "non-numeric") != NULL);
    CHECK_ST(segcache_decr(c, K("word"), 1, &v), SEGCACHE_NOT_NUMERIC);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_delete_touch_ttl(void) {
    const uint32_t t0 = 1700000000;
    segcache_t *c = open_small(t0);
    char buf[64];
    segcache_meta_t meta;
    size_t len;
    uint32_t now = 0;

    CHECK_ST(segcache_now(c, &now), SEGCACHE_OK);
    CHECK(now == t0);
    CHECK_ST(segcache_set(c, K("t"), K("v"), 0, 10), SEGCACHE_OK);
    CHECK_ST(get_str(c, "t", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(meta.ttl == 10 && meta.expire_at == t0 + 10);
    CHECK_ST(segcache_advance_clock(c, 4), SEGCACHE_OK);
    CHECK_ST(segcache_now(c, &now), SEGCACHE_OK);
    CHECK(now == t0 + 4);
    CHECK_ST(get_str(c, "t", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(meta.ttl == 6 && meta.expire_at == t0 + 10);

    /* touch extends the TTL; 0 makes it permanent */
    CHECK_ST(segcache_touch(c, K("t"), 100), SEGCACHE_OK);
    CHECK_ST(segcache_advance_clock(c, 50), SEGCACHE_OK);
    CHECK_ST(get_str(c, "t", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(meta.ttl == 50 && strcmp(buf, "v") == 0);
    CHECK_ST(segcache_touch(c, K("t"), 0), SEGCACHE_OK);
    CHECK_ST(segcache_advance_clock(c, 1000), SEGCACHE_OK);
    CHECK_ST(get_str(c, "t", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(meta.ttl == 0 && meta.expire_at == 0);
    CHECK_ST(segcache_touch(c, K("absent"), 5), SEGCACHE_NOT_FOUND);

    /* expiry */
    CHECK_ST(segcache_set(c, K("short"), K("v"), 0, 2), SEGCACHE_OK);
    CHECK_ST(segcache_contains(c, K("short")), SEGCACHE_OK);
    CHECK_ST(segcache_advance_clock(c, 3), SEGCACHE_OK);
    CHECK_ST(segcache_contains(c, K("short")), SEGCACHE_NOT_FOUND);
    CHECK_ST(get_str(c, "short", buf, sizeof buf, &meta), SEGCACHE_NOT_FOUND);

    /* get_and_touch: reads and sets the TTL in one step */
    CHECK_ST(segcache_set(c, K("gat"), K("value"), 3, 5), SEGCACHE_OK);
    CHECK_ST(segcache_get_and_touch(c, K("gat"), 60, (uint8_t *)buf, sizeof buf, &len, &meta), SEGCACHE_OK);
    CHECK(len == 5 && memcmp(buf, "value", 5) == 0 && meta.flags == 3 && meta.ttl == 60);
    CHECK_ST(segcache_advance_clock(c, 30), SEGCACHE_OK);
    CHECK_ST(get_str(c, "gat", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(meta.ttl == 30);
    CHECK_ST(segcache_get_and_touch(c, K("gat"), 0, (uint8_t *)buf, 2, &len, NULL), SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(len == 5);
    CHECK_ST(segcache_get_and_touch(c, K("absent"), 10, (uint8_t *)buf, sizeof buf, &len, NULL), SEGCACHE_NOT_FOUND);

    /* delete */
    CHECK_ST(segcache_delete(c, K("t")), SEGCACHE_OK);
    CHECK_ST(segcache_delete(c, K("t")), SEGCACHE_NOT_FOUND);
    CHECK_ST(get_str(c, "t", buf, sizeof buf, &meta), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_flush_expire(void) {
    const uint32_t t0 = 1700000000;
    segcache_t *c = open_small(t0);
    char key[32];
    size_t n = 0, removed = 12345;
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "f%d", i);
        CHECK_ST(segcache_set(c, K(key), K("v"), 0, 0), SEGCACHE_OK);
    }
    CHECK_ST(segcache_flush(c), SEGCACHE_OK);
    CHECK_ST(segcache_len(c, &n), SEGCACHE_OK);
    CHECK(n == 0);
    CHECK_ST(segcache_contains(c, K("f1")), SEGCACHE_NOT_FOUND);

    /* flush_after(0) is flush now */
    CHECK_ST(segcache_set(c, K("a"), K("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_flush_after(c, 0), SEGCACHE_OK);
    CHECK_ST(segcache_contains(c, K("a")), SEGCACHE_NOT_FOUND);

    /* flush_after(delay): items stored before stay until the delay passes */
    CHECK_ST(segcache_set(c, K("b"), K("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_flush_after(c, 10), SEGCACHE_OK);
    { /* flush_after keeps items until the delay passes */
        CHECK_ST(segcache_advance_clock(c, 5), SEGCACHE_OK);
        CHECK_ST(segcache_contains(c, K("b")), SEGCACHE_OK);
    }
    CHECK_ST(segcache_advance_clock(c, 20), SEGCACHE_OK);
    CHECK_ST(segcache_contains(c, K("b")), SEGCACHE_NOT_FOUND);

    /* expire frees what has expired */
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof key, "e%d", i);
        CHECK_ST(segcache_set(c, K(key), K("v"), 0, 5), SEGCACHE_OK);
    }
    CHECK_ST(segcache_set(c, K("keep"), K("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_expire(c, &removed), SEGCACHE_OK);
    CHECK(removed == 0); /* nothing has expired yet */
    CHECK_ST(segcache_advance_clock(c, 200), SEGCACHE_OK);
    CHECK_ST(segcache_expire(c, &removed), SEGCACHE_OK);
    CHECK(removed <= 200);
    CHECK_ST(segcache_expire(c, NULL), SEGCACHE_OK);
    CHECK_ST(segcache_contains(c, K("e1")), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_contains(c, K("keep")), SEGCACHE_OK);
    { /* expire reports the expired items it removed */
        segcache_stats_t st;
        CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
        CHECK(st.expired_items >= 200);
        CHECK(st.items == 1);
    }
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

struct seen {
    int calls;
    char value[64];
    segcache_meta_t meta;
    int hit[8];
};

static void on_item(void *ud, const segcache_item_t *item) {
    struct seen *s = ud;
    s->calls++;
    size_t n = item->value_len < sizeof s->value - 1 ? item->value_len : sizeof s->value - 1;
    memcpy(s->value, item->value, n);
    s->value[n] = '\0';
    s->meta = item->meta;
    if (item->key_len != 3 || memcmp(item->key, "zc1", 3) != 0) s->calls += 1000;
}

static void on_many(void *ud, size_t index, const segcache_item_t *item) {
    struct seen *s = ud;
    s->calls++;
    if (index < 8) s->hit[index] = (int)item->value_len;
}

static void test_get_with_and_many(void) {
    segcache_t *c = open_small(0);
    struct seen s;
    memset(&s, 0, sizeof s);
    CHECK_ST(segcache_set(c, K("zc1"), K("zero-copy"), 11, 0), SEGCACHE_OK);
    CHECK_ST(segcache_get_with(c, K("zc1"), on_item, &s), SEGCACHE_OK);
    CHECK(s.calls == 1 && strcmp(s.value, "zero-copy") == 0 && s.meta.flags == 11);
    CHECK_ST(segcache_get_with(c, K("zc2"), on_item, &s), SEGCACHE_NOT_FOUND);
    CHECK(s.calls == 1);

    const char *names[6] = {"m0", "m1", "missing", "m3", "nope", "m5"};
    const uint8_t *keys[6];
    size_t lens[6];
    for (int i = 0; i < 6; i++) {
        keys[i] = (const uint8_t *)names[i];
        lens[i] = strlen(names[i]);
        if (names[i][0] == 'm' && names[i][1] != 'i') {
            char val[16];
            memset(val, 'x', sizeof val);
            CHECK_ST(segcache_set(c, keys[i], lens[i], (uint8_t *)val, (size_t)(i + 1), 0, 0), SEGCACHE_OK);
        }
    }
    memset(&s, 0, sizeof s);
    size_t hits = 99;
    CHECK_ST(segcache_get_many(c, keys, lens, 6, on_many, &s, &hits), SEGCACHE_OK);
    CHECK(hits == 4 && s.calls == 4);
    CHECK(s.hit[0] == 1 && s.hit[1] == 2 && s.hit[2] == 0 && s.hit[3] == 4 && s.hit[4] == 0 && s.hit[5] == 6);
    /* n == 0: nothing to do, NULL arrays allowed */
    CHECK_ST(segcache_get_many(c, NULL, NULL, 0, on_many, &s, &hits), SEGCACHE_OK);
    CHECK(hits == 0);
    CHECK_ST(segcache_get_many(c, keys, lens, 6, on_many, &s, NULL), SEGCACHE_OK);
    /* a bad key anywhere refuses the whole call before any callback */
    memset(&s, 0, sizeof s);
    lens[4] = 0;
    CHECK_ST(segcache_get_many(c, keys, lens, 6, on_many, &s, &hits), SEGCACHE_INVALID_ARGUMENT);
    lens[4] = SEGCACHE_MAX_KEY_LEN + 1;
    CHECK_ST(segcache_get_many(c, keys, lens, 6, on_many, &s, &hits), SEGCACHE_KEY_TOO_LONG);
    lens[4] = 4;
    keys[4] = NULL;
    CHECK_ST(segcache_get_many(c, keys, lens, 6, on_many, &s, &hits), SEGCACHE_INVALID_ARGUMENT);
    CHECK(s.calls == 0);
    CHECK_ST(segcache_get_many(c, NULL, lens, 6, on_many, &s, &hits), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_stats(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 4u << 20;
    cfg.segment_size = 64u << 10;
    cfg.shards = 2;
    cfg.eviction = SEGCACHE_POLICY_FIFO;
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    segcache_stats_t before, after;
    memset(&before, 0xFF, sizeof before);
    CHECK_ST(segcache_stats(c, &before), SEGCACHE_OK);
    CHECK(before.items == 0);
    CHECK(before.shards == 2);
    char key[16], buf[16];
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof key, "s%d", i);
        CHECK_ST(segcache_set(c, K(key), K("v"), 0, 0), SEGCACHE_OK);
    }
    for (int i = 0; i < 30; i++) {
        snprintf(key, sizeof key, "s%d", i);
        CHECK_ST(get_str(c, key, buf, sizeof buf, NULL), SEGCACHE_OK);
    }
    CHECK_ST(get_str(c, "absent", buf, sizeof buf, NULL), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_delete(c, K("s0")), SEGCACHE_OK);
    CHECK_ST(segcache_stats(c, &after), SEGCACHE_OK);
    CHECK(after.items == 49);
    CHECK(after.get_hits - before.get_hits >= 30);
    size_t n = 0;
    CHECK_ST(segcache_len(c, &n), SEGCACHE_OK);
    CHECK(n == 49);
    { /* full stats: sizes, policy, sets, deletes, misses */
        CHECK(after.policy == SEGCACHE_POLICY_FIFO);
        CHECK(after.heap_bytes > 0 && after.heap_bytes <= cfg.heap_size);
        CHECK(after.segment_size == cfg.segment_size);
        CHECK(after.segments_total >= 2 && after.segments_free < after.segments_total);
        CHECK(after.sets - before.sets == 50);
        CHECK(after.deletes - before.deletes == 1);
        CHECK(after.get_misses - before.get_misses >= 1);
        CHECK(after.bytes > 49 * 3);
    }
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_panic(void) {
    CHECK_ST(segcache_debug_panic(), SEGCACHE_PANIC);
    CHECK(strstr(segcache_last_error(), "panic") != NULL);
    /* the library keeps working */
    segcache_t *c = open_small(0);
    CHECK_ST(segcache_set(c, K("after"), K("panic"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_contains(c, K("after")), SEGCACHE_OK);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* ---- several threads at once ---- */
#define THREADS 4
#define PER_THREAD 5000

struct worker {
    segcache_t *c;
    int id;
    int errors;
    char last_error[128];
};

static void *work(void *arg) {
    struct worker *w = arg;
    char key[32], val[32], buf[64];
    for (int i = 0; i < PER_THREAD; i++) {
        snprintf(key, sizeof key, "t%d-%d", w->id, i);
        snprintf(val, sizeof val, "v%d-%d", w->id, i * 7);
        if (segcache_set(w->c, K(key), K(val), (uint32_t)w->id, 0) != SEGCACHE_OK) w->errors++;
        segcache_meta_t meta;
        if (get_str(w->c, key, buf, sizeof buf, &meta) != SEGCACHE_OK || strcmp(buf, val) != 0 ||
            meta.flags != (uint32_t)w->id)
            w->errors++;
        if (segcache_incr(w->c, K("shared-counter"), 1, NULL) != SEGCACHE_OK) w->errors++;
        /* read other threads' keys too: a hit must hold that thread's value */
        snprintf(key, sizeof key, "t%d-%d", (w->id + 1) % THREADS, i);
        if (get_str(w->c, key, buf, sizeof buf, NULL) == SEGCACHE_OK) {
            snprintf(val, sizeof val, "v%d-%d", (w->id + 1) % THREADS, i * 7);
            if (strcmp(buf, val) != 0) w->errors++;
        }
    }
    /* each thread has its own last-error message */
    segcache_set(w->c, NULL, 0, NULL, 0, 0, 0);
    snprintf(w->last_error, sizeof w->last_error, "%s", segcache_last_error());
    return NULL;
}

static void test_threads(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 32u << 20;
    cfg.segment_size = 1u << 20;
    cfg.shards = 8;
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("shared-counter"), K("0"), 0, 0), SEGCACHE_OK);
    segcache_get(NULL, NULL, 0, NULL, 0, NULL, NULL); /* main thread's own message */
    pthread_t th[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.c = c, .id = i};
        CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        CHECK(w[i].errors == 0);
        CHECK(strstr(w[i].last_error, "key is NULL") != NULL);
    }
    CHECK(strstr(segcache_last_error(), "cache handle is NULL") != NULL);
    uint64_t v = 0;
    CHECK_ST(segcache_incr(c, K("shared-counter"), 0, &v), SEGCACHE_OK);
    CHECK(v == (uint64_t)THREADS * PER_THREAD); /* incr is atomic */
    size_t n = 0;
    CHECK_ST(segcache_len(c, &n), SEGCACHE_OK);
    CHECK(n == (size_t)THREADS * PER_THREAD + 1);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* ---- persistence through the C API ---- */
/* Resident bytes of this process (/proc/self/statm). */
static size_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f == NULL) return 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* prefault: the heap is resident when segcache_open returns, and the cache works as any other. */
static void test_prefault(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 32u << 20;
    cfg.shards = 1;
    cfg.prefault = true;
    size_t before = resident_bytes();
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    CHECK(resident_bytes() - before >= (24u << 20));
    CHECK_ST(segcache_set(c, K("k"), K("v"), 0, 0), SEGCACHE_OK);
    char buf[4];
    size_t len = 0;
    CHECK_ST(segcache_get(c, K("k"), (uint8_t *)buf, sizeof buf, &len, NULL), SEGCACHE_OK);
    CHECK(len == 1 && buf[0] == 'v');
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* max_heap_size: the limit starts at heap_size and moves up to the room laid out and back while
 * the cache runs, keeping what it holds; past the room, or below heap_size, or with prefault,
 * the config is refused. */
static void test_memory_limit_grows(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 2u << 20;
    cfg.max_heap_size = 8u << 20;
    cfg.segment_size = 64u << 10;
    cfg.shards = 2;
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    size_t limit = 0;
    CHECK_ST(segcache_memory_limit(c, &limit), SEGCACHE_OK);
    CHECK(limit == (2u << 20));
    char key[32], value[100];
    memset(value, 'v', sizeof value);
    size_t held[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 50000; i++) {
            int n = snprintf(key, sizeof key, "key-%d", i);
            CHECK_ST(segcache_set(c, (const uint8_t *)key, (size_t)n, (const uint8_t *)value, sizeof value, 0, 0), SEGCACHE_OK);
        }
        for (int i = 0; i < 50000; i++) {
            int n = snprintf(key, sizeof key, "key-%d", i);
            held[round] += segcache_contains(c, (const uint8_t *)key, (size_t)n) == SEGCACHE_OK;
        }
        if (round == 0) CHECK_ST(segcache_set_memory_limit(c, 8u << 20), SEGCACHE_OK);
    }
    CHECK(held[1] > 2 * held[0]);
    CHECK_ST(segcache_memory_limit(c, &limit), SEGCACHE_OK);
    CHECK(limit == (8u << 20));
    CHECK_ST(segcache_set_memory_limit(c, 16u << 20), SEGCACHE_INVALID_CONFIG);
    CHECK_ST(segcache_set_memory_limit(c, 2u << 20), SEGCACHE_OK);
    CHECK_ST(segcache_memory_limit(NULL, &limit), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);

    cfg.max_heap_size = 1u << 20;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_INVALID_CONFIG);
    cfg.max_heap_size = 8u << 20;
    cfg.prefault = true;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_INVALID_CONFIG);
}

/* segcache_touch_ahead faults the heap in a few segments ahead of the writers: memory grows by
 * those segments alone, a second call finds nothing new, and once the writers have used every
 * segment it reports done. NULL outputs are allowed; a prefaulted cache is done at once. */
static void test_touch_ahead(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 32u << 20;
    cfg.segment_size = 2u << 20;
    cfg.shards = 1;
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    size_t before = resident_bytes(), faulted = 99;
    bool done = true;
    CHECK_ST(segcache_touch_ahead(c, 2, &faulted, &done), SEGCACHE_OK);
    if (done) {
        CHECK(faulted == 0); /* a kernel that cannot populate memory (Linux before 5.14) */
    } else {
        CHECK(faulted == 2);
        size_t grew = resident_bytes() - before;
        CHECK(grew >= (4u << 20) && grew < (12u << 20));
        CHECK_ST(segcache_touch_ahead(c, 2, &faulted, &done), SEGCACHE_OK);
        CHECK(faulted == 0 && !done);
    }
    CHECK_ST(segcache_touch_ahead(c, 2, NULL, NULL), SEGCACHE_OK);
    /* 48 MiB of items through a 32 MiB heap: every segment is used. */
    static uint8_t value[100000];
    char key[32];
    for (int i = 0; i < 480; i++) {
        snprintf(key, sizeof key, "ahead-%d", i);
        CHECK_ST(segcache_set(c, K(key), value, sizeof value, 0, 0), SEGCACHE_OK);
    }
    CHECK_ST(segcache_touch_ahead(c, 2, &faulted, &done), SEGCACHE_OK);
    CHECK(done && faulted == 0);
    CHECK_ST(segcache_touch_ahead(NULL, 2, &faulted, &done), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_touch_ahead(c, 2, (size_t *)(void *)((char *)&faulted + 1), NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);

    cfg.prefault = true;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    CHECK_ST(segcache_touch_ahead(c, 2, &faulted, &done), SEGCACHE_OK);
    CHECK(done && faulted == 0);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* How many of test_persistence's items "p<i>" -> "value-<i>" with flags i are in `c`. */
static int persisted_items(segcache_t *c) {
    char key[32], val[32], buf[64];
    int ok = 0;
    for (int i = 0; i < 1000; i++) {
        segcache_meta_t meta;
        snprintf(key, sizeof key, "p%d", i);
        snprintf(val, sizeof val, "value-%d", i);
        if (get_str(c, key, buf, sizeof buf, &meta) == SEGCACHE_OK && strcmp(buf, val) == 0 &&
            meta.flags == (uint32_t)i)
            ok++;
    }
    return ok;
}

static void test_persistence(void) {
    char dir[] = "/tmp/segcache-c-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/cache.dat", dir);

    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 4u << 20;
    cfg.segment_size = 256u << 10;
    cfg.shards = 2;
    cfg.path = path;
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    char key[32], val[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "p%d", i);
        snprintf(val, sizeof val, "value-%d", i);
        CHECK_ST(segcache_set(c, K(key), K(val), (uint32_t)i, 0), SEGCACHE_OK);
    }
    { /* a second open of a file in use -> LOCKED */
        segcache_t *c2 = NULL;
        CHECK_ST(segcache_open(&cfg, &c2), SEGCACHE_LOCKED);
        CHECK(c2 == NULL);
    }
    CHECK_ST(segcache_close(c), SEGCACHE_OK);

    /* warm restart keeps every item: the whole heap checked at open, then checked lazily */
    for (int lazy = 0; lazy <= 1; lazy++) {
        cfg.lazy_verify = lazy;
        c = NULL;
        CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
        CHECK(persisted_items(c) == 1000);
        CHECK_ST(segcache_close(c), SEGCACHE_OK);
    }
    cfg.lazy_verify = false;

    /* another configuration over the same file */
    { /* a file of another configuration -> BAD_FILE, reset_bad_file starts empty */
        segcache_config_t other = cfg;
        other.segment_size = 128u << 10;
        c = NULL;
        CHECK_ST(segcache_open(&other, &c), SEGCACHE_BAD_FILE);
        CHECK(c == NULL && strlen(segcache_last_error()) > 0);
        /* resize_file moves the items into a heap of the new sizes, and back */
        for (int back = 0; back <= 1; back++) {
            segcache_config_t sized = back ? cfg : other;
            sized.resize_file = true;
            c = NULL;
            CHECK_ST(segcache_open(&sized, &c), SEGCACHE_OK);
            CHECK(persisted_items(c) == 1000);
            CHECK_ST(segcache_close(c), SEGCACHE_OK);
            char aside[300];
            snprintf(aside, sizeof aside, "%s.resizing", path);
            CHECK(access(aside, F_OK) != 0);
        }
        {
            segcache_config_t shared = cfg;
            shared.multi_process = true;
            shared.resize_file = true;
            c = NULL;
            CHECK_ST(segcache_open(&shared, &c), SEGCACHE_INVALID_CONFIG);
            CHECK(c == NULL && strstr(segcache_last_error(), "resize_file") != NULL);
        }
        other.reset_bad_file = true;
        CHECK_ST(segcache_open(&other, &c), SEGCACHE_OK);
        size_t n = 99;
        CHECK_ST(segcache_len(c, &n), SEGCACHE_OK);
        CHECK(n == 0);
        CHECK_ST(segcache_close(c), SEGCACHE_OK);
    }

    /* garbage in the file */
    char junk_path[256];
    snprintf(junk_path, sizeof junk_path, "%s/junk.dat", dir);
    int fd = open(junk_path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    CHECK(fd >= 0);
    char junk[8192];
    memset(junk, 0x5A, sizeof junk);
    CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    close(fd);
    { /* a corrupt file -> BAD_FILE */
        segcache_config_t j = cfg;
        j.path = junk_path;
        c = NULL;
        CHECK_ST(segcache_open(&j, &c), SEGCACHE_BAD_FILE);
        CHECK(c == NULL);
    }
    { /* a path under a regular file -> IO_ERROR */
        /* junk.dat is a file, so no directory can exist (or be created) beneath it */
        char bad_path[300];
        snprintf(bad_path, sizeof bad_path, "%s/sub/cache.dat", junk_path);
        segcache_config_t m = cfg;
        m.path = bad_path;
        c = NULL;
        CHECK_ST(segcache_open(&m, &c), SEGCACHE_IO_ERROR);
        CHECK(c == NULL && strstr(segcache_last_error(), "junk.dat") != NULL);
    }
    unlink(junk_path);
    unlink(path);
    rmdir(dir);
}

/* ---- arguments too large to store: refused before anything is copied ---- */

/* The longest value `key` can hold in `c` with non-zero flags (found with sets; the key is left
 * holding it). */
static size_t max_value_len(segcache_t *c, const char *key, uint8_t *buf, size_t cap) {
    size_t lo = 0, hi = cap; /* lo fits; hi + 1 does not */
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (segcache_set(c, K(key), buf, mid, 5, 0) == SEGCACHE_OK) lo = mid;
        else hi = mid - 1;
    }
    CHECK_ST(segcache_set(c, K(key), buf, lo, 5, 0), SEGCACHE_OK);
    return lo;
}

/* A persistence file on a filesystem too small for the heap: segcache_open returns
 * SEGCACHE_NO_SPACE with the path and sizes in segcache_last_error() (never a SIGBUS later).
 * The small filesystem is a tmpfs mounted here, which needs root; without it, only sync is
 * checked. segcache_sync writes the heap to the file. */
static void test_no_space_and_sync(void) {
    char dir[] = "/tmp/segcache-c-space-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cmd[512], path[300];
    snprintf(path, sizeof path, "%s/cache.dat", dir);
    snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=20m tmpfs %s 2>/dev/null", dir);
    int mounted = system(cmd) == 0;
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.path = path;
    segcache_t *c = NULL;
    if (mounted) {
        cfg.heap_size = 64u << 20;
        CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_NO_SPACE);
        CHECK(c == NULL);
        CHECK(strstr(segcache_last_error(), path) != NULL);
        CHECK(strstr(segcache_last_error(), "free") != NULL);
        CHECK(strcmp(segcache_strerror(SEGCACHE_NO_SPACE), "unknown status") != 0);
        cfg.multi_process = true;
        CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_NO_SPACE);
        cfg.multi_process = false;
    } else {
        printf("test_no_space_and_sync: cannot mount a tmpfs (not root?): no-space not checked\n");
    }
    cfg.heap_size = 8u << 20;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    static char big[100000];
    memset(big, 'v', sizeof big);
    char key[32];
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof key, "k%d", i);
        CHECK_ST(segcache_set(c, K(key), (const uint8_t *)big, sizeof big, 0, 0), SEGCACHE_OK);
    }
    const char *marker = "a value only the heap holds";
    CHECK_ST(segcache_set(c, K("m"), K(marker), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_sync(c), SEGCACHE_OK);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    int found = 0;
    if (f) {
        static char page[1 << 16];
        size_t n, keep = 0, mlen = strlen(marker);
        while ((n = fread(page + keep, 1, sizeof page - keep, f)) > 0 && !found) {
            n += keep;
            for (size_t i = 0; i + mlen <= n && !found; i++) found = memcmp(page + i, marker, mlen) == 0;
            keep = mlen - 1;
            memmove(page, page + n - keep, keep);
        }
        fclose(f);
    }
    CHECK(found);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    CHECK_ST(segcache_sync(NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strlen(segcache_last_error()) > 0);
    unlink(path);
    if (mounted) {
        snprintf(cmd, sizeof cmd, "umount -l %s", dir);
        CHECK(system(cmd) == 0);
    }
    rmdir(dir);
}

static void test_oversized_arguments(void) {
    const size_t seg = 256u << 10;
    segcache_t *c = open_small(0);
    uint8_t *big = calloc(1, seg + 1);
    CHECK(big != NULL);
    memset(big, 'z', seg + 1);
    const size_t max = max_value_len(c, "m", big, seg + 1);
    CHECK(max > seg / 2 && max < seg);
    CHECK_ST(segcache_set(c, K("m"), big, max + 1, 5, 0), SEGCACHE_TOO_LARGE);

    char buf[64];
    segcache_meta_t meta;
    CHECK_ST(segcache_set(c, K("m"), K("old"), 5, 0), SEGCACHE_OK);
    /* the argument alone one byte over the largest value */
    CHECK_ST(segcache_append(c, K("m"), big, max + 1), SEGCACHE_TOO_LARGE);
    CHECK(strstr(segcache_last_error(), "too large") != NULL);
    CHECK_ST(segcache_prepend(c, K("m"), big, max + 1), SEGCACHE_TOO_LARGE);
    CHECK_ST(segcache_append(c, K("absent"), big, max + 1), SEGCACHE_TOO_LARGE);
    /* each part fits, the joined value is one byte over */
    CHECK_ST(segcache_append(c, K("m"), big, max - 3 + 1), SEGCACHE_TOO_LARGE);
    CHECK_ST(segcache_prepend(c, K("m"), big, max - 3 + 1), SEGCACHE_TOO_LARGE);
    CHECK_ST(get_str(c, "m", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "old") == 0 && meta.flags == 5);
    /* exactly the largest joined value still fits */
    CHECK_ST(segcache_append(c, K("m"), big, max - 3), SEGCACHE_OK);
    size_t len = 0;
    CHECK_ST(segcache_get(c, K("m"), NULL, 0, &len, NULL), SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(len == max);
    free(big);

    /* A terabyte argument: address space only (reads would see zero pages). The library must
     * refuse it by its length, without copying or allocating anything of its size: the old
     * append allocated old + new bytes first, which fails (and aborts) at this size. */
    const size_t huge = (size_t)1 << 40;
    void *map = mmap(NULL, huge, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) {
        /* valgrind caps the address space it manages; plain and ASan runs take this path */
        printf("test_oversized_arguments: no 1 TiB mapping here, huge-argument cases skipped\n");
    } else {
        const uint8_t *h = map;
        CHECK_ST(segcache_set(c, K("h"), K("small"), 7, 0), SEGCACHE_OK);
        CHECK_ST(segcache_append(c, K("h"), h, huge), SEGCACHE_TOO_LARGE);
        CHECK_ST(segcache_prepend(c, K("h"), h, huge), SEGCACHE_TOO_LARGE);
        CHECK_ST(segcache_append(c, K("absent"), h, huge), SEGCACHE_TOO_LARGE);
        CHECK_ST(segcache_set(c, K("h"), h, huge, 0, 0), SEGCACHE_TOO_LARGE);
        CHECK_ST(segcache_set(c, K("new"), h, huge, 0, 0), SEGCACHE_TOO_LARGE);
        CHECK_ST(segcache_add(c, K("new"), h, huge, 0, 0), SEGCACHE_TOO_LARGE);
        CHECK_ST(segcache_replace(c, K("h"), h, huge, 0, 0), SEGCACHE_TOO_LARGE);
        segcache_meta_t hm;
        CHECK_ST(get_str(c, "h", buf, sizeof buf, &hm), SEGCACHE_OK);
        CHECK(strcmp(buf, "small") == 0 && hm.flags == 7);
        CHECK_ST(segcache_cas(c, K("h"), h, huge, 0, 0, hm.cas), SEGCACHE_TOO_LARGE);
        CHECK_ST(get_str(c, "h", buf, sizeof buf, &meta), SEGCACHE_OK);
        CHECK(strcmp(buf, "small") == 0 && meta.flags == 7 && meta.cas == hm.cas);
        CHECK_ST(segcache_contains(c, K("new")), SEGCACHE_NOT_FOUND);
        munmap(map, huge);
    }
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* ---- rewrites of one key whose records have the same length but other header layouts ----
 * Client flags take 4 bytes of a record only when they are not 0, so `flags=1 "a"` and
 * `flags=0 "bbbbb"` make records of one length: every get must still return the last store. */

/* Whether `key` holds exactly `want` (`want_len` bytes) with `flags`; prints why not. */
static int holds(segcache_t *c, const char *key, const char *want, size_t want_len, uint32_t flags) {
    uint8_t buf[1024];
    size_t len = 0;
    segcache_meta_t meta;
    segcache_status_t st = segcache_get(c, K(key), buf, sizeof buf, &len, &meta);
    if (st != SEGCACHE_OK) {
        fprintf(stderr, "  get %s: %s, want \"%.*s\" flags %u\n", key, segcache_strerror(st), (int)want_len, want, flags);
        return 0;
    }
    if (len != want_len || memcmp(buf, want, len) != 0 || meta.flags != flags) {
        fprintf(stderr, "  get %s: \"%.*s\" flags %u, want \"%.*s\" flags %u\n", key, (int)len, (const char *)buf,
                meta.flags, (int)want_len, want, flags);
        return 0;
    }
    return 1;
}

#define HOLDS(c, key, want, flags) CHECK(holds((c), (key), (want), strlen(want), (flags)))

/* The value of round `r` of key `i` at base length `len`: `len + 4` bytes when `flags` is 0, so
 * that every round's record has the same length. */
static size_t rewrite_value(char *out, int i, size_t len, int r, uint32_t flags) {
    size_t n = flags == 0 ? len + 4 : len;
    for (size_t b = 0; b < n; b++) out[b] = (char)('A' + (i * 7 + r * 5 + (int)b) % 26);
    if (n > 0) out[0] = (char)('0' + r);
    return n;
}

/* Alternates flags 0 and non-0 over rounds (starting with either), checking each get right
 * after the store and every key at the end. */
static void rewrite_loop(segcache_t *c) {
    static const size_t lens[] = {0, 1, 2, 3, 4, 5, 7, 8, 12, 16, 31, 60, 100, 200, 500};
    const int nlens = (int)(sizeof lens / sizeof lens[0]);
    const int keys = 40, rounds = 5;
    char key[32], val[600];
    int bad = 0;
    for (int i = 0; i < keys; i++) {
        for (int l = 0; l < nlens; l++) {
            snprintf(key, sizeof key, "rw-%d-%zu", i, lens[l]);
            for (int r = 0; r < rounds; r++) {
                uint32_t flags = ((r + i) % 2 == 0) ? 0 : (uint32_t)(1 + i + r * 1000);
                size_t n = rewrite_value(val, i, lens[l], r, flags);
                if (segcache_set(c, K(key), (const uint8_t *)val, n, flags, 0) != SEGCACHE_OK) bad++;
                if (!holds(c, key, val, n, flags) && bad++ < 10) fprintf(stderr, "  (%s, round %d)\n", key, r);
            }
        }
    }
    for (int i = 0; i < keys; i++) {
        for (int l = 0; l < nlens; l++) {
            snprintf(key, sizeof key, "rw-%d-%zu", i, lens[l]);
            int r = rounds - 1;
            uint32_t flags = ((r + i) % 2 == 0) ? 0 : (uint32_t)(1 + i + r * 1000);
            size_t n = rewrite_value(val, i, lens[l], r, flags);
            if (!holds(c, key, val, n, flags)) bad++;
        }
    }
    CHECK(bad == 0);
}

static void rewrite_cases(segcache_t *c) {
    /* flags 1 "a" -> flags 0 "bbbbb" (same record length) */
    CHECK_ST(segcache_set(c, K("k"), K("a"), 1, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("k"), K("bbbbb"), 0, 0), SEGCACHE_OK);
    HOLDS(c, "k", "bbbbb", 0);
    /* flags 0 "WXYZy" -> flags 7 "N" */
    CHECK_ST(segcache_set(c, K("j"), K("WXYZy"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("j"), K("N"), 7, 0), SEGCACHE_OK);
    HOLDS(c, "j", "N", 7);
    /* and back again */
    CHECK_ST(segcache_set(c, K("j"), K("QRSTU"), 0, 0), SEGCACHE_OK);
    HOLDS(c, "j", "QRSTU", 0);
    HOLDS(c, "k", "bbbbb", 0);

    rewrite_loop(c);

    /* append and prepend on rewritten items keep the last store's flags */
    CHECK_ST(segcache_set(c, K("ap"), K("xy"), 3, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("ap"), K("abcdef"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_append(c, K("ap"), K("!")), SEGCACHE_OK);
    HOLDS(c, "ap", "abcdef!", 0);
    CHECK_ST(segcache_prepend(c, K("ap"), K("<")), SEGCACHE_OK);
    HOLDS(c, "ap", "<abcdef!", 0);
    CHECK_ST(segcache_set(c, K("pp"), K("abcdef"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("pp"), K("xy"), 9, 0), SEGCACHE_OK);
    CHECK_ST(segcache_prepend(c, K("pp"), K("<")), SEGCACHE_OK);
    HOLDS(c, "pp", "<xy", 9);
    CHECK_ST(segcache_append(c, K("pp"), K("!")), SEGCACHE_OK);
    HOLDS(c, "pp", "<xy!", 9);

    /* incr and decr on rewritten items; the results rewrite them once more */
    uint64_t v = 0;
    CHECK_ST(segcache_set(c, K("n"), K("1"), 5, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("n"), K("12345"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_incr(c, K("n"), 1, &v), SEGCACHE_OK);
    CHECK(v == 12346);
    HOLDS(c, "n", "12346", 0);
    CHECK_ST(segcache_set(c, K("m"), K("10000"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("m"), K("7"), 2, 0), SEGCACHE_OK);
    CHECK_ST(segcache_incr(c, K("m"), 3, &v), SEGCACHE_OK);
    CHECK(v == 10);
    HOLDS(c, "m", "10", 2);
    CHECK_ST(segcache_decr(c, K("m"), 1, &v), SEGCACHE_OK);
    CHECK(v == 9);
    HOLDS(c, "m", "9", 2);

    /* touch on a rewritten item keeps its value and flags */
    segcache_meta_t meta = {0};
    CHECK_ST(segcache_set(c, K("t"), K("v"), 4, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("t"), K("vvvvv"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_touch(c, K("t"), 1000), SEGCACHE_OK);
    HOLDS(c, "t", "vvvvv", 0);
    CHECK_ST(segcache_set(c, K("u"), K("wwwww"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("u"), K("w"), 6, 0), SEGCACHE_OK);
    CHECK_ST(segcache_touch(c, K("u"), 1000), SEGCACHE_OK);
    HOLDS(c, "u", "w", 6);
    char buf[64];
    CHECK_ST(get_str(c, "u", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(meta.ttl >= 1 && meta.ttl <= 1000 && meta.expire_at != 0);
}

/* What rewrite_cases left, after a restart from the file. */
static void rewrite_cases_reopened(segcache_t *c) {
    HOLDS(c, "k", "bbbbb", 0);
    HOLDS(c, "j", "QRSTU", 0);
    HOLDS(c, "ap", "<abcdef!", 0);
    HOLDS(c, "pp", "<xy!", 9);
    HOLDS(c, "n", "12346", 0);
    HOLDS(c, "m", "9", 2);
    HOLDS(c, "t", "vvvvv", 0);
    HOLDS(c, "u", "w", 6);
}

static void test_rewrites(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK); /* the default configuration */
    rewrite_cases(c);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);

    char dir[] = "/tmp/segcache-c-rewrite-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/cache.dat", dir);
    cfg.heap_size = 8u << 20;
    cfg.segment_size = 256u << 10;
    cfg.shards = 2;
    cfg.path = path;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    rewrite_cases(c);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    rewrite_cases_reopened(c);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    unlink(path);
    rmdir(dir);
}

/* ---- fork: a handle inherited by a child refuses every call there ---- */

static void count_item(void *ud, const segcache_item_t *item) {
    (void)item;
    (*(int *)ud)++;
}

static void count_many(void *ud, size_t index, const segcache_item_t *item) {
    (void)index;
    (void)item;
    (*(int *)ud)++;
}

/* In the child: every call on the inherited `c` must return SEGCACHE_FORKED, reads included,
 * and close must free it. Returns how many calls did otherwise. */
static int child_uses_inherited(segcache_t *c) {
    int bad = 0, calls = 0;
#define FORKED(call)                                                                          \
    do {                                                                                      \
        segcache_status_t st_ = (call);                                                       \
        if (st_ != SEGCACHE_FORKED) {                                                         \
            bad++;                                                                            \
            fprintf(stderr, "fork child: %s returned %s\n", #call, segcache_strerror(st_));   \
        } else if (strstr(segcache_last_error(), "fork") == NULL) {                           \
            bad++;                                                                            \
            fprintf(stderr, "fork child: %s: message %s\n", #call, segcache_last_error());    \
        }                                                                                     \
    } while (0)
    uint8_t buf[64];
    size_t len = 0, n = 0;
    uint32_t now = 0;
    uint64_t v = 0;
    segcache_meta_t meta;
    segcache_stats_t stats;
    const uint8_t *keys[] = {(const uint8_t *)"k", (const uint8_t *)"n"};
    const size_t key_lens[] = {1, 1};
    FORKED(segcache_get(c, K("k"), buf, sizeof buf, &len, &meta));
    FORKED(segcache_get(c, K("absent"), buf, sizeof buf, &len, &meta));
    FORKED(segcache_get_with(c, K("k"), count_item, &calls));
    FORKED(segcache_get_many(c, keys, key_lens, 2, count_many, &calls, &n));
    FORKED(segcache_contains(c, K("k")));
    FORKED(segcache_get_and_touch(c, K("k"), 10, buf, sizeof buf, &len, &meta));
    FORKED(segcache_stats(c, &stats));
    FORKED(segcache_len(c, &n));
    FORKED(segcache_now(c, &now));
    FORKED(segcache_set(c, K("k"), K("child"), 0, 0));
    FORKED(segcache_set(c, K("new"), K("child"), 0, 0));
    FORKED(segcache_add(c, K("add"), K("child"), 0, 0));
    FORKED(segcache_replace(c, K("k"), K("child"), 0, 0));
    FORKED(segcache_cas(c, K("k"), K("child"), 0, 0, 1));
    FORKED(segcache_append(c, K("k"), K("x")));
    FORKED(segcache_prepend(c, K("k"), K("x")));
    FORKED(segcache_incr(c, K("n"), 1, &v));
    FORKED(segcache_decr(c, K("n"), 1, &v));
    FORKED(segcache_delete(c, K("k")));
    FORKED(segcache_touch(c, K("k"), 5));
    FORKED(segcache_flush(c));
    FORKED(segcache_flush_after(c, 5));
    FORKED(segcache_expire(c, &n));
    FORKED(segcache_touch_ahead(c, 2, &n, NULL));
    FORKED(segcache_advance_clock(c, 5));
    /* freeing the inherited handle is allowed, and leaves the parent's cache and file alone */
    FORKED(segcache_close(c));
#undef FORKED
    if (calls != 0) bad++;
    /* a cache opened in the child works */
    segcache_t *mine = open_small(0);
    if (segcache_set(mine, K("k"), K("mine"), 0, 0) != SEGCACHE_OK) bad++;
    if (segcache_get(mine, K("k"), buf, sizeof buf, &len, NULL) != SEGCACHE_OK || len != 4 ||
        memcmp(buf, "mine", 4) != 0)
        bad++;
    if (segcache_close(mine) != SEGCACHE_OK) bad++;
    return bad;
}

/* The parent's items: p0..p999 (value and flags from the index), k and n. */
static int parent_items_intact(segcache_t *c) {
    char key[32], val[32];
    int bad = 0;
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "p%d", i);
        snprintf(val, sizeof val, "value-%d", i);
        if (!holds(c, key, val, strlen(val), (uint32_t)i)) bad++;
    }
    if (!holds(c, "k", "parent", 6, 1)) bad++;
    return bad;
}

static void fork_case(const char *path) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 4u << 20;
    cfg.segment_size = 256u << 10;
    cfg.shards = 2;
    cfg.path = path;
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    char key[32], val[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "p%d", i);
        snprintf(val, sizeof val, "value-%d", i);
        CHECK_ST(segcache_set(c, K(key), K(val), (uint32_t)i, 0), SEGCACHE_OK);
    }
    CHECK_ST(segcache_set(c, K("k"), K("parent"), 1, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("n"), K("1"), 0, 0), SEGCACHE_OK);

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(child_uses_inherited(c) == 0 ? 0 : 1); /* no atexit handlers, no flush */
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* the parent's cache is as it was, and works */
    CHECK(parent_items_intact(c) == 0);
    uint64_t v = 0;
    CHECK_ST(segcache_incr(c, K("n"), 1, &v), SEGCACHE_OK);
    CHECK(v == 2);
    size_t n = 0;
    CHECK_ST(segcache_len(c, &n), SEGCACHE_OK);
    CHECK(n == 1002);
    CHECK_ST(segcache_set(c, K("after"), K("fork"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    if (path != NULL) { /* the child's close did not seal or change the file: it reopens warm */
        CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
        CHECK(parent_items_intact(c) == 0);
        CHECK(holds(c, "after", "fork", 4, 0));
        CHECK(holds(c, "n", "2", 1, 0));
        CHECK_ST(segcache_close(c), SEGCACHE_OK);
    }
}

static void test_fork(void) {
    fork_case(NULL);
    char dir[] = "/tmp/segcache-c-fork-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/cache.dat", dir);
    fork_case(path);
    unlink(path);
    rmdir(dir);
}

/* segcache_scan: what one scan saw, by key number ("scan-<n>"); anything else is counted. */
#define SCAN_N 3000
struct scan_seen {
    int count[SCAN_N];
    int foreign;
    size_t calls;
};

static void scan_cb(void *user_data, const uint8_t *key, size_t key_len) {
    struct scan_seen *s = user_data;
    s->calls++;
    char buf[64];
    int n = -1;
    if (key != NULL && key_len > 5 && key_len < sizeof buf && memcmp(key, "scan-", 5) == 0) {
        memcpy(buf, key, key_len);
        buf[key_len] = '\0';
        n = atoi(buf + 5);
    }
    if (n >= 0 && n < SCAN_N) {
        s->count[n]++;
    } else {
        s->foreign++;
    }
}

/* Runs a whole scan in steps of `count`; with `delete_seen`, deletes what each step returned
 * before the next step (writes between steps are allowed). Returns the number of steps. */
static int scan_all(segcache_t *c, size_t count, struct scan_seen *s, int delete_seen) {
    uint64_t cursor = 0;
    int steps = 0;
    do {
        struct scan_seen before = *s;
        uint64_t next = 12345;
        CHECK_ST(segcache_scan(c, cursor, scan_cb, s, count, &next), SEGCACHE_OK);
        if (delete_seen) {
            char key[32];
            for (int i = 0; i < SCAN_N; i++) {
                if (s->count[i] != before.count[i]) {
                    snprintf(key, sizeof key, "scan-%d", i);
                    CHECK_ST(segcache_delete(c, K(key)), SEGCACHE_OK);
                }
            }
        }
        CHECK(next == 0 || next > cursor);
        cursor = next;
        steps++;
    } while (cursor != 0 && steps < 1000000);
    return steps;
}

static void test_scan(void) {
    segcache_t *c = open_small(0);
    char key[32];
    for (int i = 0; i < SCAN_N; i++) {
        snprintf(key, sizeof key, "scan-%d", i);
        CHECK_ST(segcache_set(c, K(key), K("v"), 0, 0), SEGCACHE_OK);
    }
    CHECK_ST(segcache_delete(c, K("scan-7")), SEGCACHE_OK);
    size_t items = 0;
    CHECK_ST(segcache_len(c, &items), SEGCACHE_OK);
    CHECK(items == SCAN_N - 1);

    /* Every key of the filled cache exactly once, in small steps and in one big one. */
    static struct scan_seen s;
    size_t counts[] = {0, 1, 16, (size_t)-1};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        memset(&s, 0, sizeof s);
        int steps = scan_all(c, counts[k], &s, 0);
        int once = 0, other = 0;
        for (int i = 0; i < SCAN_N; i++) {
            if (s.count[i] == 1 && i != 7) once++;
            else if (!(s.count[i] == 0 && i == 7)) other++;
        }
        CHECK(once == SCAN_N - 1);
        CHECK(other == 0);
        CHECK(s.foreign == 0);
        CHECK(s.calls == SCAN_N - 1);
        if (counts[k] == 16) CHECK(steps > 10);
    }

    /* Deleting what was seen between steps still visits every key once, and empties the cache. */
    memset(&s, 0, sizeof s);
    scan_all(c, 10, &s, 1);
    int once = 0;
    for (int i = 0; i < SCAN_N; i++) once += s.count[i] == 1;
    CHECK(once == SCAN_N - 1);
    CHECK(s.calls == SCAN_N - 1);
    CHECK_ST(segcache_len(c, &items), SEGCACHE_OK);
    CHECK(items == 0);

    /* An empty cache: no call, and the scan ends. A cursor past the end ends it at once. */
    memset(&s, 0, sizeof s);
    scan_all(c, 5, &s, 0);
    CHECK(s.calls == 0);
    uint64_t next = 99;
    CHECK_ST(segcache_scan(c, UINT64_MAX, scan_cb, &s, 5, &next), SEGCACHE_OK);
    CHECK(next == 0 && s.calls == 0);

    /* Bad arguments: nothing called, nothing written. */
    next = 99;
    CHECK_ST(segcache_set(c, K("scan-1"), K("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_scan(c, 0, NULL, &s, 5, &next), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "callback") != NULL);
    CHECK(next == 99);
    CHECK_ST(segcache_scan(c, 0, scan_cb, &s, 5, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "next_cursor") != NULL);
    CHECK_ST(segcache_scan(NULL, 0, scan_cb, &s, 5, &next), SEGCACHE_INVALID_ARGUMENT);
    CHECK(next == 99 && s.calls == 0);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* Stale-while-revalidate (memcached's mg/md I): invalidate marks the item stale, exactly one
 * claiming read wins the recache token, the others see it sent, and a store makes it fresh. */
static void test_state_stale_while_revalidate(void) {
    segcache_t *c = open_small(1000000);
    uint8_t buf[64];
    size_t len = 0;
    segcache_item_info_t info;
    segcache_read_options_t claim = {.claim_token = true};
    uint64_t cas = 0, cas2 = 0;

    CHECK_ST(segcache_set(c, K("swr"), K("old"), 7, 100), SEGCACHE_OK);
    /* A plain read of a fresh item: nothing stale, no token, not fetched before; NULL opts. */
    memset(&info, 0xff, sizeof info);
    CHECK_ST(segcache_get_ex(c, K("swr"), NULL, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(len == 3 && memcmp(buf, "old", 3) == 0);
    CHECK(info.flags == 7 && info.ttl == 100 && info.expire_at == 1000100 && info.cas != 0);
    CHECK(!info.stale && !info.won && !info.token_sent && !info.fetched);
    cas = info.cas;
    /* A claiming read of a fresh item takes no token; the item was fetched before now. */
    CHECK_ST(segcache_get_ex(c, K("swr"), &claim, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(!info.stale && !info.won && !info.token_sent && info.fetched);

    CHECK_ST(segcache_invalidate(c, K("swr"), -1, 0, 0, &cas2), SEGCACHE_OK);
    CHECK(cas2 != 0 && cas2 != cas);
    /* A plain read sees it stale but takes nothing. */
    CHECK_ST(segcache_get_ex(c, K("swr"), NULL, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(info.stale && !info.won && !info.token_sent && info.cas == cas2 && info.ttl == 100);
    CHECK(len == 3 && memcmp(buf, "old", 3) == 0 && info.flags == 7);
    /* The first claiming read wins, the second sees the token sent. */
    CHECK_ST(segcache_get_ex(c, K("swr"), &claim, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(info.stale && info.won && !info.token_sent);
    CHECK_ST(segcache_get_ex(c, K("swr"), &claim, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(info.stale && !info.won && info.token_sent);
    CHECK(len == 3 && memcmp(buf, "old", 3) == 0);
    /* The winner stores the new value: fresh again, the token free again. */
    CHECK_ST(segcache_set(c, K("swr"), K("new"), 7, 100), SEGCACHE_OK);
    CHECK_ST(segcache_get_ex(c, K("swr"), &claim, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(!info.stale && !info.won && !info.token_sent && len == 3 && memcmp(buf, "new", 3) == 0);

    /* Invalidate with a TTL, compared and with a caller-chosen CAS value. */
    CHECK_ST(segcache_get_ex(c, K("swr"), NULL, NULL, 0, &len, &info), SEGCACHE_BUFFER_TOO_SMALL);
    cas = info.cas;
    CHECK_ST(segcache_invalidate(c, K("swr"), 30, cas + 1, 0, &cas2), SEGCACHE_EXISTS);
    CHECK_ST(segcache_invalidate(c, K("swr"), 30, cas, 4242, &cas2), SEGCACHE_OK);
    CHECK(cas2 == 4242);
    CHECK_ST(segcache_get_ex(c, K("swr"), NULL, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(info.stale && info.cas == 4242 && info.ttl == 30);
    CHECK_ST(segcache_invalidate(c, K("absent"), -1, 0, 0, NULL), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_invalidate(c, K("swr"), -2, 0, 0, NULL), SEGCACHE_INVALID_ARGUMENT);

    /* A too-small buffer still reads: the info is written and the token taken. */
    CHECK_ST(segcache_invalidate(c, K("swr"), -1, 0, 0, NULL), SEGCACHE_OK);
    memset(&info, 0, sizeof info);
    CHECK_ST(segcache_get_ex(c, K("swr"), &claim, buf, 1, &len, &info), SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(len == 3 && info.won && info.stale);

    /* recache_below: an item about to expire is up for grabs too, once. */
    CHECK_ST(segcache_set(c, K("soon"), K("v"), 0, 10), SEGCACHE_OK);
    segcache_read_options_t early = {.claim_token = true, .recache_below = 5};
    CHECK_ST(segcache_get_ex(c, K("soon"), &early, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(!info.won && !info.token_sent && !info.stale);
    CHECK_ST(segcache_advance_clock(c, 6), SEGCACHE_OK);
    CHECK_ST(segcache_get_ex(c, K("soon"), &early, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(info.won && !info.stale && info.ttl == 4);
    CHECK_ST(segcache_get_ex(c, K("soon"), &early, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(!info.won && info.token_sent);

    /* no_update leaves the fetched bit alone; last access is coarse but moves with the clock. */
    CHECK_ST(segcache_set(c, K("quiet"), K("v"), 0, 0), SEGCACHE_OK);
    segcache_read_options_t quiet = {.no_update = true};
    CHECK_ST(segcache_get_ex(c, K("quiet"), &quiet, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(!info.fetched && info.ttl == 0 && info.expire_at == 0);
    CHECK_ST(segcache_get_ex(c, K("quiet"), &quiet, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(!info.fetched);
    CHECK_ST(segcache_advance_clock(c, 600), SEGCACHE_OK);
    CHECK_ST(segcache_get_ex(c, K("quiet"), NULL, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(!info.fetched && info.last_access_secs > 0 && info.last_access_secs <= 600);
    CHECK_ST(segcache_get_ex(c, K("quiet"), NULL, buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(info.fetched && info.last_access_secs < 60);
    CHECK_ST(segcache_get_ex(c, K("missing"), NULL, buf, sizeof buf, &len, &info), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* Stores with a caller-chosen CAS value (memcached's E), every mode, and delete_cas. */
static void test_state_store_and_delete_cas(void) {
    segcache_t *c = open_small(0);
    char buf[64];
    segcache_meta_t meta;
    uint64_t cas = 0;
    segcache_store_options_t o = {.new_cas = 0x123456789abcULL};

    CHECK_ST(segcache_store(c, K("e"), K("v1"), 3, 0, &o, &cas), SEGCACHE_OK);
    CHECK(cas == 0x123456789abcULL);
    CHECK_ST(get_str(c, "e", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "v1") == 0 && meta.cas == 0x123456789abcULL && meta.flags == 3);
    /* A plain store (NULL options) takes the counter's next value and reports it. */
    CHECK_ST(segcache_store(c, K("e"), K("v2"), 0, 0, NULL, &cas), SEGCACHE_OK);
    CHECK(cas != 0 && cas != 0x123456789abcULL);
    CHECK_ST(get_str(c, "e", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "v2") == 0 && meta.cas == cas);
    /* CAS mode compares, then the caller's value is stored. */
    segcache_store_options_t swap = {.mode = SEGCACHE_STORE_CAS, .compare_cas = cas + 1, .new_cas = UINT64_MAX};
    CHECK_ST(segcache_store(c, K("e"), K("v3"), 0, 0, &swap, NULL), SEGCACHE_EXISTS);
    swap.compare_cas = cas;
    CHECK_ST(segcache_store(c, K("e"), K("v3"), 0, 0, &swap, NULL), SEGCACHE_OK);
    CHECK_ST(get_str(c, "e", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "v3") == 0 && meta.cas == UINT64_MAX);
    CHECK_ST(segcache_cas(c, K("e"), K("v4"), 0, 0, UINT64_MAX), SEGCACHE_OK);
    swap.compare_cas = 1;
    CHECK_ST(segcache_store(c, K("nope"), K("v"), 0, 0, &swap, NULL), SEGCACHE_NOT_FOUND);
    segcache_store_options_t add = {.mode = SEGCACHE_STORE_ADD}, rep = {.mode = SEGCACHE_STORE_REPLACE};
    CHECK_ST(segcache_store(c, K("e"), K("x"), 0, 0, &add, NULL), SEGCACHE_NOT_STORED);
    CHECK_ST(segcache_store(c, K("nope"), K("x"), 0, 0, &rep, NULL), SEGCACHE_NOT_STORED);
    CHECK_ST(segcache_store(c, K("nope"), K("x"), 0, 0, &add, NULL), SEGCACHE_OK);
    segcache_store_options_t bad = {.mode = 4};
    CHECK_ST(segcache_store(c, K("e"), K("x"), 0, 0, &bad, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "mode") != NULL);

    /* The writer holding the token: claiming readers see it sent. */
    segcache_store_options_t won = {.won = true};
    CHECK_ST(segcache_store(c, K("w"), K("v"), 0, 0, &won, NULL), SEGCACHE_OK);
    segcache_read_options_t claim = {.claim_token = true};
    segcache_item_info_t info;
    size_t len = 0;
    CHECK_ST(segcache_invalidate(c, K("w"), -1, 0, 0, NULL), SEGCACHE_OK);
    CHECK_ST(segcache_get_ex(c, K("w"), &claim, (uint8_t *)buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(info.won); /* invalidation forgets the token handed out before */
    CHECK_ST(segcache_store(c, K("w"), K("v"), 0, 0, &won, NULL), SEGCACHE_OK);
    CHECK_ST(segcache_get_ex(c, K("w"), &claim, (uint8_t *)buf, sizeof buf, &len, &info), SEGCACHE_OK);
    CHECK(!info.won && info.token_sent && !info.stale);

    /* delete_cas: a mismatch removes nothing. */
    CHECK_ST(get_str(c, "e", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK_ST(segcache_delete_cas(c, K("e"), meta.cas + 1), SEGCACHE_EXISTS);
    CHECK_ST(get_str(c, "e", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK_ST(segcache_delete_cas(c, K("e"), meta.cas), SEGCACHE_OK);
    CHECK_ST(get_str(c, "e", buf, sizeof buf, &meta), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_delete_cas(c, K("e"), meta.cas), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static void test_state_bad_arguments(void) {
    segcache_t *c = open_small(0);
    uint8_t buf[8];
    size_t len = 77;
    uint64_t cas = 77;
    segcache_item_info_t info = {.cas = 77};
    CHECK_ST(segcache_set(c, K("k"), K("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_get_ex(NULL, K("k"), NULL, buf, sizeof buf, &len, &info), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_ex(c, NULL, 1, NULL, buf, sizeof buf, &len, &info), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_ex(c, K(""), NULL, buf, sizeof buf, &len, &info), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_ex(c, K("k"), NULL, NULL, 8, &len, &info), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_ex(c, K("k"), NULL, buf, sizeof buf, NULL, &info), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "value_len") != NULL);
    CHECK(len == 77 && info.cas == 77);
    CHECK_ST(segcache_get_ex(c, K("k"), NULL, buf, sizeof buf, &len, NULL), SEGCACHE_OK);
    CHECK(len == 1 && buf[0] == 'v');
    CHECK_ST(segcache_store(NULL, K("k"), K("v"), 0, 0, NULL, &cas), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_store(c, NULL, 1, K("v"), 0, 0, NULL, &cas), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_store(c, K("k"), NULL, 1, 0, 0, NULL, &cas), SEGCACHE_INVALID_ARGUMENT);
    CHECK(cas == 77);
    CHECK_ST(segcache_store(c, K("k"), NULL, 0, 0, 0, NULL, NULL), SEGCACHE_OK);
    CHECK_ST(segcache_invalidate(NULL, K("k"), -1, 0, 0, &cas), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_invalidate(c, NULL, 1, -1, 0, 0, &cas), SEGCACHE_INVALID_ARGUMENT);
    CHECK(cas == 77);
    CHECK_ST(segcache_delete_cas(NULL, K("k"), 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_delete_cas(c, NULL, 1, 1), SEGCACHE_INVALID_ARGUMENT);
    char long_key[300];
    memset(long_key, 'x', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    CHECK_ST(segcache_get_ex(c, K(long_key), NULL, buf, sizeof buf, &len, NULL), SEGCACHE_KEY_TOO_LONG);
    CHECK_ST(segcache_invalidate(c, K(long_key), -1, 0, 0, NULL), SEGCACHE_KEY_TOO_LONG);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

#define CLAIM_THREADS 8
struct claim_arg {
    segcache_t *c;
    int won, sent, errors;
};

static void *claim_thread(void *p) {
    struct claim_arg *a = p;
    segcache_read_options_t claim = {.claim_token = true};
    segcache_item_info_t info;
    uint8_t buf[16];
    size_t len = 0;
    if (segcache_get_ex(a->c, K("hot"), &claim, buf, sizeof buf, &len, &info) != SEGCACHE_OK || !info.stale)
        a->errors++;
    a->won += info.won;
    a->sent += info.token_sent;
    return NULL;
}

/* Many threads claim the token of one invalidated item at once: exactly one wins, every round. */
static void test_state_one_winner(void) {
    segcache_t *c = open_small(0);
    for (int round = 0; round < 50; round++) {
        CHECK_ST(segcache_set(c, K("hot"), K("v"), 0, 0), SEGCACHE_OK);
        CHECK_ST(segcache_invalidate(c, K("hot"), -1, 0, 0, NULL), SEGCACHE_OK);
        pthread_t t[CLAIM_THREADS];
        struct claim_arg a[CLAIM_THREADS];
        for (int i = 0; i < CLAIM_THREADS; i++) {
            a[i] = (struct claim_arg){.c = c};
            pthread_create(&t[i], NULL, claim_thread, &a[i]);
        }
        int won = 0, sent = 0, errors = 0;
        for (int i = 0; i < CLAIM_THREADS; i++) {
            pthread_join(t[i], NULL);
            won += a[i].won;
            sent += a[i].sent;
            errors += a[i].errors;
        }
        CHECK(won == 1 && sent == CLAIM_THREADS - 1 && errors == 0);
    }
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* ---- single-flight loads: segcache_get_or_load ---- */
#define LOAD_THREADS 8

struct load_ctx {
    atomic_int calls;   /* loader runs */
    atomic_int started; /* threads that began their call */
    int fail_first;     /* the first run returns this (0: succeed) */
    const char *value;
};

/* A slow loader: waits until every thread has started its call (at most ~2 s), so that without
 * single flight each of them would miss and run it. */
static int slow_loader(void *ud, const uint8_t *key, size_t key_len, segcache_load_t *load) {
    struct load_ctx *x = ud;
    int n = atomic_fetch_add(&x->calls, 1);
    (void)key;
    (void)key_len;
    for (int i = 0; i < 400 && atomic_load(&x->started) < LOAD_THREADS; i++) usleep(5000);
    usleep(50000);
    if (n == 0 && x->fail_first) return x->fail_first;
    return segcache_load_set(load, K(x->value)) == SEGCACHE_OK ? 0 : -1;
}

struct load_arg {
    segcache_t *c;
    struct load_ctx *x;
    segcache_status_t st;
    char buf[64];
};

static void *load_thread(void *p) {
    struct load_arg *a = p;
    size_t len = 0;
    atomic_fetch_add(&a->x->started, 1);
    a->st = segcache_get_or_load(a->c, K("slow"), 60, slow_loader, a->x, (uint8_t *)a->buf, sizeof a->buf - 1, &len,
                                 NULL);
    if (a->st == SEGCACHE_OK) a->buf[len] = '\0';
    return NULL;
}

/* Runs LOAD_THREADS threads on one key; returns how many got SEGCACHE_OK with x->value. */
static int load_race(segcache_t *c, struct load_ctx *x, int *load_failed) {
    pthread_t th[LOAD_THREADS];
    struct load_arg a[LOAD_THREADS];
    int ok = 0;
    *load_failed = 0;
    for (int i = 0; i < LOAD_THREADS; i++) {
        a[i] = (struct load_arg){.c = c, .x = x};
        CHECK(pthread_create(&th[i], NULL, load_thread, &a[i]) == 0);
    }
    for (int i = 0; i < LOAD_THREADS; i++) {
        CHECK(pthread_join(th[i], NULL) == 0);
        if (a[i].st == SEGCACHE_OK && strcmp(a[i].buf, x->value) == 0) ok++;
        if (a[i].st == SEGCACHE_LOAD_FAILED) ++*load_failed;
    }
    return ok;
}

static void test_get_or_load_threads(void) {
    segcache_t *c = open_small(0);
    struct load_ctx x = {.value = "loaded once"};
    int failed_loads = 0;
    CHECK(load_race(c, &x, &failed_loads) == LOAD_THREADS);
    CHECK(atomic_load(&x.calls) == 1); /* single flight: one loader for eight threads */
    CHECK(failed_loads == 0);
    char buf[64];
    CHECK_ST(get_str(c, "slow", buf, sizeof buf, NULL), SEGCACHE_OK);
    CHECK(strcmp(buf, "loaded once") == 0);

    /* The first loader fails: its caller alone sees SEGCACHE_LOAD_FAILED, a waiter loads again. */
    CHECK_ST(segcache_delete(c, K("slow")), SEGCACHE_OK);
    struct load_ctx y = {.value = "second try", .fail_first = 42};
    CHECK(load_race(c, &y, &failed_loads) == LOAD_THREADS - 1);
    CHECK(failed_loads == 1);
    CHECK(atomic_load(&y.calls) == 2);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

static int fixed_loader(void *ud, const uint8_t *key, size_t key_len, segcache_load_t *load) {
    (void)key;
    (void)key_len;
    int *calls = ud;
    ++*calls;
    return segcache_load_set(load, K("fresh")) == SEGCACHE_OK ? 0 : -1;
}

static int failing_loader(void *ud, const uint8_t *key, size_t key_len, segcache_load_t *load) {
    (void)ud;
    (void)key;
    (void)key_len;
    (void)load;
    return 7;
}

static int silent_loader(void *ud, const uint8_t *key, size_t key_len, segcache_load_t *load) {
    (void)ud;
    (void)key;
    (void)key_len;
    (void)load;
    return 0; /* sets no value */
}

/* Asks for its own key again from inside the load: must not deadlock. */
static int reentrant_loader(void *ud, const uint8_t *key, size_t key_len, segcache_load_t *load) {
    segcache_t *c = ud;
    int inner_calls = 0;
    char buf[16];
    size_t len = 0;
    if (segcache_get_or_load(c, key, key_len, 0, fixed_loader, &inner_calls, (uint8_t *)buf, sizeof buf, &len,
                             NULL) != SEGCACHE_OK ||
        inner_calls != 1)
        return 1;
    return segcache_load_set(load, K("outer")) == SEGCACHE_OK ? 0 : -1;
}

static void test_get_or_load(void) {
    segcache_t *c = open_small(1000);
    char buf[64];
    size_t len = 0;
    segcache_meta_t m;
    int calls = 0;
    /* miss: loads and stores; hit: no call */
    CHECK_ST(segcache_get_or_load(c, K("k"), 30, fixed_loader, &calls, (uint8_t *)buf, sizeof buf, &len, &m),
             SEGCACHE_OK);
    CHECK(len == 5 && memcmp(buf, "fresh", 5) == 0 && calls == 1);
    CHECK(m.flags == 0 && m.ttl == 30 && m.expire_at == 1030 && m.cas != 0);
    CHECK_ST(segcache_set(c, K("k"), K("stored"), 9, 0), SEGCACHE_OK);
    CHECK_ST(segcache_get_or_load(c, K("k"), 30, fixed_loader, &calls, (uint8_t *)buf, sizeof buf, &len, &m),
             SEGCACHE_OK);
    CHECK(len == 6 && memcmp(buf, "stored", 6) == 0 && calls == 1 && m.flags == 9);
    /* buffer too small: the needed length, and the value was stored all the same */
    CHECK_ST(segcache_get_or_load(c, K("k2"), 0, fixed_loader, &calls, NULL, 0, &len, NULL),
             SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(len == 5 && calls == 2);
    CHECK_ST(get_str(c, "k2", buf, sizeof buf, NULL), SEGCACHE_OK);
    /* a failing loader: its code in the message, nothing stored, the next call loads again */
    CHECK_ST(segcache_get_or_load(c, K("e"), 0, failing_loader, NULL, (uint8_t *)buf, sizeof buf, &len, NULL),
             SEGCACHE_LOAD_FAILED);
    CHECK(strstr(segcache_last_error(), "returned 7") != NULL);
    CHECK_ST(segcache_get_or_load(c, K("e"), 0, silent_loader, NULL, (uint8_t *)buf, sizeof buf, &len, NULL),
             SEGCACHE_LOAD_FAILED);
    CHECK(strstr(segcache_last_error(), "segcache_load_set") != NULL);
    CHECK_ST(segcache_contains(c, K("e")), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_get_or_load(c, K("e"), 0, fixed_loader, &calls, (uint8_t *)buf, sizeof buf, &len, NULL),
             SEGCACHE_OK);
    CHECK(calls == 3);
    /* re-entrant: the loader asks for its own key */
    CHECK_ST(segcache_get_or_load(c, K("re"), 0, reentrant_loader, c, (uint8_t *)buf, sizeof buf, &len, NULL),
             SEGCACHE_OK);
    CHECK(len == 5 && memcmp(buf, "outer", 5) == 0);
    /* bad arguments */
    CHECK_ST(segcache_get_or_load(c, K("k"), 0, NULL, NULL, (uint8_t *)buf, sizeof buf, &len, NULL),
             SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_or_load(NULL, K("k"), 0, fixed_loader, &calls, (uint8_t *)buf, sizeof buf, &len, NULL),
             SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_or_load(c, NULL, 1, 0, fixed_loader, &calls, (uint8_t *)buf, sizeof buf, &len, NULL),
             SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_or_load(c, K("k"), 0, fixed_loader, &calls, (uint8_t *)buf, sizeof buf, NULL, NULL),
             SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_get_or_load(c, K("k"), 0, fixed_loader, &calls, NULL, 8, &len, NULL),
             SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_load_set(NULL, K("v")), SEGCACHE_INVALID_ARGUMENT);
    CHECK(calls == 3);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* ---- multi_process: processes that share one cache file ---- */

#define MP_KEYS 128
#define MP_WRITERS 64
#define MP_VALUE_MAX 2048
/* Seconds a worker process may take before SIGALRM ends it (a hang fails the test); generous
 * for valgrind on a busy machine. */
#define MP_ALARM 120
/* Seconds one multi-process test may take in the parent. */
#define MP_TEST_ALARM 400

static const char *self_path; /* this binary: the spawn test runs it again */

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The value `writer` stores under `key` at `version`: "<key> <writer> <version> ", then a
 * payload whose length (16 to 1515 bytes: both sides of the 512-byte lock-free read) and bytes
 * follow from those three, then the FNV-1a of everything before it as 16 hex digits. */
static size_t mp_value(char *out, const char *key, uint32_t writer, uint32_t version) {
    int n = snprintf(out, MP_VALUE_MAX, "%s %u %u ", key, writer, version);
    uint64_t seed = fnv1a((const uint8_t *)out, (size_t)n);
    size_t len = (size_t)n + 16 + (size_t)(seed % 1500);
    for (size_t i = (size_t)n; i < len; i++) out[i] = (char)('a' + (seed + i * 7) % 26);
    snprintf(out + len, 17, "%016llx", (unsigned long long)fnv1a((const uint8_t *)out, len));
    return len + 16;
}

/* Whether buf[0..len] is whole and was made by mp_value for `key`; its writer and version then. */
static int mp_check(const char *key, const uint8_t *buf, size_t len, uint32_t *writer, uint32_t *version) {
    char copy[MP_VALUE_MAX], want[MP_VALUE_MAX], k[64];
    unsigned w = 0, v = 0;
    if (len < 20 || len >= MP_VALUE_MAX) return 0;
    memcpy(copy, buf, len);
    copy[len] = '\0';
    if (sscanf(copy, "%63s %u %u ", k, &w, &v) != 3 || strcmp(k, key) != 0) return 0;
    if (mp_value(want, key, w, v) != len || memcmp(want, buf, len) != 0) return 0;
    *writer = w;
    *version = v;
    return 1;
}

/* What the workers of a test tell each other and the parent, in memory that fork() shares. */
struct mp_shared {
    atomic_uint started[MP_WRITERS][MP_KEYS]; /* the last version a writer began to store */
    atomic_uint acked[MP_WRITERS][MP_KEYS];   /* the last version whose store returned OK */
    atomic_int bad;                           /* wrong results seen by any worker */
};

static struct mp_shared *mp_shared_new(void) {
    void *p = mmap(NULL, sizeof(struct mp_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    return p; /* zeroed */
}

static segcache_config_t mp_config(const char *path) {
    segcache_config_t cfg;
    if (segcache_config_default(&cfg) != SEGCACHE_OK) abort();
    cfg.heap_size = 8u << 20;
    cfg.segment_size = 256u << 10;
    cfg.shards = 4;
    cfg.path = path;
    cfg.multi_process = true;
    return cfg;
}

static void mp_timeout(int sig) {
    (void)sig;
    static const char msg[] = "test_segcache: multi-process test timed out (a process hangs)\n";
    ssize_t rc = write(2, msg, sizeof msg - 1);
    (void)rc;
    _exit(3);
}

/* A stream of sets (new versions, recorded in `sh` before and after the store) and gets over
 * the shared keys "mp-0".."mp-127"; a value read must be whole, for its key, with its writer's
 * flags, and a version its writer began to store. `ops` < 0: until killed (or 10 wrong results).
 * Returns the number of wrong results (also added to sh->bad: a killed worker returns nothing). */
static int mp_worker(segcache_t *c, struct mp_shared *sh, uint32_t writer, long ops, unsigned seed) {
    int bad = 0;
    uint32_t ver[MP_KEYS] = {0};
    uint8_t buf[MP_VALUE_MAX];
    char key[32], val[MP_VALUE_MAX];
    for (long op = 0; (ops < 0 || op < ops) && bad < 10; op++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)((seed >> 8) % MP_KEYS);
        snprintf(key, sizeof key, "mp-%d", k);
        segcache_status_t st;
        if ((seed >> 20) % 3 == 0) {
            uint32_t v = ++ver[k];
            atomic_store(&sh->started[writer][k], v);
            size_t n = mp_value(val, key, writer, v);
            st = segcache_set(c, K(key), (const uint8_t *)val, n, writer, 0);
            if (st == SEGCACHE_OK) {
                atomic_store(&sh->acked[writer][k], v);
                continue;
            }
        } else {
            size_t len = 0;
            uint32_t w = 0, v = 0;
            segcache_meta_t meta;
            st = segcache_get(c, K(key), buf, sizeof buf, &len, &meta);
            if (st == SEGCACHE_NOT_FOUND) continue;
            if (st == SEGCACHE_OK) {
                if (mp_check(key, buf, len, &w, &v) && w < MP_WRITERS && meta.flags == w &&
                    v <= atomic_load(&sh->started[w][k]))
                    continue;
                fprintf(stderr, "mp worker %u: %s: wrong value (%zu bytes, %.40s...)\n", writer, key, len,
                        (const char *)buf);
                bad++;
                atomic_fetch_add(&sh->bad, 1);
                continue;
            }
        }
        fprintf(stderr, "mp worker %u: %s: %s (%s)\n", writer, key, segcache_strerror(st), segcache_last_error());
        bad++;
        atomic_fetch_add(&sh->bad, 1);
    }
    return bad;
}

/* Every key's value: whole, for its key, with its writer's flags, and a version its writer
 * finished storing (`acked`) or at least began to (a writer killed mid-store). Returns the
 * number of wrong ones; *present: how many keys hold a value. */
static int mp_verify(segcache_t *c, struct mp_shared *sh, int acked, int *present) {
    int bad = 0;
    *present = 0;
    for (int k = 0; k < MP_KEYS; k++) {
        char key[32];
        uint8_t buf[MP_VALUE_MAX];
        size_t len = 0;
        uint32_t w = 0, v = 0;
        segcache_meta_t meta;
        snprintf(key, sizeof key, "mp-%d", k);
        segcache_status_t st = segcache_get(c, K(key), buf, sizeof buf, &len, &meta);
        if (st == SEGCACHE_NOT_FOUND) continue;
        if (st == SEGCACHE_OK && mp_check(key, buf, len, &w, &v) && w < MP_WRITERS && meta.flags == w &&
            v >= 1 && v <= atomic_load(acked ? &sh->acked[w][k] : &sh->started[w][k])) {
            (*present)++;
            continue;
        }
        fprintf(stderr, "mp verify: %s: %s, %zu bytes, writer %u version %u\n", key, segcache_strerror(st), len, w, v);
        bad++;
    }
    return bad;
}

static void mp_dir(char *dir, char *path, size_t cap) {
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, cap, "%s/cache.dat", dir);
}

/* The start of a test with processes: a fresh directory, a watchdog that fails a hang, and the
 * cache opened with multi_process (its config in *cfg, for reopening). */
static segcache_t *mp_begin(char *dir, char *path, size_t cap, segcache_config_t *cfg) {
    mp_dir(dir, path, cap);
    signal(SIGALRM, mp_timeout);
    alarm(MP_TEST_ALARM);
    *cfg = mp_config(path);
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(cfg, &c), SEGCACHE_OK);
    return c;
}

/* A pre-fork pool: the parent opens the cache with multi_process, forks 4 workers that use the
 * inherited handle (each joins the file at its first call) over one key space; afterwards
 * every value the parent reads is whole and one a worker's store acknowledged, and after the
 * last close the file reopens warm with the same values. */
static void test_mp_prefork(void) {
    char dir[] = "/tmp/segcache-c-mp-XXXXXX", path[256];
    segcache_config_t cfg;
    segcache_t *c = mp_begin(dir, path, sizeof path, &cfg);
    struct mp_shared *sh = mp_shared_new();
    pid_t pids[4];
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 4; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            alarm(MP_ALARM);
            int bad = mp_worker(c, sh, (uint32_t)i, 3000, (unsigned)i + 1);
            segcache_status_t st = segcache_close(c); /* leaves; the parent still uses the file */
            if (st != SEGCACHE_OK) fprintf(stderr, "mp child close: %s\n", segcache_last_error());
            _exit(bad == 0 && st == SEGCACHE_OK ? 0 : 1);
        }
    }
    for (int i = 0; i < 4; i++) {
        int status = 0;
        CHECK(waitpid(pids[i], &status, 0) == pids[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(atomic_load(&sh->bad) == 0);
    int present = 0, again = 0;
    CHECK(mp_verify(c, sh, 1, &present) == 0);
    CHECK(present > MP_KEYS / 2); /* the workers' writes reached the parent's cache */
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    /* the parent was the last: the file is clean, and a single-process open finds it so */
    cfg.multi_process = false;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    CHECK(mp_verify(c, sh, 1, &again) == 0);
    CHECK(again == present);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    alarm(0);
    munmap(sh, sizeof *sh);
    unlink(path);
    rmdir(dir);
}

/* The spawned side of test_mp_spawn (this binary run again with --mp-spawn-child PATH ID):
 * opens PATH itself, reads the parent's value, stores "sp-ID-0".."sp-ID-199" and reads the
 * other children's. Exit status 0 when everything was right. */
static int mp_spawn_child(const char *path, int id) {
    alarm(MP_ALARM);
    segcache_config_t cfg = mp_config(path);
    segcache_t *c = NULL;
    if (segcache_open(&cfg, &c) != SEGCACHE_OK) {
        fprintf(stderr, "spawned %d: open: %s\n", id, segcache_last_error());
        return 1;
    }
    int bad = 0;
    char key[32], val[MP_VALUE_MAX];
    uint8_t buf[MP_VALUE_MAX];
    size_t len = 0;
    uint32_t w = 0, v = 0;
    if (segcache_get(c, K("spawn-parent"), buf, sizeof buf, &len, NULL) != SEGCACHE_OK ||
        !mp_check("spawn-parent", buf, len, &w, &v) || w != 1000) {
        fprintf(stderr, "spawned %d: the parent's value is not there\n", id);
        bad++;
    }
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof key, "sp-%d-%d", id, i);
        size_t n = mp_value(val, key, (uint32_t)id, 1);
        if (segcache_set(c, K(key), (const uint8_t *)val, n, 0, 0) != SEGCACHE_OK) bad++;
    }
    for (int i = 0; i < 200; i++) {
        for (int j = 0; j < 3; j++) {
            snprintf(key, sizeof key, "sp-%d-%d", j, i);
            segcache_status_t st = segcache_get(c, K(key), buf, sizeof buf, &len, NULL);
            if (st == SEGCACHE_NOT_FOUND && j != id) continue;
            if (st != SEGCACHE_OK || !mp_check(key, buf, len, &w, &v) || w != (uint32_t)j || v != 1) {
                fprintf(stderr, "spawned %d: %s: %s\n", id, key, segcache_strerror(st));
                bad++;
            }
        }
    }
    if (segcache_close(c) != SEGCACHE_OK) bad++;
    return bad == 0 ? 0 : 1;
}

/* Separate processes (fork + exec of this binary) open the file by its path while the parent
 * uses it: each sees the parent's value and stores its own, which the parent then reads; after
 * the last close the file reopens warm with all of them. */
static void test_mp_spawn(void) {
    char dir[] = "/tmp/segcache-c-mp-XXXXXX", path[256], val[MP_VALUE_MAX];
    segcache_config_t cfg;
    segcache_t *c = mp_begin(dir, path, sizeof path, &cfg);
    size_t n = mp_value(val, "spawn-parent", 1000, 1);
    CHECK_ST(segcache_set(c, K("spawn-parent"), (const uint8_t *)val, n, 0, 0), SEGCACHE_OK);
    pid_t pids[3];
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 3; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            char id[8];
            snprintf(id, sizeof id, "%d", i);
            execl(self_path, self_path, "--mp-spawn-child", path, id, (char *)NULL);
            _exit(127);
        }
    }
    for (int i = 0; i < 3; i++) {
        int status = 0;
        CHECK(waitpid(pids[i], &status, 0) == pids[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    for (int round = 0; round < 2; round++) {
        int bad = 0;
        for (int j = 0; j < 3; j++) {
            for (int i = 0; i < 200; i++) {
                char key[32];
                uint8_t buf[MP_VALUE_MAX];
                size_t len = 0;
                uint32_t w = 0, v = 0;
                snprintf(key, sizeof key, "sp-%d-%d", j, i);
                if (segcache_get(c, K(key), buf, sizeof buf, &len, NULL) != SEGCACHE_OK ||
                    !mp_check(key, buf, len, &w, &v) || w != (uint32_t)j || v != 1)
                    bad++;
            }
        }
        CHECK(bad == 0);
        CHECK_ST(segcache_close(c), SEGCACHE_OK);
        /* round 0: the parent left last; a single-process open finds the file clean and whole */
        cfg.multi_process = false;
        if (round == 0) CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    }
    alarm(0);
    unlink(path);
    rmdir(dir);
}

/* Workers SIGKILLed at random instants while they write (holding a shard's lock, half-way
 * through a store, while joining), round after round over one key space: the workers that
 * live on and the parent never hang (SIGALRM fails the test) and never read a torn or foreign
 * value, and the file opens afterwards. */
static void test_mp_kill_loop(void) {
    char dir[] = "/tmp/segcache-c-mp-XXXXXX", path[256];
    segcache_config_t cfg;
    segcache_t *c = mp_begin(dir, path, sizeof path, &cfg);
    struct mp_shared *sh = mp_shared_new();
    unsigned seed = (unsigned)getpid();
    enum { ROUNDS = 20, PER_ROUND = 3 };
    _Static_assert(ROUNDS * PER_ROUND <= MP_WRITERS, "one writer number per worker");
    int present = 0, killed = 0;
    for (int round = 0; round < ROUNDS; round++) {
        pid_t pids[PER_ROUND];
        fflush(stdout);
        fflush(stderr);
        for (int j = 0; j < PER_ROUND; j++) {
            uint32_t writer = (uint32_t)(round * PER_ROUND + j);
            pids[j] = fork();
            CHECK(pids[j] >= 0);
            if (pids[j] == 0) {
                alarm(MP_ALARM);
                /* the last of each round lives on: it stops after 2000 operations and leaves */
                int bad = mp_worker(c, sh, writer, j == PER_ROUND - 1 ? 2000 : -1, seed + writer);
                _exit(bad == 0 && segcache_close(c) == SEGCACHE_OK ? 0 : 1);
            }
        }
        for (int j = 0; j < PER_ROUND - 1; j++) {
            usleep((useconds_t)(rand_r(&seed) % 15000));
            kill(pids[j], SIGKILL);
        }
        for (int j = 0; j < PER_ROUND; j++) {
            int status = 0;
            CHECK(waitpid(pids[j], &status, 0) == pids[j]);
            if (j < PER_ROUND - 1) {
                CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
                killed += WIFSIGNALED(status);
            } else {
                CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            }
        }
        CHECK(mp_verify(c, sh, 0, &present) == 0);
    }
    CHECK(killed == ROUNDS * (PER_ROUND - 1));
    CHECK(atomic_load(&sh->bad) == 0);
    CHECK(present > 0);
    /* the parent's handle works on after all those deaths */
    CHECK_ST(segcache_set(c, K("after"), K("kills"), 7, 0), SEGCACHE_OK);
    CHECK(holds(c, "after", "kills", 5, 7));
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    /* a fresh open: single-process (nobody is left holding the file), then shared again */
    cfg.multi_process = false;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    int again = 0;
    CHECK(mp_verify(c, sh, 0, &again) == 0);
    CHECK(holds(c, "after", "kills", 5, 7));
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    cfg.multi_process = true;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    CHECK(holds(c, "after", "kills", 5, 7));
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    alarm(0);
    munmap(sh, sizeof *sh);
    unlink(path);
    rmdir(dir);
}

/* What may not share a file: settings that differ from those of its users (SEGCACHE_BAD_FILE),
 * a single-process cache while it is shared and the reverse (SEGCACHE_LOCKED), no path, and
 * lazy_verify (SEGCACHE_INVALID_CONFIG); a fork child of a handle opened without multi_process
 * still gets SEGCACHE_FORKED (test_fork has the rest of that). */
static void test_mp_settings(void) {
    char dir[] = "/tmp/segcache-c-mp-XXXXXX", path[256];
    mp_dir(dir, path, sizeof path);
    segcache_config_t cfg = mp_config(path), other;
    segcache_t *a = NULL, *b = NULL;
    other = cfg;
    other.path = NULL;
    CHECK_ST(segcache_open(&other, &b), SEGCACHE_INVALID_CONFIG);
    CHECK(strstr(segcache_last_error(), "path") != NULL);
    other = cfg;
    other.lazy_verify = true;
    CHECK_ST(segcache_open(&other, &b), SEGCACHE_INVALID_CONFIG);
    CHECK(strstr(segcache_last_error(), "lazy_verify") != NULL);

    CHECK_ST(segcache_open(&cfg, &a), SEGCACHE_OK);
    CHECK_ST(segcache_set(a, K("k"), K("shared"), 5, 0), SEGCACHE_OK);
    other = cfg;
    other.eviction = SEGCACHE_POLICY_FIFO;
    CHECK_ST(segcache_open(&other, &b), SEGCACHE_BAD_FILE);
    CHECK(strstr(segcache_last_error(), "settings") != NULL);
    CHECK(b == NULL);
    other = cfg;
    other.heap_size = 16u << 20;
    CHECK_ST(segcache_open(&other, &b), SEGCACHE_BAD_FILE);
    other = cfg;
    other.shards = 2;
    CHECK_ST(segcache_open(&other, &b), SEGCACHE_BAD_FILE);
    other = cfg;
    other.multi_process = false;
    CHECK_ST(segcache_open(&other, &b), SEGCACHE_LOCKED);
    /* a second opener with the same settings joins, as another process would */
    CHECK_ST(segcache_open(&cfg, &b), SEGCACHE_OK);
    CHECK(holds(b, "k", "shared", 6, 5));
    CHECK_ST(segcache_close(a), SEGCACHE_OK);
    CHECK_ST(segcache_close(b), SEGCACHE_OK);

    /* the reverse: a single-process cache keeps shared openers out */
    CHECK_ST(segcache_open(&other, &a), SEGCACHE_OK);
    CHECK(holds(a, "k", "shared", 6, 5));
    CHECK_ST(segcache_open(&cfg, &b), SEGCACHE_LOCKED);
    CHECK_ST(segcache_close(a), SEGCACHE_OK);

    /* without multi_process an inherited handle stays the parent's; with it the child joins */
    for (int multi = 0; multi < 2; multi++) {
        other = cfg;
        other.multi_process = multi;
        CHECK_ST(segcache_open(&other, &a), SEGCACHE_OK);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            segcache_status_t want = multi ? SEGCACHE_OK : SEGCACHE_FORKED;
            int ok = segcache_set(a, K("child"), K("wrote"), 0, 0) == want && segcache_close(a) == want;
            _exit(ok ? 0 : 1);
        }
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (multi)
            CHECK(holds(a, "child", "wrote", 5, 0));
        else
            CHECK_ST(segcache_contains(a, K("child")), SEGCACHE_NOT_FOUND);
        CHECK_ST(segcache_close(a), SEGCACHE_OK);
    }
    unlink(path);
    rmdir(dir);
}

/* ---- compute ---- */

/* Adds one to a decimal value (absent: stores "1"); counts its calls. */
static int add_one(void *ud, const segcache_item_t *current, segcache_compute_t *decision) {
    atomic_int *calls = ud;
    if (calls != NULL) atomic_fetch_add(calls, 1);
    char num[32];
    unsigned long long n = 0;
    if (current != NULL) {
        size_t len = current->value_len < sizeof num - 1 ? current->value_len : sizeof num - 1;
        memcpy(num, current->value, len);
        num[len] = '\0';
        n = strtoull(num, NULL, 10);
    }
    int len = snprintf(num, sizeof num, "%llu", n + 1);
    return segcache_compute_put(decision, (const uint8_t *)num, (size_t)len, 5, 0) == SEGCACHE_OK ? 0 : -1;
}

static int remove_it(void *ud, const segcache_item_t *current, segcache_compute_t *decision) {
    (void)ud;
    (void)current;
    return segcache_compute_remove(decision) == SEGCACHE_OK ? 0 : -1;
}

static int keep_it(void *ud, const segcache_item_t *current, segcache_compute_t *decision) {
    int *seen_absent = ud;
    *seen_absent = current == NULL;
    /* A put, then changed to keep: the last decision wins. */
    if (segcache_compute_put(decision, K("ignored"), 0, 0) != SEGCACHE_OK) return -1;
    return segcache_compute_keep(decision) == SEGCACHE_OK ? 0 : -1;
}

static int failing_compute(void *ud, const segcache_item_t *current, segcache_compute_t *decision) {
    (void)ud;
    (void)current;
    segcache_compute_put(decision, K("never stored"), 0, 0);
    return 9;
}

static int huge_put(void *ud, const segcache_item_t *current, segcache_compute_t *decision) {
    (void)current;
    size_t n = 1u << 20;
    uint8_t *big = calloc(n, 1);
    segcache_status_t st = segcache_compute_put(decision, big, n, 0, 0);
    free(big);
    *(int *)ud = st == SEGCACHE_OK;
    return 0;
}

static void test_compute(void) {
    segcache_t *c = open_small(1000);
    segcache_computed_t what = SEGCACHE_COMPUTED_REMOVED;
    uint64_t cas = 0;
    char buf[64];
    segcache_meta_t meta;
    CHECK_ST(segcache_compute(c, K("n"), add_one, NULL, &what, &cas), SEGCACHE_OK);
    CHECK(what == SEGCACHE_COMPUTED_INSERTED && cas != 0);
    CHECK_ST(get_str(c, "n", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "1") == 0 && meta.flags == 5 && meta.cas == cas);
    uint64_t first = cas;
    CHECK_ST(segcache_compute(c, K("n"), add_one, NULL, &what, &cas), SEGCACHE_OK);
    CHECK(what == SEGCACHE_COMPUTED_REPLACED && cas != first); /* a write gives a new CAS value */
    CHECK_ST(get_str(c, "n", buf, sizeof buf, NULL), SEGCACHE_OK);
    CHECK(strcmp(buf, "2") == 0);
    /* memcached's CAS token read before the compute no longer matches. */
    CHECK_ST(segcache_cas(c, K("n"), K("x"), 0, 0, first), SEGCACHE_EXISTS);

    int absent = -1;
    CHECK_ST(segcache_compute(c, K("n"), keep_it, &absent, &what, &cas), SEGCACHE_OK);
    CHECK(absent == 0 && what == SEGCACHE_COMPUTED_UNCHANGED);
    CHECK_ST(get_str(c, "n", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "2") == 0 && meta.cas == cas);
    CHECK_ST(segcache_compute(c, K("missing"), keep_it, &absent, &what, &cas), SEGCACHE_OK);
    CHECK(absent == 1 && what == SEGCACHE_COMPUTED_STILL_ABSENT && cas == 0);

    /* A failing callback changes nothing and leaves the out-pointers alone. */
    what = SEGCACHE_COMPUTED_REMOVED;
    CHECK_ST(segcache_compute(c, K("n"), failing_compute, NULL, &what, NULL), SEGCACHE_LOAD_FAILED);
    CHECK(strstr(segcache_last_error(), "returned 9") != NULL);
    CHECK(what == SEGCACHE_COMPUTED_REMOVED);
    CHECK_ST(get_str(c, "n", buf, sizeof buf, NULL), SEGCACHE_OK);
    CHECK(strcmp(buf, "2") == 0);

    /* A value the cache cannot hold: TOO_LARGE, the item stays. */
    int put_ok = 0;
    CHECK_ST(segcache_compute(c, K("n"), huge_put, &put_ok, NULL, NULL), SEGCACHE_TOO_LARGE);
    CHECK(put_ok == 1);
    CHECK_ST(get_str(c, "n", buf, sizeof buf, NULL), SEGCACHE_OK);
    CHECK(strcmp(buf, "2") == 0);

    CHECK_ST(segcache_compute(c, K("n"), remove_it, NULL, &what, &cas), SEGCACHE_OK);
    CHECK(what == SEGCACHE_COMPUTED_REMOVED && cas == 0);
    CHECK_ST(get_str(c, "n", buf, sizeof buf, NULL), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_compute(c, K("n"), remove_it, NULL, &what, NULL), SEGCACHE_OK);
    CHECK(what == SEGCACHE_COMPUTED_STILL_ABSENT);

    /* Bad arguments. */
    CHECK_ST(segcache_compute(c, K("n"), NULL, NULL, NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_compute(c, NULL, 1, add_one, NULL, NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_compute(NULL, K("n"), add_one, NULL, NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_compute_put(NULL, K("v"), 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_compute_remove(NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_compute_keep(NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* Threads that each add one to one key with segcache_compute, beside threads that segcache_incr
 * it, lose no update. */
#define COMPUTE_THREADS 8
#define COMPUTE_EACH 500

struct compute_arg {
    segcache_t *c;
    int incr;
    atomic_int *calls;
    int errors;
};

static void *compute_worker(void *p) {
    struct compute_arg *a = p;
    for (int i = 0; i < COMPUTE_EACH; i++) {
        segcache_status_t st = a->incr ? segcache_incr(a->c, K("hot"), 1, NULL)
                                       : segcache_compute(a->c, K("hot"), add_one, a->calls, NULL, NULL);
        if (st != SEGCACHE_OK) a->errors++;
    }
    return NULL;
}

static void test_compute_threads(void) {
    segcache_t *c = open_small(0);
    CHECK_ST(segcache_set(c, K("hot"), K("0"), 0, 0), SEGCACHE_OK);
    atomic_int calls = 0;
    pthread_t t[COMPUTE_THREADS];
    struct compute_arg args[COMPUTE_THREADS];
    for (int i = 0; i < COMPUTE_THREADS; i++) {
        args[i] = (struct compute_arg){.c = c, .incr = i % 4 == 3, .calls = &calls};
        pthread_create(&t[i], NULL, compute_worker, &args[i]);
    }
    int errors = 0;
    for (int i = 0; i < COMPUTE_THREADS; i++) {
        pthread_join(t[i], NULL);
        errors += args[i].errors;
    }
    CHECK(errors == 0);
    CHECK(atomic_load(&calls) == (COMPUTE_THREADS - COMPUTE_THREADS / 4) * COMPUTE_EACH);
    char buf[32], want[32];
    snprintf(want, sizeof want, "%d", COMPUTE_THREADS * COMPUTE_EACH);
    CHECK_ST(get_str(c, "hot", buf, sizeof buf, NULL), SEGCACHE_OK);
    CHECK(strcmp(buf, want) == 0);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* ---- eviction listener ---- */

struct heard {
    segcache_t *c;
    int by_cause[4];
    char last_key[4][32];
    char last_value[4][32];
    int reentered; /* calls into the cache from the callback that did what they should */
};

static void copy_str(char *dst, const uint8_t *src, size_t len) {
    if (len > 31) len = 31;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static void listen(void *ud, const segcache_item_t *item, segcache_removal_cause_t cause) {
    struct heard *h = ud;
    h->by_cause[cause]++;
    copy_str(h->last_key[cause], item->key, item->key_len);
    copy_str(h->last_value[cause], item->value, item->value_len);
    /* Back into the same cache, the same key: the call that removed it holds no lock now. */
    if (cause == SEGCACHE_REMOVAL_REMOVED && item->key_len == 6 && memcmp(item->key, "bounce", 6) == 0) {
        char buf[32];
        if (get_str(h->c, "bounce", buf, sizeof buf, NULL) == SEGCACHE_NOT_FOUND) h->reentered++;
        if (segcache_set(h->c, K("bounce"), K("back"), 0, 0) == SEGCACHE_OK) h->reentered++;
        /* A failing call here leaves the outer call's last error alone. */
        segcache_delete(h->c, K("never-there"));
    }
}

static void test_eviction_listener(void) {
    segcache_t *c = open_small(1000);
    struct heard h = {.c = c};
    char buf[32];
    CHECK_ST(segcache_set_eviction_listener(c, listen, &h), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("k"), K("one"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, K("k"), K("two"), 0, 0), SEGCACHE_OK);
    CHECK(h.by_cause[SEGCACHE_REMOVAL_REPLACED] == 1 && strcmp(h.last_value[SEGCACHE_REMOVAL_REPLACED], "one") == 0);
    CHECK_ST(segcache_compute(c, K("k"), add_one, NULL, NULL, NULL), SEGCACHE_OK);
    CHECK(h.by_cause[SEGCACHE_REMOVAL_REPLACED] == 2 && strcmp(h.last_value[SEGCACHE_REMOVAL_REPLACED], "two") == 0);

    CHECK_ST(segcache_set(c, K("bounce"), K("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_delete(c, K("bounce")), SEGCACHE_OK);
    CHECK(h.by_cause[SEGCACHE_REMOVAL_REMOVED] == 1 && strcmp(h.last_key[SEGCACHE_REMOVAL_REMOVED], "bounce") == 0);
    CHECK(h.reentered == 2);
    CHECK_ST(get_str(c, "bounce", buf, sizeof buf, NULL), SEGCACHE_OK);
    CHECK(strcmp(buf, "back") == 0);
    /* The outer call's last error is its own. */
    CHECK_ST(segcache_delete(c, K("absent")), SEGCACHE_NOT_FOUND);
    CHECK(strcmp(segcache_last_error(), "not found") == 0);

    CHECK_ST(segcache_set(c, K("short"), K("lived"), 0, 5), SEGCACHE_OK);
    CHECK_ST(segcache_advance_clock(c, 10), SEGCACHE_OK);
    size_t expired = 0;
    CHECK_ST(segcache_expire(c, &expired), SEGCACHE_OK);
    CHECK(h.by_cause[SEGCACHE_REMOVAL_EXPIRED] == 1 && strcmp(h.last_key[SEGCACHE_REMOVAL_EXPIRED], "short") == 0);

    /* Evictions happen inside sets: each is told of after its set returns. */
    uint8_t value[1000];
    memset(value, 'x', sizeof value);
    for (int i = 0; i < 20000 && h.by_cause[SEGCACHE_REMOVAL_EVICTED] == 0; i++) {
        char key[32];
        int len = snprintf(key, sizeof key, "fill%d", i);
        CHECK_ST(segcache_set(c, (const uint8_t *)key, (size_t)len, value, sizeof value, 0, 0), SEGCACHE_OK);
    }
    CHECK(h.by_cause[SEGCACHE_REMOVAL_EVICTED] > 0);
    CHECK(strncmp(h.last_key[SEGCACHE_REMOVAL_EVICTED], "fill", 4) == 0);

    /* NULL removes the listener. */
    CHECK_ST(segcache_set_eviction_listener(c, NULL, NULL), SEGCACHE_OK);
    int removed = h.by_cause[SEGCACHE_REMOVAL_REMOVED];
    CHECK_ST(segcache_delete(c, K("k")), SEGCACHE_OK);
    CHECK(h.by_cause[SEGCACHE_REMOVAL_REMOVED] == removed);
    CHECK_ST(segcache_set_eviction_listener(NULL, listen, &h), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
}

/* The example of docs/c.md's "Compute and the removal listener", as written there. */
static int doc_add_one(void *user_data, const segcache_item_t *current, segcache_compute_t *decision) {
    (void)user_data;
    char num[24] = "0";
    if (current != NULL && current->value_len < sizeof num) {
        memcpy(num, current->value, current->value_len);
        num[current->value_len] = '\0';
    }
    int len = snprintf(num, sizeof num, "%llu", strtoull(num, NULL, 10) + 1);
    return segcache_compute_put(decision, (const uint8_t *)num, (size_t)len, /*flags*/ 0, /*ttl*/ 0) == SEGCACHE_OK
               ? 0 : -1; /* non-zero: change nothing, SEGCACHE_LOAD_FAILED */
}

static void doc_on_removal(void *user_data, const segcache_item_t *item, segcache_removal_cause_t cause) {
    (void)item;
    int *replaced = user_data;
    if (cause == SEGCACHE_REMOVAL_REPLACED) ++*replaced; /* item: the old version */
}

static void test_doc_compute_and_listener(void) {
    segcache_t *cache = open_small(0);
    int replaced = 0;
    segcache_set_eviction_listener(cache, doc_on_removal, &replaced);
    segcache_computed_t what;
    uint64_t cas;
    segcache_compute(cache, (const uint8_t *)"hits", 4, doc_add_one, NULL, &what, &cas); /* INSERTED, "1" */
    CHECK(what == SEGCACHE_COMPUTED_INSERTED && replaced == 0);
    segcache_compute(cache, (const uint8_t *)"hits", 4, doc_add_one, NULL, &what, &cas); /* REPLACED, "2" */
    CHECK(what == SEGCACHE_COMPUTED_REPLACED && replaced == 1);
    segcache_set_eviction_listener(cache, NULL, NULL);
    char buf[8];
    segcache_meta_t meta;
    CHECK_ST(get_str(cache, "hits", buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, "2") == 0 && meta.cas == cas);
    CHECK_ST(segcache_close(cache), SEGCACHE_OK);
}

/* A flash tier: its settings are checked, each with a status, and the items eviction takes out
 * of a heap of 8 segments come back from the tier file with their values and flags. */
/* The value test_tier and test_tier_resize store under their key i: 210-275 bytes. */
static void tier_value(int i, char *val, size_t cap) {
    int n = snprintf(val, cap, "value-%d-", i);
    memset(val + n, 'a' + i % 26, 200 + i % 64);
    val[n + 200 + i % 64] = '\0';
}

/* What the process killed in test_tier stores under tier-%d: 200-273 bytes. */
static void killed_value(int i, char *val, size_t cap) {
    int n = snprintf(val, cap, "killed-%d-", i);
    memset(val + n, 'A' + i % 26, 190 + i % 64);
    val[n + 190 + i % 64] = '\0';
}

/* Stores keys `prefix`0 to `prefix`(n-1), key i with value(i) and flags i. */
static void store_keys(segcache_t *c, const char *prefix, int n, void (*value)(int, char *, size_t)) {
    char key[32], val[300];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "%s%d", prefix, i);
        value(i, val, sizeof val);
        CHECK_ST(segcache_set(c, K(key), K(val), (uint32_t)i, 0), SEGCACHE_OK);
    }
}

/* Checks that each of the keys store_keys stored is there with its value and flags. */
static void check_keys(segcache_t *c, const char *prefix, int n, void (*value)(int, char *, size_t)) {
    char key[32], val[300], buf[300];
    int wrong = 0, missing = 0;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "%s%d", prefix, i);
        value(i, val, sizeof val);
        segcache_meta_t meta;
        segcache_status_t got = get_str(c, key, buf, sizeof buf, &meta);
        if (got != SEGCACHE_OK) {
            missing++;
        } else if (strcmp(buf, val) != 0 || meta.flags != (uint32_t)i) {
            wrong++;
        }
    }
    CHECK(missing == 0);
    CHECK(wrong == 0);
}

static void test_tier(void) {
    char dir[] = "/tmp/segcache-c-tier-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char tier[256], heap[256];
    snprintf(tier, sizeof tier, "%s/tier.dat", dir);
    snprintf(heap, sizeof heap, "%s/heap.dat", dir);

    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 512u << 10;
    cfg.segment_size = 64u << 10;
    cfg.shards = 1;
    cfg.eviction = SEGCACHE_POLICY_MERGE;
    segcache_t *c = (segcache_t *)&cfg;

    segcache_config_t bad = cfg;
    bad.tier_size = 8u << 20;
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_CONFIG);
    CHECK(c == NULL);
    CHECK(strstr(segcache_last_error(), "tier_path") != NULL);
    bad = cfg;
    bad.tier_path = tier;
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_CONFIG);
    CHECK(strstr(segcache_last_error(), "tier_size") != NULL);
    bad.tier_path = "";
    bad.tier_size = 8u << 20;
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strstr(segcache_last_error(), "tier_path") != NULL);
    bad.tier_path = tier;
    bad.tier_size = (8u << 20) + 1;
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_CONFIG);
    CHECK(strstr(segcache_last_error(), "tier") != NULL);
    bad.tier_size = 64u << 10; /* one segment: at least two */
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_CONFIG);
    bad.tier_size = 8u << 20;
    bad.path = tier; /* the heap's own file */
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_CONFIG);
    bad.path = heap;
    bad.multi_process = true;
    CHECK_ST(segcache_open(&bad, &c), SEGCACHE_INVALID_CONFIG);
    CHECK(c == NULL);

    cfg.tier_path = tier;
    cfg.tier_size = 8u << 20;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    enum { N = 6000 };
    char key[32], val[300], buf[300];
    store_keys(c, "tier-", N, tier_value); /* about 2 MiB: four times the heap */
    segcache_stats_t st;
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.flash_demoted > N / 2);
    CHECK(st.flash_items > N / 2);
    CHECK(st.evicted_items == 0);
    check_keys(c, "tier-", N, tier_value);
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.flash_hits > N / 2);
    CHECK(st.flash_bad_reads == 0);
    /* A write to an item on flash sees it: add fails, delete removes it. */
    CHECK_ST(segcache_add(c, K("tier-0"), K("other"), 0, 0), SEGCACHE_NOT_STORED);
    CHECK_ST(segcache_delete(c, K("tier-1")), SEGCACHE_OK);
    CHECK_ST(get_str(c, "tier-1", buf, sizeof buf, NULL), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.flash_promoted == 0);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);

    /* Promotion on read: with tier_promote_after 1, a read on the tier brings its item back to
     * memory at the next write, and the read after it is not one of the tier's. */
    cfg.tier_promote_after = 1;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    memset(val, 'p', 250); /* 6000 of them: three times the heap */
    val[250] = '\0';
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "tier-%d", i);
        CHECK_ST(segcache_set(c, K(key), K(val), 7, 0), SEGCACHE_OK);
    }
    /* The first key whose read the tier serves. */
    int on_tier = 0;
    for (uint64_t hits = 0; hits == 0; on_tier++) {
        snprintf(key, sizeof key, "tier-%d", on_tier);
        CHECK_ST(get_str(c, key, buf, sizeof buf, NULL), SEGCACHE_OK);
        CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
        hits = st.flash_hits;
        CHECK(on_tier < N);
    }
    CHECK_ST(segcache_set(c, K("unrelated"), K("x"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.flash_promoted == 1);
    uint64_t flash_hits = st.flash_hits;
    segcache_meta_t meta;
    CHECK_ST(get_str(c, key, buf, sizeof buf, &meta), SEGCACHE_OK);
    CHECK(strcmp(buf, val) == 0 && meta.flags == 7);
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.flash_hits == flash_hits);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);

    /* Without a write queue, a process killed right after its last store loses none of what
     * eviction sent to the tier: with a heap file, every item comes back. */
    cfg.tier_promote_after = 0;
    cfg.tier_write_queue = 0;
    cfg.path = heap;
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (segcache_open(&cfg, &c) != SEGCACHE_OK) _exit(2);
        store_keys(c, "tier-", N, killed_value);
        raise(SIGKILL);
        _exit(4);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.flash_items > N / 2);
    check_keys(c, "tier-", N, killed_value);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    unlink(heap);
    unlink(tier);
    rmdir(dir);
}

/* resize_file with a flash tier: a larger heap and tier keep every item, those that were on the
 * tier included, with their values and flags; nothing is left aside. */
static void test_tier_resize(void) {
    char dir[] = "/tmp/segcache-c-tier-resize-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char tier[256], heap[256], aside[300];
    snprintf(tier, sizeof tier, "%s/tier.dat", dir);
    snprintf(heap, sizeof heap, "%s/heap.dat", dir);

    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 512u << 10;
    cfg.segment_size = 64u << 10;
    cfg.shards = 1;
    cfg.eviction = SEGCACHE_POLICY_FIFO;
    cfg.path = heap;
    cfg.tier_path = tier;
    cfg.tier_size = 8u << 20;
    segcache_t *c = NULL;
    CHECK_ST(segcache_open(&cfg, &c), SEGCACHE_OK);
    enum { N = 6000 };
    store_keys(c, "tier-resize-", N, tier_value);
    segcache_stats_t st;
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.flash_items > N / 2);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);

    segcache_config_t sized = cfg;
    sized.heap_size = 1u << 20;
    sized.tier_size = 16u << 20;
    sized.resize_file = true;
    c = NULL;
    CHECK_ST(segcache_open(&sized, &c), SEGCACHE_OK);
    check_keys(c, "tier-resize-", N, tier_value);
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.flash_items > N / 4);
    CHECK_ST(segcache_close(c), SEGCACHE_OK);
    snprintf(aside, sizeof aside, "%s.resizing", heap);
    CHECK(access(aside, F_OK) != 0);
    snprintf(aside, sizeof aside, "%s.resizing", tier);
    CHECK(access(aside, F_OK) != 0);
    unlink(tier);
    unlink(heap);
    rmdir(dir);
}

int main(int argc, char **argv) {
    /* the spawn test runs this binary again: argv[0] when it names a path (valgrind runs the
     * test binary from it too), else what the kernel says */
    static char exe[4096];
    ssize_t exe_len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (exe_len > 0) exe[exe_len] = '\0';
    self_path = strchr(argv[0], '/') != NULL || exe_len <= 0 ? argv[0] : exe;
    if (argc == 4 && strcmp(argv[1], "--mp-spawn-child") == 0) return mp_spawn_child(argv[2], atoi(argv[3]));
    test_version_and_strerror();
    test_config_default();
    test_open_errors();
    test_set_get();
    test_too_large();
    test_no_memory();
    test_bad_arguments();
    test_add_replace_cas();
    test_append_prepend();
    test_incr_decr();
    test_delete_touch_ttl();
    test_flush_expire();
    test_get_with_and_many();
    test_scan();
    test_state_stale_while_revalidate();
    test_state_store_and_delete_cas();
    test_state_bad_arguments();
    test_state_one_winner();
    test_stats();
    test_panic();
    test_threads();
    test_persistence();
    test_prefault();
    test_memory_limit_grows();
    test_touch_ahead();
    test_no_space_and_sync();
    test_oversized_arguments();
    test_fork();
    test_rewrites();
    test_get_or_load();
    test_get_or_load_threads();
    test_compute();
    test_compute_threads();
    test_eviction_listener();
    test_doc_compute_and_listener();
    test_tier();
    test_tier_resize();
    test_mp_settings();
    test_mp_prefork();
    test_mp_spawn();
    test_mp_kill_loop();
    printf("test_segcache: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
