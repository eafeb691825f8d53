<?php
// PHP's older memcache extension (Debian php-memcache, pecl memcache 4.0: its own protocol code,
// not libmemcached), the scripted scenario.
// Usage: php memcache.php HOST:PORT text|binary|sasl [USER PASSWORD]
// `sasl` is the binary protocol with setSaslAuthData() (Debian's build of pecl memcache 4.0.5.2
// has it; memcache.protocol=binary, as SASL runs over the binary protocol): the extension sends
// SASL PLAIN on a connection before its first command.
// Prints one line per step of what the user sees (see ../common.py for the line format): the
// returned value and the notices the call raised (the extension reports a server's error
// replies and lost connections as notices, the call itself returning false).

// PHP 8.2's deprecation notices about the extension's own code (dynamic properties) say
// nothing about the server: left out.
error_reporting(E_ALL & ~E_DEPRECATED);
[$host, $port] = explode(':', $argv[1]);
$mode = $argv[2];
ini_set('memcache.protocol', $mode === 'text' ? 'ascii' : 'binary');
// Values are stored as given: compression (on past 20000 bytes by default) would make the
// oversized value small enough to store.
ini_set('memcache.compress_threshold', '0');
// One server, no failover to another: a failing call fails.
ini_set('memcache.allow_failover', '0');

$m = new Memcache();
if ($mode === 'sasl') {
    $m->setSaslAuthData($argv[3], $argv[4]);
}
// Timeouts of 5 s, as the other scenarios': a loaded machine is not a failing server.
$m->addServer($host, (int) $port, false, 1, 5);

$notices = [];
set_error_handler(function (int $no, string $msg) use (&$notices) {
    global $port;
    $notices[] = str_replace((string) $port, 'PORT', $msg);
    return true;
}, E_ALL & ~E_DEPRECATED);

require_once __DIR__ . '/show.php';

function step(string $name, callable $call)
{
    global $notices;
    $notices = [];
    $r = $call();
    $line = "$name: " . show($r);
    foreach ($notices as $n) {
        $line .= " (notice: $n)";
    }
    echo $line, "\n";
    return $r;
}

// 500 KiB that does not compress away, and 2 MiB, past the servers' 1 MiB item limit.
$big = '';
for ($i = 0; strlen($big) < 500 * 1024; $i++) {
    $big .= sha1("big $i", true);
}
$big = substr($big, 0, 500 * 1024);
$huge = str_repeat($big, 5);

step('basic flush', fn() => $m->flush());
step('basic miss', fn() => $m->get('miss'));
step('basic set', fn() => $m->set('k1', 'v1'));
step('basic get', fn() => $m->get('k1'));
step('basic add-existing', fn() => $m->add('k1', 'x'));
step('basic add-new', fn() => $m->add('k2', 'v2'));
if ($mode === 'text') {
    // In the binary protocol the extension takes a replace's "Not found" for a failed server and
    // leaves it for retry_interval seconds, memcached or not.
    step('basic replace-missing', fn() => $m->replace('nope', 'x'));
}
step('basic replace', fn() => $m->replace('k2', 'v2r'));
step('basic multi-get', fn() => $m->get(['k1', 'k2', 'miss']));
step('basic set-array', fn() => $m->set('arr', ['a' => [1, 2]]));
step('basic get-array', fn() => $m->get('arr'));
step('basic flags', function () use ($m) {
    $m->set('fl', 'x', 0x10000);
    $flags = 0;
    $m->get('fl', $flags);
    return $flags;
});
step('basic cas', function () use ($m) {
    $flags = $cas = null;
    $m->get('k1', $flags, $cas);
    return [$m->cas('k1', 'v1b', 0, 0, $cas), $m->cas('k1', 'v1c', 0, 0, $cas), $m->get('k1')];
});
step('basic delete', fn() => $m->delete('k2'));
step('basic delete-again', fn() => $m->delete('k2'));
step('basic get-deleted', fn() => $m->get('k2'));

step('counter set', fn() => $m->set('n', '10'));
step('counter incr', fn() => $m->increment('n', 5));
step('counter decr', fn() => $m->decrement('n', 20));
step('counter missing', fn() => $m->increment('nonum', 1));
step('counter get', fn() => rtrim($m->get('n')));  // memcached may pad an incr result in place

step('concat append', fn() => $m->append('k1', '+a'));
step('concat prepend', fn() => $m->prepend('k1', 'p-'));
step('concat get', fn() => $m->get('k1'));

// Expiry: the extension sends the exptime unsigned, so -1 goes out as 4294967295. In the text
// protocol memcached reads that as a negative 32-bit number: expired at once. The binary
// protocol's exptime field is unsigned, and memcached takes 4294967295 there for a Unix time
// far ahead: kept.
step('expiry minus-one-set', fn() => $m->set('e1', 'v', 0, -1));
step('expiry minus-one-get', fn() => $m->get('e1'));
step('expiry minus-five-set', fn() => $m->set('e5', 'v', 0, -5));
step('expiry minus-five-get', fn() => $m->get('e5'));
step('expiry zero-set', fn() => $m->set('e0', 'v', 0, 0));
step('expiry zero-get', fn() => $m->get('e0'));
step('expiry relative-set', fn() => $m->set('er', 'v', 0, 3600));
step('expiry relative-get', fn() => $m->get('er'));
step('expiry over-existing', fn() => [$m->set('ex', 'v', 0, -1), $m->get('ex'), $m->get('e0')]);
step('expiry add-after', fn() => [$m->add('e1', 'again'), $m->get('e1')]);

// An oversized value is refused; the same client goes on working. memcached reads (and drops)
// the whole value before it answers. A reply that comes while the extension is still writing
// the value makes it close the connection and open a new one, which it does not log in again:
// with SASL every later call of the process then fails (`Auth failure.`, then a closed socket).
step('large set', fn() => $m->set('big', $big));
step('large get', fn() => $m->get('big'));
step('large too-big', fn() => $m->set('huge', $huge));
step('large get-after', fn() => $m->get('k1'));
step('large set-after', fn() => $m->set('k3', 'v3'));
step('large get-set-after', fn() => $m->get('k3'));
step('large too-big-again', fn() => $m->add('huge2', $huge));
step('large multi-get-after', fn() => $m->get(['k1', 'k3', 'big']));
step('large incr-after', fn() => $m->increment('n', 1));
step('misc version', fn() => (bool) preg_match('/^\d+\.\d+\.\d+/', (string) $m->getVersion()));
$m->close();

if ($mode === 'sasl') {
    // The login is what lets the client in: a client with a wrong password is refused, a new
    // client with the right one sees the data.
    $client = function (string $password) use ($host, $port, $argv) {
        $c = new Memcache();
        $c->setSaslAuthData($argv[3], $password);
        $c->addServer($host, (int) $port, false, 1, 5);
        return $c;
    };
    step('sasl wrong-password-get', fn() => $client('wrong')->get('k3'));
    step('sasl wrong-password-set', fn() => $client('wrong')->set('k4', 'x'));
    step('sasl right-password-get', fn() => $client($argv[4])->get(['k3', 'k4']));
}
