"""The wire protocol byte for byte over a real socket: every command, noreply, pipelining,
meta commands, limits and bad input."""

import socket

from conftest import Raw


def test_every_text_command(raw):
    assert raw.request(b"flush_all\r\n") == b"OK"
    assert raw.request(b"set a 1 0 3\r\nabc\r\n") == b"STORED"
    assert raw.request(b"add a 0 0 1\r\nx\r\n") == b"NOT_STORED"
    assert raw.request(b"replace a 2 0 3\r\nxyz\r\n") == b"STORED"
    assert raw.request(b"append a 0 0 1\r\n!\r\n") == b"STORED"
    assert raw.request(b"prepend a 0 0 1\r\n<\r\n") == b"STORED"
    raw.send(b"gets a\r\n")
    head = raw.line().split(b" ")
    assert head[:4] == [b"VALUE", b"a", b"2", b"5"]
    cas = int(head[4])
    assert raw.line() == b"<xyz!" and raw.line() == b"END"
    assert raw.request(b"cas a 0 0 1 %d\r\nC\r\n" % (cas + 1)) == b"EXISTS"
    assert raw.request(b"cas a 0 0 1 %d\r\nC\r\n" % cas) == b"STORED"
    assert raw.request(b"set n 0 0 1\r\n7\r\n") == b"STORED"
    assert raw.request(b"incr n 3\r\n") == b"10"
    assert raw.request(b"decr n 4\r\n") == b"6"
    assert raw.request(b"touch n 100\r\n") == b"TOUCHED"
    # "10" less 4 is written in place, space padded to the old length, as memcached does.
    raw.send(b"gat 100 n a\r\n")
    assert [raw.line() for _ in range(5)] == [b"VALUE n 0 2", b"6 ", b"VALUE a 0 1", b"C", b"END"]
    raw.send(b"gats 100 n\r\n")
    assert raw.line().startswith(b"VALUE n 0 2 ") and raw.line() == b"6 " and raw.line() == b"END"
    assert raw.request(b"delete n\r\n") == b"DELETED"
    assert raw.request(b"delete n\r\n") == b"NOT_FOUND"
    assert raw.request(b"verbosity 1\r\n") == b"OK"
    assert raw.request(b"verbosity 0\r\n") == b"OK"
    assert raw.request(b"version\r\n").startswith(b"VERSION 1.6")
    raw.send(b"stats items\r\n")
    lines = []
    while (line := raw.line()) != b"END":
        lines.append(line)
    assert any(l.startswith(b"STAT items:1:number ") for l in lines)
    raw.send(b"quit\r\n")
    assert raw.closed()


def test_noreply_everywhere_it_applies(raw):
    raw.send(
        b"set nr 0 0 1 noreply\r\n1\r\n"
        b"add nr 0 0 1 noreply\r\n2\r\n"
        b"replace nr 0 0 1 noreply\r\n3\r\n"
        b"append nr 0 0 1 noreply\r\n4\r\n"
        b"prepend nr 0 0 1 noreply\r\n5\r\n"
        b"incr nr 1 noreply\r\n"
        b"decr nr 2 noreply\r\n"
        b"touch nr 100 noreply\r\n"
        b"cas nr 0 0 1 1 noreply\r\nx\r\n"
        b"delete nothing noreply\r\n"
        b"verbosity 0 noreply\r\n"
        b"get nr\r\n"
    )
    assert raw.line() == b"VALUE nr 0 3"
    # "1" -> replace "3" -> append "34" -> prepend "534" -> +1 -2 = 533; the stale cas changed nothing.
    assert raw.line() == b"533"
    assert raw.line() == b"END"


def test_pipelining_deep(raw):
    n = 2000
    batch = b"".join(b"set p%d 0 0 %d\r\n%d\r\n" % (i, len(str(i)), i) for i in range(n))
    batch += b"".join(b"get p%d\r\n" % i for i in range(n))
    raw.send(batch)
    for _ in range(n):
        assert raw.line() == b"STORED"
    for i in range(n):
        assert raw.line() == b"VALUE p%d 0 %d" % (i, len(str(i)))
        assert raw.line() == b"%d" % i
        assert raw.line() == b"END"


