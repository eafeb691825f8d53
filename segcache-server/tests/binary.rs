//! The binary protocol end to end, without sockets: bytes through a `Session` over a real engine
//! with a manual clock (expiry rules, requests split anywhere, values refused across reads).

mod rig;

use rig::{Rig, T0};
use segcache_server::protocol::binary::{op, request as packet, HEADER_LEN, NO_CREATE};
use segcache_server::{Ctx, Session};

/// The rig's output read as binary responses.
trait Responses {
    /// Runs complete requests; returns the responses.
    fn packets(&mut self, input: &[u8]) -> Vec<Resp>;
    fn one(&mut self, input: &[u8]) -> Resp;
}

impl Responses for Rig {
    fn packets(&mut self, input: &[u8]) -> Vec<Resp> {
        let (out, _, used) = self.feed(input);
        assert_eq!(used, input.len());
        responses(&out)
    }

    fn one(&mut self, input: &[u8]) -> Resp {
        let mut rs = self.packets(input);
        assert_eq!(rs.len(), 1, "{rs:?}");
        rs.pop().unwrap()
    }
}

fn set(key: &[u8], value: &[u8], flags: u32, exptime: u32) -> Vec<u8> {
    let mut extras = flags.to_be_bytes().to_vec();
    extras.extend_from_slice(&exptime.to_be_bytes());
    packet(op::SET, key, &extras, value, 0, 0)
}

fn get(key: &[u8]) -> Vec<u8> {
    packet(op::GET, key, &[], &[], 0, 0)
}

