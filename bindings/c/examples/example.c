/*
 * A minimal program using libsegcache: open a cache, store and read an item, count hits, close.
 * Build:  cc -std=c11 example.c $(pkg-config --cflags --libs segcache) -o example
 */
#include <stdio.h>
#include <string.h>

#include <segcache.h>

static int fail(const char *what, segcache_status_t st) {
    fprintf(stderr, "%s: %s (%s)\n", what, segcache_strerror(st), segcache_last_error());
    return 1;
}

int main(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 16u << 20;   /* 16 MiB of items */
    cfg.segment_size = 1u << 20; /* in 1 MiB segments */

    segcache_t *cache = NULL;
    segcache_status_t st = segcache_open(&cfg, &cache);
    if (st != SEGCACHE_OK) return fail("segcache_open", st);

    const char *key = "greeting", *value = "hello from segcache";
    st = segcache_set(cache, (const uint8_t *)key, strlen(key), (const uint8_t *)value, strlen(value),
                      /*flags=*/0, /*ttl seconds, 0 = never=*/60);
    if (st != SEGCACHE_OK) return fail("segcache_set", st);

    char buf[64];
    size_t len = 0;
    segcache_meta_t meta;
    st = segcache_get(cache, (const uint8_t *)key, strlen(key), (uint8_t *)buf, sizeof buf - 1, &len, &meta);
    if (st != SEGCACHE_OK) return fail("segcache_get", st);
    buf[len] = '\0';
    printf("%s = \"%s\" (ttl %us)\n", key, buf, meta.ttl);

    st = segcache_get(cache, (const uint8_t *)"nope", 4, (uint8_t *)buf, sizeof buf, &len, NULL);
    printf("nope: %s\n", segcache_strerror(st));

    segcache_stats_t stats;
    segcache_stats(cache, &stats);
    printf("items %llu, hits %llu, shards %llu, library %s\n", (unsigned long long)stats.items,
           (unsigned long long)stats.get_hits, (unsigned long long)stats.shards, segcache_version());

    st = segcache_close(cache);
    if (st != SEGCACHE_OK) return fail("segcache_close", st);
    return 0;
}