def test_requests_split_byte_by_byte(raw):
    for b in b"set split 0 0 5\r\nhe\r\nl\r\nget split\r\n":
        raw.send(bytes([b]))
    assert raw.line() == b"STORED"
    assert raw.exactly(len(b"VALUE split 0 5\r\nhe\r\nl\r\nEND\r\n")) == b"VALUE split 0 5\r\nhe\r\nl\r\nEND\r\n"


def test_binary_values_with_protocol_bytes(raw):
    value = bytes(range(256)) + b"\r\nEND\r\n\r\n"
    raw.send(b"set bin 0 0 %d\r\n" % len(value) + value + b"\r\n")
    assert raw.line() == b"STORED"
    raw.send(b"get bin\r\n")
    assert raw.line() == b"VALUE bin 0 %d" % len(value)
    assert raw.exactly(len(value) + 2) == value + b"\r\n"
    assert raw.line() == b"END"


def test_exptime_negative_and_absolute(raw):
    assert raw.request(b"set e 0 -1 1\r\nx\r\n") == b"STORED"
    assert raw.request(b"get e\r\n") == b"END"
    # Over 30 days is an absolute Unix time: one in the past means expired at once ...
    assert raw.request(b"set e 0 2592001 1\r\nx\r\n") == b"STORED"
    assert raw.request(b"get e\r\n") == b"END"
    # ... and one in the future is kept.
    raw.send(b"stats\r\n")
    now = None
    while (line := raw.line()) != b"END":
        if line.startswith(b"STAT time "):
            now = int(line.split()[2])
    assert raw.request(b"set e 0 %d 1\r\nx\r\n" % (now + 3600)) == b"STORED"
    raw.send(b"mg e t v\r\n")
    ttl_line = raw.line()
    assert ttl_line.startswith(b"VA 1 t") and 3590 <= int(ttl_line.split(b"t")[1]) <= 3600
    assert raw.line() == b"x"


def test_meta_commands(raw):
    assert raw.request(b"ms mk 5 T0 F9 c\r\nhello\r\n").startswith(b"HD c")
    raw.send(b"mg mk v f s t k Oab c\r\n")
    head = raw.line().split(b" ")
    assert head[:7] == [b"VA", b"5", b"f9", b"s5", b"t-1", b"kmk", b"Oab"] and head[7].startswith(b"c")
    assert raw.line() == b"hello"
    assert raw.request(b"mg missing v\r\n") == b"EN"
    raw.send(b"mg missing v q\r\nmn\r\n")
    assert raw.line() == b"MN"
    assert raw.request(b"ms mk 1 ME\r\nx\r\n") == b"NS"
    assert raw.request(b"ms mk 3 MA\r\n!!!\r\n") == b"HD"
    assert raw.request(b"ma cnt N0 J5 v\r\n") == b"VA 1" and raw.line() == b"5"
    assert raw.request(b"ma cnt MD D2 v\r\n") == b"VA 1" and raw.line() == b"3"
    assert raw.request(b"me cnt\r\n").startswith(b"ME cnt exp=-1 ")
    assert raw.request(b"md cnt\r\n") == b"HD"
    assert raw.request(b"md cnt\r\n") == b"NF"
    assert raw.request(b"mg bWs= b v k\r\n") == b"VA 8 kbWs= b"  # base64 of "mk"; b follows k, as memcached
    assert raw.line() == b"hello!!!"
    assert raw.request(b"mg mk h l\r\n").startswith(b"HD h1 l")  # read before; seconds since
    assert raw.request(b"mn\r\n") == b"MN"


