<?php
// PHP's memcached extension (Debian php-memcached, libmemcached), text or binary protocol: the
// scripted scenario. Usage: php scenario.php HOST:PORT text|binary
// Prints one line per step of what the user sees (see ../common.py for the line format): the
// returned value and, where the call failed, getResultMessage().

[$host, $port] = explode(':', $argv[1]);
$binary = $argv[2] === 'binary';
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, $binary);
$m->setOption(Memcached::OPT_COMPRESSION, false); // append/prepend need uncompressed values
$m->setOption(Memcached::OPT_CONNECT_TIMEOUT, 2000);
$m->setOption(Memcached::OPT_RECV_TIMEOUT, 5000000);
$m->setOption(Memcached::OPT_SEND_TIMEOUT, 5000000);
$m->addServer($host, (int) $port);

require_once __DIR__ . '/show.php';

function step(string $name, callable $call)
{
    global $m;
    $r = $call();
    $line = "$name: " . show($r);
    if ($m->getResultCode() !== Memcached::RES_SUCCESS) {
        $line .= ' (' . $m->getResultMessage() . ')';
    }
    echo $line, "\n";
    return $r;
}

function each_server($r, callable $f)
{
    return is_array($r) ? array_map($f, $r) : $r;
}

$big = '';
for ($i = 0; $i < 500 * 1024; $i++) {
    $big .= chr(($i * 31 + 7) % 251);
}

step('basic flush', fn() => $m->flush());
step('basic miss', fn() => $m->get('miss'));
step('basic set', fn() => $m->set('k1', 'v1'));
step('basic get', fn() => $m->get('k1'));
step('basic add-existing', fn() => $m->add('k1', 'x'));
step('basic add-new', fn() => $m->add('k2', 'v2'));
step('basic replace-missing', fn() => $m->replace('nope', 'x'));
step('basic replace', fn() => $m->replace('k2', 'v2r'));
step('basic multi-get', fn() => $m->getMulti(['k1', 'k2', 'miss']));
step('basic set-multi', fn() => $m->setMulti(['m1' => 'a', 'm2' => 'b']));
step('basic set-int', fn() => $m->set('int', 42));
step('basic get-int', fn() => $m->get('int'));
step('basic set-array', fn() => $m->set('arr', ['a' => [1, 2]]));
step('basic get-array', fn() => $m->get('arr'));

$g = $m->get('k1', null, Memcached::GET_EXTENDED) ?: ['value' => false, 'cas' => 0];
step('cas gets', fn() => $g['value']);
step('cas ok', fn() => $m->cas($g['cas'], 'k1', 'v1b'));
step('cas stale', fn() => $m->cas($g['cas'], 'k1', 'v1c'));
step('cas missing', fn() => $m->cas($g['cas'], 'nocas', 'x'));
step('cas get', fn() => $m->get('k1'));

step('counter set', fn() => $m->set('n', '10'));
step('counter incr', fn() => $m->increment('n', 5));
step('counter decr', fn() => $m->decrement('n', 20));
step('counter missing', fn() => $m->increment('nonum', 1));
if ($binary) {
    step('counter missing-initial', fn() => $m->increment('ctr', 1, 7));
    step('counter after-initial', fn() => $m->increment('ctr', 1, 7));
}
step('counter non-numeric', fn() => $m->increment('k1', 1));

step('concat append', fn() => $m->append('k1', '+a'));
step('concat prepend', fn() => $m->prepend('k1', 'p-'));
step('concat get', fn() => $m->get('k1'));
step('concat append-missing', fn() => $m->append('nope', 'x'));

step('touch existing', fn() => $m->touch('k2', 100));
step('touch missing', fn() => $m->touch('nope', 100));

step('delete existing', fn() => $m->delete('k1'));
step('delete again', fn() => $m->delete('k1'));
step('delete get', fn() => $m->get('k1'));
step('delete multi', fn() => $m->deleteMulti(['m1', 'nope']));

step('delayed get-delayed', fn() => $m->getDelayed(['k2', 'int', 'miss'], true));
step('delayed fetch-all', function () use ($m) {
    $rows = $m->fetchAll();
    if (!is_array($rows)) {
        return $rows;
    }
    $out = [];
    foreach ($rows as $row) {
        $out[$row['key']] = $row['value'];
    }
    return $out;
});
step('bykey set', fn() => $m->setByKey('shard', 'bk', 'v'));
step('bykey get', fn() => $m->getByKey('shard', 'bk'));

step('large set', fn() => $m->set('big', $big));
step('large get', fn() => $m->get('big'));
step('large multi-get', fn() => $m->getMulti(['big', 'k2']));
step('large too-big', fn() => $m->set('huge', str_repeat('x', 2 * 1024 * 1024)));

// Version strings differ by design: the user sees a dotted version from both.
step('misc version', fn() => each_server($m->getVersion(), fn($v) => (bool) preg_match('/^\d+\.\d+\.\d+/', $v)));
step('misc stats', fn() => each_server(
    $m->getStats(),
    fn($s) => array_intersect_key($s, array_flip(['curr_items', 'get_hits', 'get_misses', 'cmd_set']))
));

// getAllKeys() walks `stats items` and `stats cachedump`.
step('dump all-keys', function () use ($m) {
    $keys = $m->getAllKeys();
    if (is_array($keys)) {
        sort($keys);
    }
    return $keys;
});