fn with_exptime(opcode: u8, key: &[u8], exptime: u32) -> Vec<u8> {
    packet(opcode, key, &exptime.to_be_bytes(), &[], 0, 0)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Resp {
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

fn responses(mut out: &[u8]) -> Vec<Resp> {
    let mut rs = Vec::new();
    while !out.is_empty() {
        assert!(out.len() >= HEADER_LEN && out[0] == 0x81, "not a response: {out:?}");
        let key_len = usize::from(u16::from_be_bytes([out[2], out[3]]));
        let ext_len = usize::from(out[4]);
        let body = u32::from_be_bytes([out[8], out[9], out[10], out[11]]) as usize;
        let b = &out[HEADER_LEN..HEADER_LEN + body];
        rs.push(Resp {
            opcode: out[1],
            status: u16::from_be_bytes([out[6], out[7]]),
            opaque: u32::from_be_bytes([out[12], out[13], out[14], out[15]]),
            cas: u64::from_be_bytes(out[16..24].try_into().unwrap()),
            extras: b[..ext_len].to_vec(),
            key: b[ext_len..ext_len + key_len].to_vec(),
            value: b[ext_len + key_len..].to_vec(),
        });
        out = &out[HEADER_LEN + body..];
    }
    rs
}

fn hit(r: &mut Rig, key: &[u8]) -> bool {
    r.one(&get(key)).status == 0
}

#[test]
fn exptime_rules_follow_the_cache_clock() {
    let mut r = Rig::new(1 << 20);
    r.packets(&[set(b"rel", b"x", 0, 10), set(b"never", b"x", 0, 0), set(b"abs", b"x", 0, T0 + 20)].concat());
    r.packets(&set(b"past", b"x", 0, T0 - 1));
    assert!(!hit(&mut r, b"past"));
    r.clock.advance(11);
    assert!(!hit(&mut r, b"rel"));
    assert!(hit(&mut r, b"abs") && hit(&mut r, b"never"));
    r.clock.advance(10);
    assert!(!hit(&mut r, b"abs"));
    // TOUCH, GAT and GATK move the expiry.
    r.packets(&set(b"t", b"x", 7, 5));
    let t = r.one(&with_exptime(op::TOUCH, b"t", 100));
    assert_eq!((t.status, t.extras.as_slice(), t.value.as_slice()), (0, &7u32.to_be_bytes()[..], &b""[..]));
    r.clock.advance(50);
    let g = r.one(&with_exptime(op::GATK, b"t", 1));
    assert_eq!((g.status, g.key.as_slice(), g.value.as_slice()), (0, &b"t"[..], &b"x"[..]));
    r.clock.advance(2);
    assert!(!hit(&mut r, b"t"));
    // A GAT with a time in the past returns the item this once.
    r.packets(&set(b"g", b"x", 0, 0));
    assert_eq!(r.one(&with_exptime(op::GAT, b"g", T0 - 5)).status, 0);
    assert!(!hit(&mut r, b"g"));
    // An incr that creates its item gives it the expiration.
    let mut extras = 1u64.to_be_bytes().to_vec();
    extras.extend_from_slice(&40u64.to_be_bytes());
    extras.extend_from_slice(&30u32.to_be_bytes());
    let i = r.one(&packet(op::INCREMENT, b"n", &extras, &[], 0, 0));
    assert_eq!((i.status, i.value.as_slice()), (0, &40u64.to_be_bytes()[..]));
    assert_ne!(i.cas, 0);
    r.clock.advance(31);
    assert!(!hit(&mut r, b"n"));
}

#[test]
fn flush_now_and_later() {
    let mut r = Rig::new(1 << 20);
    r.packets(&set(b"a", b"x", 0, 0));
    assert_eq!(r.packets(&packet(op::FLUSHQ, &[], &[], &[], 0, 0)), vec![]);
    assert!(!hit(&mut r, b"a"));
    r.packets(&set(b"b", b"x", 0, 0));
    assert_eq!(r.one(&packet(op::FLUSH, &[], &100u32.to_be_bytes(), &[], 0, 0)).status, 0);
    assert!(hit(&mut r, b"b"));
    r.clock.advance(101);
    assert!(!hit(&mut r, b"b"));
}

/// A script with every kind of request, quiet ones, a refused value and a dropped body.
fn script() -> Vec<u8> {
    let mut incr = 5u64.to_be_bytes().to_vec();
    incr.extend_from_slice(&0u64.to_be_bytes());
    incr.extend_from_slice(&NO_CREATE.to_be_bytes());
    [
        set(b"a", b"hello", 3, 0),
        packet(op::GETKQ, b"a", &[], &[], 1, 0),
        packet(op::GETQ, b"missing", &[], &[], 2, 0),
        set(b"big", &[b'z'; 300], 0, 0), // over the 200-byte limit: E2BIG, swallowed
        packet(op::APPENDQ, b"a", &[], b"!", 3, 0),
        set(b"n", b"10", 0, 0),
        packet(op::INCREMENT, b"n", &incr, &[], 4, 0),
        packet(0x60, &[], &[], b"an unknown opcode's body", 5, 0),
        packet(op::TOUCH, b"a", &0u32.to_be_bytes(), b"trailing bytes", 6, 0),
        packet(op::STAT, b"reset", &[], &[], 7, 0),
        packet(op::DELETEQ, b"missing", &[], &[], 8, 0),
        get(b"a"),
        packet(op::NOOP, &[], &[], &[], 9, 0),
    ]
    .concat()
}

#[test]
fn requests_split_anywhere() {
    let script = script();
    let mut whole = Rig::new(200);
    let (expected, close, used) = whole.feed(&script);
    assert!(!close);
    assert_eq!(used, script.len());
    let rs = responses(&expected);
    let opaques: Vec<u32> = rs.iter().map(|r| r.opaque).collect();
    assert_eq!(opaques, [0, 1, 0, 0, 4, 5, 6, 7, 8, 0, 9]);
    assert_eq!(rs[2].status, 0x03);
    assert_eq!(rs[9].value, b"hello!");
    // Every split point gives the same responses (CAS values depend only on the order).
    for cut in 0..script.len() {
        let mut r = Rig::new(200);
        let mut out = Vec::new();
        let (o, _, used) = r.feed(&script[..cut]);
        out.extend(o);
        let mut pending = script[used..cut].to_vec();
        pending.extend_from_slice(&script[cut..]);
        let (o, close, used) = r.feed(&pending);
        out.extend(o);
        assert!(!close);
        assert_eq!(used, pending.len(), "cut at {cut}");
        assert_eq!(responses(&out), rs, "cut at {cut}");
        assert!(r.session.at_boundary());
    }
}

#[test]
fn the_first_byte_chooses_for_good() {
    // Binary first: a text command later is a bad magic, closed without a reply.
    let mut r = Rig::new(1 << 20);
    let (out, close, _) =
        r.feed(&[packet(op::NOOP, &[], &[], &[], 1, 0), b"version\r\n".to_vec(), vec![0; 20]].concat());
    assert!(close);
    assert_eq!(responses(&out).len(), 1);
    assert!(r.session.is_binary());
    // Text first: a binary request later is read as text, as memcached does (its 0x0a ends a
    // line, a NUL ends the next one early).
    let mut r = Rig::new(1 << 20);
    let input = [b"version\r\n".to_vec(), packet(op::NOOP, &[], &[], &[], 1, 0), b"\r\n".to_vec()].concat();
    let (out, close, used) = r.feed(&input);
    assert!(!close && used == input.len());
    assert!(!r.session.is_binary());
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("VERSION ") && text.ends_with("\r\nERROR\r\nERROR\r\n"), "{text:?}");
}

#[test]
fn counters_and_stats_are_the_text_protocols() {
    let mut r = Rig::new(1 << 20);
    r.packets(&[set(b"k", b"v", 0, 0), get(b"k"), packet(op::GETQ, b"x", &[], &[], 0, 0)].concat());
    let stats = r.packets(&packet(op::STAT, &[], &[], &[], 42, 0));
    assert!(stats.iter().all(|s| s.opcode == op::STAT && s.opaque == 42 && s.status == 0));
    assert_eq!(stats.last().map(|s| (s.key.len(), s.value.len())), Some((0, 0)));
    let find = |name: &[u8]| stats.iter().find(|s| s.key == name).map(|s| s.value.clone());
    assert_eq!(find(b"cmd_get"), Some(b"2".to_vec()));
    assert_eq!(find(b"get_hits"), Some(b"1".to_vec()));
    assert_eq!(find(b"get_misses"), Some(b"1".to_vec()));
    assert_eq!(find(b"cmd_set"), Some(b"1".to_vec()));
    // The text side's `stats settings`, figure for figure.
    let settings = r.packets(&packet(op::STAT, b"settings", &[], &[], 0, 0));
    let mut text = Session::new();
    let mut out = Vec::new();
    text.process(b"stats settings\r\n", &mut out, &Ctx::new(&r.shared, 0));
    let lines: Vec<String> = String::from_utf8(out).unwrap().lines().map(str::to_owned).collect();
    let from_binary: Vec<String> = settings[..settings.len() - 1]
        .iter()
        .map(|s| format!("STAT {} {}", String::from_utf8_lossy(&s.key), String::from_utf8_lossy(&s.value)))
        .collect();
    assert_eq!(from_binary, lines[..lines.len() - 1]);
    assert_eq!(r.one(&packet(op::STAT, b"nope", &[], &[], 0, 0)).status, 0x01);
}

/// A small deterministic generator (xorshift64*), so that a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A request of a random opcode (known or not) with random extras, key and value lengths,
/// sometimes with a header byte changed: whatever it is, a session must answer with whole
/// responses, use no more than it was given, and not panic.
fn random_request(rng: &mut Rng) -> Vec<u8> {
    let opcode = rng.below(0x30) as u8;
    let extras: Vec<u8> = (0..[0, 4, 8, 20, rng.below(30)][rng.below(5)]).map(|_| rng.next() as u8).collect();
    let key: Vec<u8> = (0..[0, 1, 3, 250, 251][rng.below(5)]).map(|_| b'a' + rng.below(4) as u8).collect();
    let value: Vec<u8> = (0..[0, 2, 50, 300][rng.below(4)]).map(|_| b'0' + rng.below(10) as u8).collect();
    let mut p = packet(opcode, &key, &extras, &value, rng.next() as u32, [0, 1, rng.next()][rng.below(3)]);
    if rng.below(10) == 0 {
        let i = rng.below(HEADER_LEN);
        p[i] = rng.next() as u8;
    }
    p
}

#[test]
fn random_requests_never_break_a_session() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..3000 {
        let mut r = Rig::new(200);
        let n = 1 + rng.below(8);
        let input: Vec<u8> = (0..n).flat_map(|_| random_request(&mut rng)).collect();
        let cut = rng.below(input.len() + 1);
        let (mut out, close, used) = r.feed(&input[..cut]);
        assert!(used <= cut, "round {round}");
        if !close {
            let pending = &input[used..];
            let (o, _, used) = r.feed(pending);
            assert!(used <= pending.len(), "round {round}");
            out.extend(o);
        }
        // Whole responses only (`responses` checks each header and length); a first byte
        // changed away from 0x80 made it a text connection.
        if r.session.is_binary() {
            responses(&out);
        }
    }
}