def test_limits_and_bad_input(raw, server):
    # -I 64k: refused with memcached's words, the value swallowed, the stream in sync.
    big = b"y" * (64 * 1024 + 10)
    raw.send(b"set big 0 0 %d\r\n" % len(big) + big + b"\r\nget big\r\n")
    assert raw.line() == b"SERVER_ERROR object too large for cache"
    assert raw.line() == b"END"
    assert raw.request(b"get " + b"k" * 251 + b"\r\n").startswith(b"CLIENT_ERROR")
    assert raw.request(b"get ok\x01key\r\n") == b"END"  # as memcached: a control character is a key byte
    raw.send(b"set " + b"k" * 251 + b" 0 0 3\r\nabc\r\nversion\r\n")
    assert raw.line().startswith(b"CLIENT_ERROR")
    assert raw.line().startswith(b"VERSION")  # the bad key's data block was dropped too
    assert raw.request(b"get " + b"k" * 250 + b"\r\n") == b"END"
    assert raw.request(b"frobnicate\r\n") == b"ERROR"
    assert raw.request(b"set x 0 0 notanumber\r\n").startswith(b"CLIENT_ERROR")
    assert raw.request(b"incr x abc\r\n").startswith(b"CLIENT_ERROR")
    assert raw.request(b"get\r\n") == b"ERROR"
    # Other connections are unaffected by all of this.
    other = Raw(server.connect())
    assert other.request(b"set other 0 0 1\r\nz\r\n") == b"STORED"


def test_line_too_long_closes(server):
    r = Raw(server.connect())
    r.send(b"x" * 3000)
    # As memcached: closed without a reply.
    assert r.closed() and r.buf == b""


def test_http_request_closes_without_reply(server):
    r = Raw(server.connect())
    r.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert r.closed() and r.buf == b""


def test_garbage_never_hurts_the_server(server):
    import random

    rng = random.Random(7)
    for _ in range(15):
        s = server.connect(timeout=2)
        try:
            s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5000))))
            s.settimeout(0.1)
            try:
                while s.recv(65536):
                    pass
            except (socket.timeout, ConnectionResetError):
                pass
        finally:
            s.close()
    r = Raw(server.connect())
    assert r.request(b"version\r\n").startswith(b"VERSION")


def test_large_pipelined_output_to_a_slow_reader(raw):
    import time

    value = b"v" * 60000
    assert raw.request(b"set bigv 0 0 60000\r\n" + value + b"\r\n") == b"STORED"
    n = 300  # ~18 MB of replies: more than the server buffers for one connection
    raw.send(b"get bigv\r\n" * n)
    time.sleep(0.5)  # the server fills its output limit while the client does not read
    for _ in range(n):
        assert raw.line() == b"VALUE bigv 0 60000"
        assert raw.exactly(60002) == value + b"\r\n"
        assert raw.line() == b"END"
    assert raw.request(b"version\r\n").startswith(b"VERSION")


def test_half_closed_client_gets_its_replies_then_a_close(server):
    # Requests and FIN in one burst: every reply comes back, then the server closes its side
    # (a connection left in CLOSE_WAIT would leak a descriptor and a connection slot).
    for i in range(30):
        s = server.connect()
        s.sendall(b"set hc%d 0 0 1\r\nx\r\nget hc%d\r\n" % (i, i))
        s.shutdown(socket.SHUT_WR)
        r = Raw(s)
        assert r.line() == b"STORED"
        assert r.line() == b"VALUE hc%d 0 1" % i and r.line() == b"x" and r.line() == b"END"
        assert r.closed()
        s.close()


def test_client_that_writes_far_ahead_of_its_reads(raw):
    # The client keeps sending requests while not reading: the server must stop taking input
    # when its output backs up, then carry on where it stopped, never dropping the connection.
    import threading
    import time

    value = b"w" * 20000
    assert raw.request(b"set wv 0 0 20000\r\n" + value + b"\r\n") == b"STORED"
    n = 1500  # 30 MB of replies
    sender = threading.Thread(target=lambda: [raw.send(b"get wv\r\n" * 100) for _ in range(n // 100)])
    sender.start()
    time.sleep(0.5)
    for _ in range(n):
        assert raw.line() == b"VALUE wv 0 20000"
        assert raw.exactly(20002) == value + b"\r\n"
        assert raw.line() == b"END"
    sender.join()
    assert raw.request(b"version\r\n").startswith(b"VERSION")
