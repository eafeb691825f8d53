/*
 * Times get (hit, copy into a caller buffer) and set through the C API: N items with 16-byte
 * keys and 64-byte values, in a random order. Its twin, segcache-ffi/examples/bench_rust.rs,
 * does the same operations in the same order on the Rust SharedCache, so the difference is what
 * the FFI adds. Keys are formatted before the clock starts.
 *
 *   bench_c [items=1000000] [reps=5]   -> prints "c set_ns=<median> get_ns=<median>"
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "segcache.h"

#define KEY_LEN 16
#define VALUE_LEN 64

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) { /* xorshift64*, the same in bench_rust.rs */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static void shuffle(uint32_t *a, size_t n) {
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(next_rand() % (i + 1));
        uint32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The timed loops are functions of their own (never inlined) so that
 * `valgrind --tool=callgrind --toggle-collect=run_gets` can count their instructions alone. */
__attribute__((noinline)) int run_sets(segcache_t *c, const char *keys, const uint32_t *order, size_t n,
                                       const uint8_t *value) {
    for (size_t i = 0; i < n; i++) {
        const uint8_t *k = (const uint8_t *)keys + (size_t)order[i] * KEY_LEN;
        if (segcache_set(c, k, KEY_LEN, value, VALUE_LEN, 0, 0) != SEGCACHE_OK) {
            fprintf(stderr, "set: %s\n", segcache_last_error());
            return 1;
        }
    }
    return 0;
}

__attribute__((noinline)) size_t run_gets(segcache_t *c, const char *keys, const uint32_t *order, size_t n,
                                          uint64_t *checksum) {
    uint8_t buf[VALUE_LEN];
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *k = (const uint8_t *)keys + (size_t)order[i] * KEY_LEN;
        size_t len;
        if (segcache_get(c, k, KEY_LEN, buf, sizeof buf, &len, NULL) == SEGCACHE_OK) {
            hits++;
            *checksum += buf[len - 1];
        }
    }
    return hits;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (n == 0 || reps <= 0 || reps > 100) return 2;
    char *keys = malloc(n * KEY_LEN);
    uint32_t *set_order = malloc(n * sizeof *set_order), *get_order = malloc(n * sizeof *get_order);
    if (!keys || !set_order || !get_order) return 2;
    for (size_t i = 0; i < n; i++) {
        char tmp[32];
        snprintf(tmp, sizeof tmp, "key-%012zu", i);
        memcpy(keys + i * KEY_LEN, tmp, KEY_LEN);
        set_order[i] = get_order[i] = (uint32_t)i;
    }
    shuffle(set_order, n);
    shuffle(get_order, n);
    uint8_t value[VALUE_LEN];
    for (int i = 0; i < VALUE_LEN; i++) value[i] = (uint8_t)('a' + i % 26);

    double set_ns[100], get_ns[100];
    uint64_t checksum = 0;
    for (int r = 0; r < reps; r++) {
        segcache_config_t cfg;
        segcache_config_default(&cfg);
        cfg.heap_size = 512u << 20;
        cfg.segment_size = 1u << 20;
        cfg.shards = 8;
        segcache_t *c = NULL;
        if (segcache_open(&cfg, &c) != SEGCACHE_OK) {
            fprintf(stderr, "open: %s\n", segcache_last_error());
            return 1;
        }
        double t0 = now_ns();
        if (run_sets(c, keys, set_order, n, value) != 0) return 1;
        double t1 = now_ns();
        size_t hits = run_gets(c, keys, get_order, n, &checksum);
        double t2 = now_ns();
        if (hits != n) {
            fprintf(stderr, "only %zu of %zu gets hit\n", hits, n);
            return 1;
        }
        set_ns[r] = (t1 - t0) / (double)n;
        get_ns[r] = (t2 - t1) / (double)n;
        segcache_close(c);
    }
    qsort(set_ns, (size_t)reps, sizeof(double), cmp_double);
    qsort(get_ns, (size_t)reps, sizeof(double), cmp_double);
    printf("c set_ns=%.1f get_ns=%.1f checksum=%llu\n", set_ns[reps / 2], get_ns[reps / 2],
           (unsigned long long)checksum);
    free(keys);
    free(set_order);
    free(get_order);
    return 0;
}
