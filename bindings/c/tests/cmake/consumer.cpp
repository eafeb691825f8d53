// Built through find_package(segcache) as C++17: the wrapper stores an item and reads it back.
#include <cstdio>

#include <segcache.hpp>

int main() {
    segcache::Cache cache(segcache::Config().heap_size(4u << 20).segment_size(1u << 20));
    cache.set("k", "from cmake, C++");
    auto item = cache.get("k");
    bool ok = item && item->value == "from cmake, C++";
    std::printf("consumer_cpp: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
