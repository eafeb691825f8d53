// spymemcached (net.spy:spymemcached) over a pool with KETAMA consistent hashing: fills the pool,
// then reads keys drawn uniformly at random until its stdin closes, refilling each miss (as an
// application in front of a database would), and counts what it saw per time slice.
//
// Usage: java -cp 'lib/*:classes' ClusterReader HOST:PORT,... KEYS VALUE_BYTES SLICE_MS SEED [fill|read]
// Prints "filled OK ERRORS" once the fill is acknowledged ("read": no fill, the pool was filled
// by another client), then, after stdin closes, one line per slice: "slice INDEX HITS MISSES
// ERRORS WRONG", INDEX being the Unix time in ms divided by SLICE_MS. A hit whose value is not
// the one stored for its key counts as WRONG. Values are stored as raw bytes with flags 0, as
// libmemcached and pymemcache store bytes, so that every client of the pool reads them alike.

import java.util.Arrays;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.net.InetSocketAddress;
import java.util.List;
import net.spy.memcached.AddrUtil;
import net.spy.memcached.CachedData;
import net.spy.memcached.DefaultConnectionFactory;
import net.spy.memcached.DefaultHashAlgorithm;
import net.spy.memcached.FailureMode;
import net.spy.memcached.KetamaNodeLocator;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.MemcachedNode;
import net.spy.memcached.NodeLocator;
import net.spy.memcached.transcoders.Transcoder;
import net.spy.memcached.util.DefaultKetamaNodeLocatorConfiguration;

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

  /** Raw bytes, flags 0 (spymemcached's default transcoder marks a byte[] with its own flag). */
  static final class Raw implements Transcoder<byte[]> {
    public boolean asyncDecode(CachedData d) {
      return false;
    }

    public CachedData encode(byte[] v) {
      return new CachedData(0, v, CachedData.MAX_SIZE);
    }

    public byte[] decode(CachedData d) {
      return d.getData();
    }

    public int getMaxSize() {
      return CachedData.MAX_SIZE;
    }
  }

  /**
   * The names of a node's points on the ring as libmemcached's ketama_weighted and twemproxy's
   * ketama write them: "ADDRESS:PORT-N" ("ADDRESS-N" on port 11211), the address as given.
   * spymemcached's own LIBMEMCACHED format writes the host name a reverse lookup finds
   * ("localhost" for 127.0.0.1), which places keys elsewhere when the pool is given by address.
   */
  static final class Libmemcached extends DefaultKetamaNodeLocatorConfiguration {
    @Override
    public String getKeyForNode(MemcachedNode node, int repetition) {
      InetSocketAddress a = (InetSocketAddress) node.getSocketAddress();
      String name = a.getPort() == 11211 ? a.getHostString() : a.getHostString() + ":" + a.getPort();
      return name + "-" + repetition;
    }
  }

  /**
   * KETAMA with libmemcached's names for the points: a key lands on the node that pylibmc's
   * ketama_weighted and twemproxy's ketama pick.
   * FailureMode.Cancel: a request to a node that is down fails at once instead of moving to
   * another node (Redistribute would send its keys to nodes that never held them, and back again
   * when it returns). Reconnect after a second at most.
   */
  static final class Factory extends DefaultConnectionFactory {
    @Override
    public NodeLocator createLocator(List<MemcachedNode> nodes) {
      return new KetamaNodeLocator(nodes, DefaultHashAlgorithm.KETAMA_HASH, new Libmemcached());
    }

    @Override
    public FailureMode getFailureMode() {
      return FailureMode.Cancel;
    }

    @Override
    public long getMaxReconnectDelay() {
      return 1;
    }

    @Override
    public long getOperationTimeout() {
      return 1000;
    }
  }

  public static void main(String[] args) throws Exception {
    String servers = args[0].replace(',', ' ');
    int keys = Integer.parseInt(args[1]);
    int valueBytes = Integer.parseInt(args[2]);
    long sliceMs = Long.parseLong(args[3]);
    Random random = new Random(Long.parseLong(args[4]));

    boolean fill = args.length < 6 || args[5].equals("fill");
    MemcachedClient c = new MemcachedClient(new Factory(), AddrUtil.getAddresses(servers));
    Raw raw = new Raw();

    int ok = 0;
    int errors = 0;
    Future<?>[] pending = new Future<?>[fill ? keys : 0];
    for (int i = 0; i < pending.length; i++) {
      pending[i] = c.set(key(i), 0, value(key(i), valueBytes), raw);
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
        byte[] got = c.get(k, raw);
        if (got == null) {
          outcome = 1;
          c.set(k, 0, value(k, valueBytes), raw);
        } else {
          outcome = Arrays.equals(got, value(k, valueBytes)) ? 0 : 3;
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
