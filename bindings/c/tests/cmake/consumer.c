/* Built through find_package(segcache): stores an item, reads it back, prints "consumer: ok". */
#include <stdio.h>
#include <string.h>

#include <segcache.h>

int main(void) {
    segcache_config_t cfg;
    segcache_config_default(&cfg);
    cfg.heap_size = 4u << 20;
    cfg.segment_size = 1u << 20;
    segcache_t *cache = NULL;
    if (segcache_open(&cfg, &cache) != SEGCACHE_OK) {
        fprintf(stderr, "open: %s\n", segcache_last_error());
        return 1;
    }
    const char *key = "k", *value = "from cmake";
    char buf[32];
    size_t len = 0;
    segcache_status_t set = segcache_set(cache, (const uint8_t *)key, 1, (const uint8_t *)value, strlen(value), 0, 0);
    segcache_status_t get = segcache_get(cache, (const uint8_t *)key, 1, (uint8_t *)buf, sizeof buf, &len, NULL);
    int ok = set == SEGCACHE_OK && get == SEGCACHE_OK && len == strlen(value) && memcmp(buf, value, len) == 0;
    if (segcache_close(cache) != SEGCACHE_OK) ok = 0;
    printf("consumer: %s (library %s)\n", ok ? "ok" : "FAILED", segcache_version());
    return ok ? 0 : 1;
}
