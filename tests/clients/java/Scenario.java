// spymemcached (net.spy:spymemcached, Maven Central), text or binary connection factory: the
// scripted scenario. Usage: java -cp spymemcached.jar:classes Scenario HOST:PORT text|binary
// Prints one line per step of what the user sees (see ../common.py for the line format).

import java.net.InetSocketAddress;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import net.spy.memcached.AddrUtil;
import net.spy.memcached.CASValue;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.ConnectionFactoryBuilder.Protocol;
import net.spy.memcached.FailureMode;
import net.spy.memcached.MemcachedClient;

public class Scenario {
  static String show(Object v) throws Exception {
    if (v instanceof byte[]) {
      byte[] b = (byte[]) v;
      if (b.length <= 64) {
        return "bytes " + new String(b, "ISO-8859-1");
      }
      byte[] sum = MessageDigest.getInstance("SHA-1").digest(b);
      StringBuilder hex = new StringBuilder();
      for (int i = 0; i < 6; i++) {
        hex.append(String.format("%02x", sum[i]));
      }
      return "<" + b.length + " bytes sha1 " + hex + ">";
    }
    if (v instanceof Map) {
      StringBuilder s = new StringBuilder("{");
      for (Map.Entry<?, ?> e : new TreeMap<Object, Object>((Map<?, ?>) v).entrySet()) {
        s.append(s.length() > 1 ? ", " : "").append(e.getKey()).append(": ").append(show(e.getValue()));
      }
      return s.append("}").toString();
    }
    if (v instanceof java.util.concurrent.Future) {
      return show(((java.util.concurrent.Future<?>) v).get());
    }
    if (v instanceof String) {
      return "\"" + v + "\"";
    }
    return String.valueOf(v);
  }

  static Object step(String name, Callable<Object> call) {
    try {
      Object result = call.call();
      System.out.println(name + ": " + show(result));
      return result;
    } catch (Exception e) {
      Throwable t = e.getCause() != null ? e.getCause() : e;
      System.out.println(name + ": error " + t.getClass().getSimpleName() + ": " + t.getMessage());
      return null;
    }
  }

  public static void main(String[] args) throws Exception {
    boolean binary = args[1].equals("binary");
    ConnectionFactoryBuilder f = new ConnectionFactoryBuilder()
        .setProtocol(binary ? Protocol.BINARY : Protocol.TEXT)
        .setOpTimeout(5000)
        .setFailureMode(FailureMode.Cancel);
    MemcachedClient c = new MemcachedClient(f.build(), AddrUtil.getAddresses(args[0]));
    byte[] big = new byte[500 * 1024];
    for (int i = 0; i < big.length; i++) {
      big[i] = (byte) ((i * 31 + 7) % 251);
    }

    step("basic flush", () -> c.flush());
    step("basic miss", () -> c.get("miss"));
    step("basic set", () -> c.set("k1", 0, "v1"));
    step("basic get", () -> c.get("k1"));
    step("basic add-existing", () -> c.add("k1", 0, "x"));
    step("basic add-new", () -> c.add("k2", 0, "v2"));
    step("basic replace-missing", () -> c.replace("nope", 0, "x"));
    step("basic replace", () -> c.replace("k2", 0, "v2r"));
    step("basic multi-get", () -> c.getBulk("k1", "k2", "miss"));
    step("basic set-int", () -> c.set("int", 0, 42));
    step("basic get-int", () -> c.get("int"));
    step("basic set-long", () -> c.set("long", 0, 1L << 40));
    step("basic get-long", () -> c.get("long"));

    CASValue<Object> g = c.gets("k1");
    step("cas gets", () -> g.getValue());
    step("cas ok", () -> c.cas("k1", g.getCas(), "v1b"));
    step("cas stale", () -> c.cas("k1", g.getCas(), "v1c"));
    step("cas missing", () -> c.cas("nocas", g.getCas(), "x"));
    step("cas get", () -> c.get("k1"));

    step("counter set", () -> c.set("n", 0, "10"));
    step("counter incr", () -> c.incr("n", 5));
    step("counter decr", () -> c.decr("n", 20));
    step("counter missing", () -> c.incr("nonum", 1));
    step("counter missing-default", () -> c.incr("ctr", 1, 7));
    step("counter after-default", () -> c.incr("ctr", 1, 7));

    step("concat append", () -> c.append("k1", "+a"));
    step("concat prepend", () -> c.prepend("k1", "p-"));
    step("concat get", () -> c.get("k1"));
    step("concat append-missing", () -> c.append("nope", "x"));

    step("touch existing", () -> c.touch("k2", 100));
    step("touch missing", () -> c.touch("nope", 100));
    step("touch get-and-touch", () -> {
      CASValue<Object> v = c.getAndTouch("k2", 200);
      return v == null ? null : v.getValue();
    });

    step("delete existing", () -> c.delete("k1"));
    step("delete again", () -> c.delete("k1"));
    step("delete get", () -> c.get("k1"));

    step("large set", () -> c.set("big", 0, big));
    step("large get", () -> c.get("big"));
    step("large multi-get", () -> c.getBulk("big", "k2"));
    step("misc version", () -> {
      Map<java.net.SocketAddress, String> v = c.getVersions();
      return v.size() == 1 && v.values().iterator().next().matches("\\d+\\.\\d+\\.\\d+.*");
    });
    step("misc stats", () -> {
      Map<String, String> s = c.getStats().values().iterator().next();
      Map<String, String> some = new TreeMap<>();
      for (String k : Arrays.asList("curr_items", "get_hits", "get_misses", "cmd_set")) {
        some.put(k, s.get(k));
      }
      return some;
    });
    // Pipelining: 300 sets then 300 gets in flight at once (spymemcached queues them on one
    // connection and merges the gets into multi-key requests).
    step("pipeline sets", () -> {
      java.util.List<java.util.concurrent.Future<Boolean>> sets = new java.util.ArrayList<>();
      for (int i = 0; i < 300; i++) {
        sets.add(c.set("p" + i, 0, "v" + i));
      }
      int ok = 0;
      for (java.util.concurrent.Future<Boolean> done : sets) {
        ok += done.get() ? 1 : 0;
      }
      return ok;
    });
    step("pipeline gets", () -> {
      java.util.List<java.util.concurrent.Future<Object>> gets = new java.util.ArrayList<>();
      for (int i = 0; i < 310; i++) {
        gets.add(c.asyncGet("p" + i));
      }
      int right = 0;
      for (int i = 0; i < gets.size(); i++) {
        right += ("v" + i).equals(gets.get(i).get()) ? 1 : 0;
      }
      return right;
    });
    step("pipeline bulk", () -> c.asyncGetBulk(java.util.Arrays.asList("p1", "p299", "p300", "k2")).get());

    // Last: spymemcached's text connection answers a CLIENT_ERROR by reconnecting, which
    // cancels the operations queued meanwhile.
    step("counter non-numeric", () -> c.incr("k2", 1));
    c.shutdown();
  }
}
