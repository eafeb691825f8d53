// Node's `memcached` (npm, text protocol): the scripted scenario.
// Usage: node scenario.js HOST:PORT, with NODE_PATH holding memcached's node_modules.
// Prints one line per step of what the user sees (see ../common.py for the line format).
'use strict';
const crypto = require('crypto');
const Memcached = require('memcached');

const c = new Memcached(process.argv[2], { timeout: 5000, retries: 0, failures: 0, poolSize: 2 });

function show(v) {
  if (v === undefined) return 'undefined';
  if (Buffer.isBuffer(v) || (typeof v === 'string' && v.length > 64)) {
    const b = Buffer.from(v, Buffer.isBuffer(v) ? undefined : 'latin1');
    if (b.length > 64) {
      const sum = crypto.createHash('sha1').update(b).digest('hex').slice(0, 12);
      return `<${b.length} bytes sha1 ${sum}>`;
    }
    return `buffer ${JSON.stringify(b.toString('latin1'))}`;
  }
  if (v !== null && typeof v === 'object') {
    const keys = Object.keys(v).sort();
    return '{' + keys.map((k) => `${k}: ${show(v[k])}`).join(', ') + '}';
  }
  return JSON.stringify(v);
}

// Runs one callback-style call; prints `name: result` or `name: error <message>`.
function step(name, call) {
  return new Promise((resolve) => {
    call((err, result) => {
      if (err) {
        const msg = Array.isArray(err) ? err.map((e) => e.message || e).join('; ') : err.message || String(err);
        console.log(`${name}: error ${msg}`);
        resolve(undefined);
      } else {
        console.log(`${name}: ${show(result)}`);
        resolve(result);
      }
    });
  });
}

async function main() {
  const big = Buffer.alloc(500 * 1024);
  for (let i = 0; i < big.length; i++) big[i] = (i * 31 + 7) % 251;

  await step('basic flush', (cb) => c.flush(cb));
  await step('basic miss', (cb) => c.get('miss', cb));
  await step('basic set', (cb) => c.set('k1', 'v1', 0, cb));
  await step('basic get', (cb) => c.get('k1', cb));
  await step('basic add-existing', (cb) => c.add('k1', 'x', 0, cb));
  await step('basic add-new', (cb) => c.add('k2', 'v2', 0, cb));
  await step('basic replace-missing', (cb) => c.replace('nope', 'x', 0, cb));
  await step('basic replace', (cb) => c.replace('k2', 'v2r', 0, cb));
  await step('basic multi-get', (cb) => c.getMulti(['k1', 'k2', 'miss'], cb));
  await step('basic set-number', (cb) => c.set('num', 42, 0, cb));
  await step('basic get-number', (cb) => c.get('num', cb));
  await step('basic set-json', (cb) => c.set('obj', { a: [1, 2] }, 0, cb));
  await step('basic get-json', (cb) => c.get('obj', cb));

  const g = await new Promise((resolve) => c.gets('k1', (err, r) => resolve(r)));
  console.log(`cas gets: ${show(g && g.k1)}`);
  const token = g && g.cas;
  await step('cas ok', (cb) => c.cas('k1', 'v1b', token, 0, cb));
  await step('cas stale', (cb) => c.cas('k1', 'v1c', token, 0, cb));
  await step('cas missing', (cb) => c.cas('nocas', 'x', token, 0, cb));
  await step('cas get', (cb) => c.get('k1', cb));

  await step('counter set', (cb) => c.set('n', '10', 0, cb));
  await step('counter incr', (cb) => c.incr('n', 5, cb));
  await step('counter decr', (cb) => c.decr('n', 20, cb));
  await step('counter missing', (cb) => c.incr('nonum', 1, cb));
  await step('counter non-numeric', (cb) => c.incr('k1', 1, cb));

  await step('concat append', (cb) => c.append('k1', '+a', cb));
  await step('concat prepend', (cb) => c.prepend('k1', 'p-', cb));
  await step('concat get', (cb) => c.get('k1', cb));
  await step('concat append-missing', (cb) => c.append('nope', 'x', cb));

  await step('touch existing', (cb) => c.touch('k2', 100, cb));
  await step('touch missing', (cb) => c.touch('nope', 100, cb));

  await step('delete existing', (cb) => c.del('k1', cb));
  await step('delete again', (cb) => c.del('k1', cb));
  await step('delete get', (cb) => c.get('k1', cb));

  await step('large set', (cb) => c.set('big', big, 0, cb));
  await step('large get', (cb) => c.get('big', cb));
  await step('large multi-get', (cb) => c.getMulti(['big', 'k2'], cb));

  // version(): the strings differ by design; the user sees them parsed into numbers.
  await step('misc version', (cb) =>
    c.version((err, v) => {
      const r = v && v[0];
      cb(err, r && { parsed: /^\d+\.\d+\.\d+/.test(r.version), major: typeof r.major, minor: typeof r.minor, bugfix: typeof r.bugfix });
    }));
  await step('misc stats', (cb) =>
    c.stats((err, s) => {
      const r = s && s[0];
      cb(err, r && { curr_items: r.curr_items, get_hits: r.get_hits, get_misses: r.get_misses, cmd_set: r.cmd_set });
    }));

  // Every key, the way the package's docs list them: items() (`stats items`) for the slab
  // classes, then cachedump() (`stats cachedump`) of each; the user sees the key set.
  await step('dump all-keys', (cb) =>
    c.items((err, items) => {
      if (err) return cb(err);
      const server = items[0] && items[0].server;
      const slabs = Object.keys(items[0] || {}).filter((k) => k !== 'server');
      if (!server || slabs.length === 0) return cb(null, { slabs: slabs.length });
      const keys = [];
      let left = slabs.length;
      for (const slab of slabs) {
        c.cachedump(server, Number(slab), 0, (e, dump) => {
          if (e) keys.push(`error ${e.message || e}`);
          for (const d of [].concat(dump || [])) keys.push(d.key);
          if (--left === 0) cb(null, keys.sort().join(' '));
        });
      }
    }));
  c.end();
}

main().catch((e) => {
  console.log(`fatal: ${e}`);
  process.exit(1);
});
