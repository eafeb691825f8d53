//! Protocol handling end to end, without sockets: bytes through a `Session` over a real engine.

mod rig;

use rig::{Rig, T0};
use segcache_server::Session;

#[test]
fn storage_commands() {
    let mut r = Rig::new(1 << 20);
    assert_eq!(r.run("set a 5 0 3\r\nabc\r\n"), "STORED\r\n");
    assert_eq!(r.run("get a\r\n"), "VALUE a 5 3\r\nabc\r\nEND\r\n");
    assert_eq!(r.run("add a 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
    assert_eq!(r.run("add b 0 0 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(r.run("replace c 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
    assert_eq!(r.run("replace b 1 0 1\r\ny\r\n"), "STORED\r\n");
    assert_eq!(r.run("append a 0 0 2\r\nde\r\n"), "STORED\r\n");
    assert_eq!(r.run("prepend a 0 0 2\r\n01\r\n"), "STORED\r\n");
    assert_eq!(r.run("append zz 0 0 2\r\nde\r\n"), "NOT_STORED\r\n");
    assert_eq!(r.run("get a b\r\n"), "VALUE a 5 7\r\n01abcde\r\nVALUE b 1 1\r\ny\r\nEND\r\n");
}

#[test]
fn cas_round_trip() {
    let mut r = Rig::new(1 << 20);
    r.run("set k 0 0 1\r\nx\r\n");
    let reply = r.run("gets k\r\n");
    let cas: u64 = reply.lines().next().unwrap().split(' ').nth(4).unwrap().parse().unwrap();
    assert_eq!(r.run(&format!("cas k 0 0 1 {}\r\ny\r\n", cas + 1)), "EXISTS\r\n");
    assert_eq!(r.run(&format!("cas k 0 0 1 {cas}\r\ny\r\n")), "STORED\r\n");
    assert_eq!(r.run(&format!("cas k 0 0 1 {cas}\r\nz\r\n")), "EXISTS\r\n");
    assert_eq!(r.run("cas nope 0 0 1 1\r\nz\r\n"), "NOT_FOUND\r\n");
    assert_eq!(r.run("get k\r\n"), "VALUE k 0 1\r\ny\r\nEND\r\n");
}

#[test]
fn incr_decr_delete_touch() {
    let mut r = Rig::new(1 << 20);
    r.run("set n 0 0 2\r\n10\r\n");
    assert_eq!(r.run("incr n 5\r\n"), "15\r\n");
    assert_eq!(r.run("decr n 100\r\n"), "0\r\n");
    assert_eq!(r.run("incr nope 1\r\n"), "NOT_FOUND\r\n");
    r.run("set s 0 0 3\r\nabc\r\n");
    assert!(r.run("incr s 1\r\n").starts_with("CLIENT_ERROR cannot increment"));
    assert_eq!(r.run("incr n abc\r\n"), "CLIENT_ERROR invalid numeric delta argument\r\n");
    assert_eq!(r.run("touch n 100\r\n"), "TOUCHED\r\n");
    assert_eq!(r.run("touch nope 100\r\n"), "NOT_FOUND\r\n");
    assert_eq!(r.run("delete n\r\n"), "DELETED\r\n");
    assert_eq!(r.run("delete n\r\n"), "NOT_FOUND\r\n");
    assert_eq!(r.run("get n\r\n"), "END\r\n");
}

#[test]
fn noreply_suppresses_replies() {
    let mut r = Rig::new(1 << 20);
    let out = r.run(
        "set a 0 0 1 noreply\r\n1\r\nadd a 0 0 1 noreply\r\n2\r\nincr a 4 noreply\r\ntouch a 10 noreply\r\n\
         delete b noreply\r\nverbosity 1 noreply\r\nget a\r\n",
    );
    assert_eq!(out, "VALUE a 0 1\r\n5\r\nEND\r\n");
    // A too-large value under noreply is swallowed silently, as memcached does.
    let mut r = Rig::new(1024);
    let big = "x".repeat(2000);
    assert_eq!(r.run(&format!("set a 0 0 2000 noreply\r\n{big}\r\nversion\r\n")), "VERSION 1.6.18\r\n");
}

#[test]
fn exptime_rules_follow_the_cache_clock() {
    let mut r = Rig::new(1 << 20);
    r.run("set rel 0 10 1\r\nx\r\nset never 0 0 1\r\nx\r\n");
    r.run(&format!("set abs 0 {} 1\r\nx\r\n", T0 + 20));
    r.run(&format!("set past 0 {} 1\r\nx\r\n", T0 - 1));
    r.run("set neg 0 -1 1\r\nx\r\n");
    assert_eq!(r.run("get past neg\r\n"), "END\r\n");
    r.clock.advance(11);
    assert_eq!(r.run("get rel\r\n"), "END\r\n");
    assert_eq!(r.run("get abs never\r\n"), "VALUE abs 0 1\r\nx\r\nVALUE never 0 1\r\nx\r\nEND\r\n");
    r.clock.advance(10);
    assert_eq!(r.run("get abs\r\n"), "END\r\n");
    // A negative exptime on set removes the current value.
    assert_eq!(r.run("set never 0 -1 1\r\ny\r\n"), "STORED\r\n");
    assert_eq!(r.run("get never\r\n"), "END\r\n");
    // touch and gat move the expiry.
    r.run("set t 0 5 1\r\nx\r\n");
    assert_eq!(r.run("gat 100 t\r\n"), "VALUE t 0 1\r\nx\r\nEND\r\n");
    r.clock.advance(50);
    assert!(r.run("gats 1 t\r\n").starts_with("VALUE t 0 1 "));
    r.clock.advance(2);
    assert_eq!(r.run("get t\r\n"), "END\r\n");
}

#[test]
fn flush_all_now_and_later() {
    let mut r = Rig::new(1 << 20);
    r.run("set a 0 0 1\r\nx\r\n");
    assert_eq!(r.run("flush_all\r\n"), "OK\r\n");
    assert_eq!(r.run("get a\r\n"), "END\r\n");
    assert_eq!(r.run("flush_all noreply\r\n"), "");
    r.run("set b 0 0 1\r\nx\r\n");
    assert_eq!(r.run("flush_all 100\r\n"), "OK\r\n");
    assert_eq!(r.run("get b\r\n"), "VALUE b 0 1\r\nx\r\nEND\r\n");
    r.clock.advance(101);
    assert_eq!(r.run("get b\r\n"), "END\r\n");
}

#[test]
fn pipelined_requests_in_any_split() {
    let script = b"set a 0 0 5\r\nhello\r\nget a\r\nmn\r\nincr x 1\r\nset b 0 0 0\r\n\r\ngets b\r\n";
    let mut whole = Rig::new(1 << 20);
    let (expected, _, used) = whole.feed(script);
    assert_eq!(used, script.len());
    // Every split point gives the same replies.
    for cut in 0..script.len() {
        let mut r = Rig::new(1 << 20);
        let mut out = Vec::new();
        let mut pending = script[..cut].to_vec();
        let (o, _, used) = r.feed(&pending);
        out.extend(o);
        pending.drain(..used);
        pending.extend_from_slice(&script[cut..]);
        let (o, _, used) = r.feed(&pending);
        out.extend(o);
        assert_eq!(used, pending.len());
        // CAS values depend on nothing but the order, so the replies match exactly.
        assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&expected), "cut at {cut}");
    }
}

#[test]
fn binary_safe_values() {
    let mut r = Rig::new(1 << 20);
    let value: Vec<u8> = (0..=255u8).chain(b"\r\nEND\r\n".iter().copied()).collect();
    let mut req = format!("set bin 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\nget bin\r\n");
    let (out, _, _) = r.feed(&req);
    let mut expected = format!("STORED\r\nVALUE bin 0 {}\r\n", value.len()).into_bytes();
    expected.extend_from_slice(&value);
    expected.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(out, expected);
}

#[test]
fn limits_and_bad_input() {
    let mut r = Rig::new(1024);
    // Too large: refused, data swallowed even when it arrives later, stream stays in sync; as
    // memcached, the refusal is sent once the data has all come.
    let (out, close, used) = r.feed(b"set big 0 0 2000\r\nxxxx");
    assert_eq!((out.as_slice(), close, used), (&b""[..], false, 22));
    let rest = format!("{}\r\nget big\r\n", "x".repeat(1996));
    assert_eq!(r.run(&rest), "SERVER_ERROR object too large for cache\r\nEND\r\n");
    // A set refused as too large removes the old value (memcached does the same).
    r.run("set old 0 0 1\r\nx\r\n");
    let big = "x".repeat(2000);
    assert!(r.run(&format!("set old 0 0 2000\r\n{big}\r\n")).starts_with("SERVER_ERROR"));
    assert_eq!(r.run("get old\r\n"), "END\r\n");
    // Keys.
    let long = "k".repeat(251);
    assert!(r.run(&format!("get {long}\r\n")).starts_with("CLIENT_ERROR"));
    assert!(r.run(&format!("set {long} 0 0 1\r\nx\r\nversion\r\n")).ends_with("\r\nVERSION 1.6.18\r\n"));
    // As memcached: control characters belong to the key.
    assert_eq!(r.run("set a\x7fb 0 0 1\r\nx\r\nget a\x7fb\r\n"), "STORED\r\nVALUE a\x7fb 0 1\r\nx\r\nEND\r\n");
    // Unknown commands and bad formats.
    assert_eq!(r.run("bogus\r\n"), "ERROR\r\n");
    assert_eq!(r.run("set a 0 0 x\r\n"), "CLIENT_ERROR bad command line format\r\n");
    // As memcached: the declared length is dropped, what follows is read as a command.
    assert_eq!(r.run("set a 0 0 1\r\nxyz\r\n"), "CLIENT_ERROR bad data chunk\r\nERROR\r\n");
    // Line too long (not a retrieval line): once no more input is waiting, the connection is
    // closed without a reply, as memcached does; past the read buffer, at once.
    let line = vec![b'a'; 3000];
    let (out, close, used) = r.feed(&line);
    assert_eq!((out.as_slice(), close, used), (&b""[..], false, 0));
    assert!(r.session.line_stalled(&line) && !r.session.line_stalled(&line[..2048]));
    let (out, close, _) = r.feed(&vec![b'a'; 17000]);
    assert_eq!((out.as_slice(), close), (&b""[..], true));
    // A multi-get's reply is streamed whole, as memcached's, whatever --max-reply-size says: the
    // session stops at the output's high-water mark and goes on as the client reads.
    let mut r = Rig::new(1 << 20);
    r.shared.limits.max_response = 10_000;
    r.run(&format!("set v 0 0 1000\r\n{}\r\n", "v".repeat(1000)));
    let many = format!("get{}\r\n", " v".repeat(400));
    let ctx = segcache_server::Ctx::new(&r.shared, 0);
    let mut out = Vec::new();
    let p = r.session.process(format!("{many}version\r\n").as_bytes(), &mut out, &ctx);
    assert!(r.session.retrieving() && !r.session.at_boundary() && p.consumed == many.len());
    assert!(out.len() >= 256 << 10 && out.len() < (256 << 10) + 1100, "{} bytes before the client reads", out.len());
    let first = out.len();
    while r.session.retrieving() {
        r.session.resume(&mut out, &ctx);
    }
    assert!(out.len() > first && r.session.at_boundary());
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.matches("VALUE v 0 1000\r\n").count(), 400);
    assert!(text.ends_with("END\r\n"));
    assert_eq!(r.run("version\r\n"), "VERSION 1.6.18\r\n");
    assert_eq!(r.run(&many.replacen("get", "gat 0", 1)).matches("VALUE v 0 1000").count(), 400);
    assert_eq!(r.run("get v v\r\n").matches("VALUE v 0 1000").count(), 2);
    // HTTP: close without a reply.
    let mut r = Rig::new(1 << 20);
    let (out, close, _) = r.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(out.is_empty() && close);
}

#[test]
fn quit_closes_after_earlier_replies() {
    let mut r = Rig::new(1 << 20);
    let (out, close, used) = r.feed(b"version\r\nquit\r\nget a\r\n");
    assert_eq!((String::from_utf8(out).unwrap().as_str(), close, used), ("VERSION 1.6.18\r\n", true, 15));
}

#[test]
fn stats_reports() {
    let mut r = Rig::new(1 << 20);
    r.run("set a 0 0 1\r\nx\r\nget a b\r\n");
    let s = r.run("stats\r\n");
    for want in [
        "STAT get_hits 1\r\n",
        "STAT get_misses 1\r\n",
        "STAT cmd_get 2\r\n",
        "STAT cmd_set 1\r\n",
        "STAT curr_items 1\r\n",
    ] {
        assert!(s.contains(want), "{want} missing from {s}");
    }
    for name in [
        "pid",
        "uptime",
        "time",
        "version",
        "curr_connections",
        "total_connections",
        "evictions",
        "bytes",
        "limit_maxbytes",
        "threads",
    ] {
        assert!(s.contains(&format!("STAT {name} ")), "{name} missing");
    }
    assert!(s.ends_with("END\r\n"));
    let s = r.run("stats settings\r\n");
    assert!(s.contains("STAT item_size_max 1048576\r\n") && s.contains("STAT maxconns 1024\r\n"));
    assert!(r.run("stats items\r\n").contains("STAT items:1:number 1\r\n"));
    assert_eq!(r.run("stats reset\r\n"), "RESET\r\n");
    assert!(r.run("stats\r\n").contains("STAT get_hits 0\r\n"));
    assert_eq!(r.run("stats bogus\r\n"), "ERROR\r\n");
    assert_eq!(r.run("stats noreply\r\n"), "ERROR\r\n");
}

#[test]
fn meta_get_and_set() {
    let mut r = Rig::new(1 << 20);
    assert_eq!(r.run("ms foo 3 T0 F7\r\nbar\r\n"), "HD\r\n");
    assert_eq!(r.run("mg foo v f s t k Oq1\r\n"), "VA 3 f7 s3 t-1 kfoo Oq1\r\nbar\r\n");
    assert_eq!(r.run("mg foo\r\n"), "HD\r\n");
    assert_eq!(r.run("mg nope v\r\n"), "EN\r\n");
    assert_eq!(r.run("mg nope v q\r\nmn\r\n"), "MN\r\n");
    // T updates the TTL; as in memcached, a `t` before it reports the TTL from before.
    assert_eq!(r.run("mg foo T30 t\r\n"), "HD t30\r\n");
    assert_eq!(r.run("mg foo t T60\r\n"), "HD t30\r\n");
    assert_eq!(r.run("mg foo t\r\n"), "HD t60\r\n");
    // Modes.
    assert_eq!(r.run("ms foo 1 ME\r\nx\r\n"), "NS\r\n");
    assert_eq!(r.run("ms foo 3 MA\r\nbaz\r\n"), "HD\r\n");
    assert_eq!(r.run("ms foo 1 MP\r\n<\r\n"), "HD\r\n");
    assert_eq!(r.run("ms none 1 MR\r\nx\r\n"), "NS\r\n");
    assert_eq!(r.run("ms none 1 MA N60\r\nx\r\n"), "HD\r\n");
    assert_eq!(r.run("mg foo v\r\nmg none v\r\n"), "VA 7\r\n<barbaz\r\nVA 1\r\nx\r\n");
    // CAS.
    let reply = r.run("mg foo c\r\n");
    let cas: u64 = reply.trim_end().strip_prefix("HD c").unwrap().parse().unwrap();
    assert_eq!(r.run(&format!("ms foo 1 C{}\r\ny\r\n", cas + 1)), "EX\r\n");
    assert_eq!(r.run(&format!("ms foo 1 C{cas} q\r\ny\r\nmn\r\n")), "MN\r\n");
    assert_eq!(r.run("ms missing 1 C5\r\ny\r\n"), "NF\r\n");
    let stored = r.run("ms foo 1 c\r\nz\r\n");
    assert!(stored.starts_with("HD c"), "{stored}");
    // Base64 keys: binary keys round trip, the key is echoed encoded with b.
    assert_eq!(r.run("ms AAEC 2 b\r\nhi\r\n"), "HD\r\n");
    assert_eq!(r.run("mg AAEC b v k\r\n"), "VA 2 kAAEC b\r\nhi\r\n");
    assert!(r.run("mg !!!! b v\r\n").starts_with("CLIENT_ERROR"));
    // Too large, with the data swallowed.
    let mut r = Rig::new(1024);
    let big = "x".repeat(1500);
    assert_eq!(r.run(&format!("ms k 1500\r\n{big}\r\nmn\r\n")), "SERVER_ERROR object too large for cache\r\nMN\r\n");
}

#[test]
fn meta_vivify_delete_arith_debug() {
    let mut r = Rig::new(1 << 20);
    // N: the first miss wins the right to fill, the item then exists (empty).
    assert_eq!(r.run("mg v1 v N30\r\n"), "VA 0 W\r\n\r\n");
    // The others see that a client holds the token (memcached's Z).
    assert_eq!(r.run("mg v1 s\r\n"), "HD s0 Z\r\n");
    // md.
    // q hides HD only: NF is still sent (memcached).
    assert_eq!(r.run("md v1 q\r\nmd v1\r\nmd v1 q\r\nmn\r\n"), "NF\r\nNF\r\nMN\r\n");
    r.run("ms d 1 F3\r\nx\r\n");
    assert_eq!(r.run("md d x\r\nmg d v f\r\n"), "HD\r\nVA 0 f3\r\n\r\n");
    let cas: u64 = r.run("mg d c\r\n").trim_end().strip_prefix("HD c").unwrap().parse().unwrap();
    assert_eq!(r.run(&format!("md d C{}\r\n", cas + 1)), "EX\r\n");
    assert_eq!(r.run(&format!("md d C{cas}\r\n")), "HD\r\n");
    // ma.
    assert_eq!(r.run("ma cnt\r\n"), "NF\r\n");
    assert_eq!(r.run("ma cnt N0 J10 v\r\n"), "VA 2\r\n10\r\n");
    assert_eq!(r.run("ma cnt D5 v\r\n"), "VA 2\r\n15\r\n");
    assert_eq!(r.run("ma cnt MD D20 v t\r\n"), "VA 1 t-1\r\n0\r\n");
    assert_eq!(r.run("ma cnt q\r\nmn\r\n"), "MN\r\n");
    r.run("ms s 3\r\nabc\r\n");
    assert!(r.run("ma s\r\n").starts_with("CLIENT_ERROR cannot increment"));
    // me.
    assert!(r.run("me cnt\r\n").starts_with("ME cnt exp=-1 la=0 cas="));
    assert_eq!(r.run("me nothing\r\n"), "EN\r\n");
    // h, l, I and E, as memcached answers them (E as memcached after 1.6.18).
    r.run("ms hl 1\r\nx\r\n");
    assert_eq!(r.run("mg hl h l\r\n"), "HD h0 l0\r\n");
    assert_eq!(r.run("mg hl h u\r\n"), "HD h1\r\n");
    assert_eq!(
        r.run("md hl I T30\r\nmg hl t v\r\nmg hl t\r\nmn\r\n"),
        "HD\r\nVA 1 t30 X W\r\nx\r\nHD t30 Z X\r\nMN\r\n"
    );
    assert!(r.run("me hl\r\n").starts_with("ME hl exp=-30 la=0 cas="));
    assert_eq!(r.run("ms e 2 E5\r\nhi\r\nmg e c\r\nmn\r\n"), "HD\r\nHD c5\r\nMN\r\n");
    assert_eq!(r.run("ma e E9\r\n"), "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n");
    assert_eq!(r.run("ms n 1\r\n7\r\nma n E9 c v\r\nmn\r\n"), "HD\r\nVA 1 c9\r\n8\r\nMN\r\n");
    assert_eq!(r.run("mg cnt !\r\n"), "CLIENT_ERROR invalid flag\r\n");
    // An ms with a bad flag still drops its data block.
    assert_eq!(r.run("ms k 2 !\r\nab\r\nmn\r\n"), "CLIENT_ERROR invalid flag\r\nMN\r\n");
}

/// `me` reports the one class, 1, and the item's record size: what `lru_crawler metadump` reports
/// for the same key, growing byte for byte with the value, and covering key and value.
#[test]
fn meta_debug_reports_class_and_record_size() {
    let mut r = Rig::new(1 << 20);
    let field = |line: &str, name: &str| -> usize {
        let token =
            line.split_whitespace().find_map(|t| t.strip_prefix(name)).unwrap_or_else(|| panic!("{name} in {line:?}"));
        token.parse().unwrap()
    };
    r.run("ms short 5\r\nabcde\r\nms long 15\r\nabcdefghijklmno\r\n");
    let (short, long) = (r.run("me short\r\n"), r.run("me long\r\n"));
    assert_eq!((field(&short, "cls="), field(&long, "cls=")), (1, 1));
    let size = field(&short, "size=");
    assert!(size >= "short".len() + 5, "{short:?}");
    assert_eq!(field(&long, "size=") - size, 10 - 1, "the key is one byte shorter, the value ten longer");
    let dump = r.run("lru_crawler metadump all\r\n");
    let line = dump.lines().find(|l| l.starts_with("key=short ")).expect("short in the dump");
    assert_eq!(field(line, "size="), size);
    // Client flags take 4 bytes of the record (the key is 2 bytes longer).
    r.run("ms flagged 5 F7\r\nabcde\r\n");
    assert_eq!(field(&r.run("me flagged\r\n"), "size="), size + 2 + 4);
}

/// Random bytes and random mixes of real command fragments, cut at random points: the session
/// never panics, never uses more than it was given, and keeps answering afterwards.
#[test]
fn random_input_never_breaks_a_session() {
    const PIECES: [&[u8]; 24] = [
        b"get ",
        b"gets ",
        b"set ",
        b"cas ",
        b"incr ",
        b"mg ",
        b"ms ",
        b"md ",
        b"ma ",
        b"me ",
        b"mn",
        b"k",
        b"key ",
        b"0 ",
        b"5 ",
        b"-1 ",
        b"99999999999999999999 ",
        b"noreply",
        b"\r\n",
        b"\n",
        b"v c f k s t q b T10 N5 MA MD D3 J7 O1 ",
        b"hello",
        b"\x00\x80\xff\t",
        b" ",
    ];
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut r = Rig::new(4096);
    for round in 0..3000 {
        r.session = Session::new();
        let mut input = Vec::new();
        for _ in 0..rnd(40) {
            if rnd(5) == 0 {
                input.extend((0..rnd(20)).map(|_| rnd(256) as u8));
            } else {
                input.extend_from_slice(PIECES[rnd(PIECES.len())]);
            }
        }
        let cut = rnd(input.len() + 1);
        let (_, close, used) = r.feed(&input[..cut]);
        assert!(used <= cut, "round {round}");
        if close {
            continue;
        }
        let mut rest = input[used..].to_vec();
        let (_, close, used) = r.feed(&rest);
        assert!(used <= rest.len(), "round {round}");
        if close {
            continue;
        }
        // Whatever came before, a fresh line after a newline is still understood (unless a
        // value is still being swallowed or awaited, which the next complete request ends).
        rest.drain(..used);
        let _ = r.feed(&rest);
    }
    let mut r = Rig::new(1 << 20);
    assert_eq!(r.run("version\r\n"), "VERSION 1.6.18\r\n");
}

/// Differences from memcached 1.6.18 found by tests/server/test_differential.py; each of these
/// assertions failed before the fix (the old reply is in the comment).
#[test]
fn memcached_parity() {
    let mut r = Rig::new(1 << 20);
    // A miss keeps the opaque and the key (was a bare EN); q hides it.
    assert_eq!(r.run("mg miss v O123 k\r\n"), "EN O123 kmiss\r\n");
    assert_eq!(r.run("mg bWlzcw== b k s\r\n"), "EN kbWlzcw== b\r\n");
    assert_eq!(r.run("mg miss v O123 k q\r\nmn\r\n"), "MN\r\n");
    // md/ma with q on a missing key still say NF (sent nothing), with O and k.
    assert_eq!(r.run("md miss q O5 k\r\n"), "NF O5 kmiss\r\n");
    assert_eq!(r.run("ma miss q\r\n"), "NF\r\n");
    // ma q hides a success even with v (sent VA).
    r.run("set n 0 0 2\r\n10\r\n");
    assert_eq!(r.run("ma n q v\r\nmn\r\n"), "MN\r\n");
    // noreply on a malformed command sends nothing (sent the usage error).
    assert_eq!(r.run("delete k 10 noreply\r\nmn\r\n"), "MN\r\n");
    assert_eq!(r.run("delete k 10\r\n"), "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n");
    // An ms over the item size limit removes the old value, as a set does (it stayed).
    let mut small = Rig::new(1024);
    small.run("set big 0 0 1\r\nx\r\n");
    let big = "y".repeat(1500);
    assert_eq!(
        small.run(&format!("ms big 1500\r\n{big}\r\nmg big v\r\n")),
        "SERVER_ERROR object too large for cache\r\nEN\r\n"
    );
    // Token counts as memcached reads them: one extra word is ignored unless it is noreply
    // (was CLIENT_ERROR), more is an unknown command.
    assert_eq!(r.run("set x 0 0 1 extra\r\na\r\n"), "STORED\r\n");
    assert_eq!(r.run("set x 0 0 1 2 3\r\na\r\n"), "ERROR\r\nERROR\r\n");
    assert_eq!(r.run("incr n 1 extra\r\ntouch n 0 extra\r\n"), "12\r\nTOUCHED\r\n");
    assert_eq!(r.run("gat 10\r\n"), "END\r\n");
    // memcached's words.
    assert_eq!(r.run("touch n x\r\n"), "CLIENT_ERROR invalid exptime argument\r\n");
    assert_eq!(r.run("flush_all x\r\n"), "CLIENT_ERROR invalid exptime argument\r\n");
    assert_eq!(r.run("flush_all -1\r\n"), "OK\r\n");
    let long = "k".repeat(251);
    assert_eq!(r.run(&format!("get {long}\r\n")), "CLIENT_ERROR bad command line format\r\n");
    // Meta flags: memcached accepts every flag it knows on every meta command, refuses repeats.
    r.run("set f 0 0 1\r\na\r\n");
    assert_eq!(r.run("mg f F5 C3\r\n"), "HD\r\n");
    assert_eq!(r.run("mg f v v\r\n"), "CLIENT_ERROR duplicate flag\r\n");
    assert_eq!(r.run("md f v v\r\n"), "CLIENT_ERROR invalid or duplicate flag\r\n");
    assert_eq!(r.run("ms f 1 MX\r\na\r\nmn\r\n"), "CLIENT_ERROR invalid mode for ms M token\r\nMN\r\n");
    assert_eq!(r.run("ma f Ms\r\n"), "CLIENT_ERROR invalid mode for ma M token\r\n");
    let opaque = format!("O{}", "x".repeat(32));
    assert_eq!(r.run(&format!("mg f {opaque}\r\n")), "CLIENT_ERROR opaque token too long\r\n");
    // ms echoes O, k, c and s only (s as memcached after 1.6.18: the item's size after the
    // store, the request's for one that failed); a failed one reports c0.
    assert_eq!(r.run("ms f 1 s t f O1 k\r\nb\r\n"), "HD s1 O1 kf\r\n");
    assert_eq!(r.run("ms f 1 ME c O1 k s\r\nb\r\n"), "NS c0 O1 kf s1\r\n");
    assert_eq!(r.run("ms f 3 MA s\r\nxyz\r\nms f 2 MP s q\r\nuv\r\nmg f v\r\n"), "HD s4\r\nVA 6\r\nuvbxyz\r\n");
    assert_eq!(r.run("ms nof 2 MA s\r\nab\r\nms nof 2 MA N0 s\r\nab\r\n"), "NS s2\r\nHD s2\r\n");
    // ma: C on a missing key is a miss, so N still creates (was NF); the created reply is sent
    // even with q.
    assert_eq!(r.run("ma viv N0 J7 C99 q v\r\n"), "VA 1\r\n7\r\n");
}

/// `ms ... c` of an item that expires on arrival: memcached reports the CAS it gave the item.
/// A `c0` here would be a token that, sent back as `C0`, compares nothing: a later `ma`/`ms MA`
/// with it would succeed where memcached's (stale) token fails.
#[test]
fn meta_set_expired_on_arrival_reports_a_token_that_matches_nothing() {
    let mut r = Rig::new(1 << 20);
    let reply = r.run("ms k 1 c T-1\r\n5\r\n");
    let cas: u64 = reply.trim_end().strip_prefix("HD c").unwrap().parse().unwrap();
    assert_ne!(cas, 0, "{reply}");
    assert_eq!(r.run("mg k v\r\n"), "EN\r\n");
    r.run("set k 0 0 1\r\n5\r\n");
    assert_eq!(r.run(&format!("ma k C{cas} v\r\n")), "EX\r\n");
    assert_eq!(r.run(&format!("ms k 1 MA C{cas}\r\n6\r\n")), "EX\r\n");
    assert_eq!(r.run(&format!("cas k 0 0 1 {cas}\r\n7\r\n")), "EXISTS\r\n");
    assert_eq!(r.run("get k\r\n"), "VALUE k 0 1\r\n5\r\nEND\r\n");
}
