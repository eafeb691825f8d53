// spymemcached (net.spy:spymemcached) over a pool with KETAMA consistent hashing: fills the pool,
// then reads keys drawn uniformly at random until its stdin closes, refilling each miss (as an
// application in front of a database would), and counts what it saw per time slice.
//
// Usage: java -cp 'lib/*:classes' ClusterReader HOST:PORT,HOST:PORT,... KEYS VALUE_BYTES SLICE_MS SEED
// Prints "filled OK ERRORS" once the fill is acknowledged, then, after stdin closes, one line per
// slice: "slice INDEX HITS MISSES ERRORS WRONG", INDEX being the Unix time in ms divided by
// SLICE_MS. A hit whose value is not the one stored for its key counts as WRONG.

import java.util.Arrays;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import net.spy.memcached.AddrUtil;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.ConnectionFactoryBuilder.Locator;
import net.spy.memcached.DefaultHashAlgorithm;
import net.spy.memcached.FailureMode;
import net.spy.memcached.MemcachedClient;

public class ClusterReader {
  /** The value stored for a key: the key and a bar, repeated to the length (cluster/clients.py). */
  static byte[] value(String key, int len) {
    byte[] unit = (key + "|").getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    byte[] v = new byte[len];
    for (int i = 0; i < len; i++) {
      v[i] = unit[i % unit.length];
    }
    return v;
  }

  static String key(int i) {
    return "cluster:" + i;
  }

  public static void main(String[] args) throws Exception {
    String servers = args[0].replace(',', ' ');
    int keys = Integer.parseInt(args[1]);
    int valueBytes = Integer.parseInt(args[2]);
    long sliceMs = Long.parseLong(args[3]);
    Random random = new Random(Long.parseLong(args[4]));

    // KETAMA: libmemcached's ketama points (MD5 of "host:port-N"), so a key lands on the node
    // pylibmc's ketama picks. FailureMode.Cancel: a request to a node that is down fails at once
    // instead of moving to another node (Redistribute would send its keys to nodes that never
    // held them, and back again when it returns). Reconnect after a second at most.
    ConnectionFactoryBuilder f = new ConnectionFactoryBuilder()
        .setLocatorType(Locator.CONSISTENT)
        .setHashAlg(DefaultHashAlgorithm.KETAMA_HASH)
        .setFailureMode(FailureMode.Cancel)
        .setMaxReconnectDelay(1)
        .setOpTimeout(1000);
    MemcachedClient c = new MemcachedClient(f.build(), AddrUtil.getAddresses(servers));

    int ok = 0;
    int errors = 0;
    Future<?>[] pending = new Future<?>[keys];
    for (int i = 0; i < keys; i++) {
      pending[i] = c.set(key(i), 0, value(key(i), valueBytes));
    }
    for (Future<?> p : pending) {
      try {
        if (Boolean.TRUE.equals(p.get(10, TimeUnit.SECONDS))) {
          ok++;
        } else {
          errors++;
        }
      } catch (Exception e) {
        errors++;
      }
    }
    System.out.println("filled " + ok + " " + errors);
    System.out.flush();

    AtomicBoolean stop = new AtomicBoolean(false);
    Thread watcher = new Thread(() -> {
      try {
        while (System.in.read() != -1) {
          // Only the end of input matters.
        }
      } catch (java.io.IOException e) {
        // A broken stdin ends the run as its end does.
      }
      stop.set(true);
    });
    watcher.setDaemon(true);
    watcher.start();

    // slice index -> {hits, misses, errors, wrong}
    TreeMap<Long, long[]> slices = new TreeMap<>();
    while (!stop.get()) {
      String k = key(random.nextInt(keys));
      int outcome;
      try {
        Object got = c.get(k);
        if (got == null) {
          outcome = 1;
          c.set(k, 0, value(k, valueBytes));
        } else {
          outcome = got instanceof byte[] && Arrays.equals((byte[]) got, value(k, valueBytes)) ? 0 : 3;
        }
      } catch (Exception e) {
        outcome = 2;
      }
      long slice = System.currentTimeMillis() / sliceMs;
      slices.computeIfAbsent(slice, s -> new long[4])[outcome]++;
    }
    for (Map.Entry<Long, long[]> e : slices.entrySet()) {
      long[] n = e.getValue();
      System.out.println("slice " + e.getKey() + " " + n[0] + " " + n[1] + " " + n[2] + " " + n[3]);
    }
    System.out.flush();
    c.shutdown(2, TimeUnit.SECONDS);
  }
}
