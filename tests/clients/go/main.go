// gomemcache (github.com/bradfitz/gomemcache, text protocol): the scripted scenario.
// Usage: gomemcache-scenario HOST:PORT. Prints one line per step of what the user sees
// (see ../common.py for the line format).
package main

import (
	"crypto/sha1"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case error:
		return "error " + x.Error()
	case []byte:
		if len(x) > 64 {
			sum := sha1.Sum(x)
			return fmt.Sprintf("<%d bytes sha1 %x>", len(x), sum[:6])
		}
		return fmt.Sprintf("%q", x)
	case *memcache.Item:
		if x == nil {
			return "nil"
		}
		return fmt.Sprintf("item %s=%s flags=%d", x.Key, show(x.Value), x.Flags)
	case map[string]*memcache.Item:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+":"+show(x[k].Value))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	default:
		return fmt.Sprintf("%v", x)
	}
}

func step(name string, v any, err error) {
	if err != nil {
		// Name the sentinel errors the way a user tests for them.
		for _, s := range []error{memcache.ErrCacheMiss, memcache.ErrCASConflict, memcache.ErrNotStored, memcache.ErrMalformedKey, memcache.ErrNoServers} {
			if errors.Is(err, s) {
				fmt.Printf("%s: error %v\n", name, err)
				return
			}
		}
		fmt.Printf("%s: error %T: %v\n", name, err, err)
		return
	}
	fmt.Printf("%s: %s\n", name, show(v))
}

func main() {
	c := memcache.New(os.Args[1])
	c.Timeout = 5 * time.Second
	big := make([]byte, 500*1024)
	for i := range big {
		big[i] = byte((i*31 + 7) % 251)
	}

	step("basic flush", "ok", c.FlushAll())
	step("basic ping", "ok", c.Ping())
	it, err := c.Get("miss")
	step("basic miss", it, err)
	step("basic set", "ok", c.Set(&memcache.Item{Key: "k1", Value: []byte("v1")}))
	it, err = c.Get("k1")
	step("basic get", it, err)
	step("basic add-existing", "ok", c.Add(&memcache.Item{Key: "k1", Value: []byte("x")}))
	step("basic add-new", "ok", c.Add(&memcache.Item{Key: "k2", Value: []byte("v2")}))
	step("basic replace-missing", "ok", c.Replace(&memcache.Item{Key: "nope", Value: []byte("x")}))
	step("basic replace", "ok", c.Replace(&memcache.Item{Key: "k2", Value: []byte("v2r")}))
	m, err := c.GetMulti([]string{"k1", "k2", "miss"})
	step("basic multi-get", m, err)
	step("basic flags", "ok", c.Set(&memcache.Item{Key: "fl", Value: []byte("x"), Flags: 123456}))
	it, err = c.Get("fl")
	step("basic flags-get", it, err)
	step("basic bad-key", "ok", c.Set(&memcache.Item{Key: "has space", Value: []byte("x")}))

	item, err := c.Get("k1")
	step("cas get", item, err)
	if item != nil {
		item.Value = []byte("v1b")
		step("cas ok", "ok", c.CompareAndSwap(item))
		item.Value = []byte("v1c")
		step("cas stale", "ok", c.CompareAndSwap(item))
		item.Key = "nocas"
		step("cas missing", "ok", c.CompareAndSwap(item))
	}
	it, err = c.Get("k1")
	step("cas get-after", it, err)

	step("counter set", "ok", c.Set(&memcache.Item{Key: "n", Value: []byte("10")}))
	n, err := c.Increment("n", 5)
	step("counter incr", n, err)
	n, err = c.Decrement("n", 20)
	step("counter decr", n, err)
	n, err = c.Increment("n", 18446744073709551615)
	step("counter incr-big", n, err)
	n, err = c.Increment("n", 2)
	step("counter incr-wrap", n, err)
	n, err = c.Increment("nonum", 1)
	step("counter missing", n, err)
	n, err = c.Increment("k1", 1)
	step("counter non-numeric", n, err)

	step("concat append", "ok", c.Append(&memcache.Item{Key: "k1", Value: []byte("+a")}))
	step("concat prepend", "ok", c.Prepend(&memcache.Item{Key: "k1", Value: []byte("p-")}))
	it, err = c.Get("k1")
	step("concat get", it, err)
	step("concat append-missing", "ok", c.Append(&memcache.Item{Key: "nope", Value: []byte("x")}))

	step("touch existing", "ok", c.Touch("k2", 100))
	step("touch missing", "ok", c.Touch("nope", 100))
	it, err = c.GetAndTouch("k2", 200)
	step("touch gat", it, err)
	it, err = c.GetAndTouch("nope", 200)
	step("touch gat-missing", it, err)

	step("delete existing", "ok", c.Delete("k1"))
	step("delete again", "ok", c.Delete("k1"))
	it, err = c.Get("k1")
	step("delete get", it, err)

	step("large set", "ok", c.Set(&memcache.Item{Key: "big", Value: big}))
	it, err = c.Get("big")
	step("large get", it, err)
	m, err = c.GetMulti([]string{"big", "k2"})
	step("large multi-get", m, err)
	step("large too-big", "ok", c.Set(&memcache.Item{Key: "huge", Value: make([]byte, 2*1024*1024)}))
	// 500 KiB + 600 KiB is past the 1 MiB item limit: not stored, the item unchanged.
	step("large append-past-limit", "ok", c.Append(&memcache.Item{Key: "big", Value: make([]byte, 600*1024)}))
	step("large prepend-past-limit", "ok", c.Prepend(&memcache.Item{Key: "big", Value: make([]byte, 600*1024)}))
	it, err = c.Get("big")
	step("large get-after-append", it, err)
	// TTLs past 30 days are absolute Unix times: one an hour ahead keeps the item, one
	// in 1970 (30 days + 1 s) expires it at once.
	step("expiry absolute-future", "ok", c.Set(&memcache.Item{Key: "abs", Value: []byte("a"), Expiration: int32(time.Now().Unix() + 3600)}))
	it, err = c.Get("abs")
	step("expiry absolute-future-get", it, err)
	step("expiry absolute-past", "ok", c.Set(&memcache.Item{Key: "abs", Value: []byte("a"), Expiration: 30*24*3600 + 1}))
	it, err = c.Get("abs")
	step("expiry absolute-past-get", it, err)
	step("expiry touch-absolute-future", "ok", c.Touch("k2", int32(time.Now().Unix()+3600)))
	it, err = c.Get("k2")
	step("expiry touch-absolute-future-get", it, err)

	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("many/%03d", i)
		if i%3 == 0 {
			c.Set(&memcache.Item{Key: keys[i], Value: []byte(keys[i])})
		}
	}
	m, err = c.GetMulti(keys)
	step("many get-multi-300", len(m), err)

	step("misc delete-all", "ok", c.DeleteAll())
	it, err = c.Get("k2")
	step("misc get-after-delete-all", it, err)
}
