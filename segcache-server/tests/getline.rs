//! Retrieval lines of any length (as memcached serves them): a `get`/`gets`/`gat`/`gats` line
//! longer than the input buffer holds is run as it arrives, through a `Session` fed as a worker
//! feeds it (the unused bytes kept for the next call).

mod rig;

use rig::Rig;
use segcache_server::protocol::MAX_GET_LINE;
use segcache_server::Settings;

/// A cache of 8 MiB in 64 KiB segments, taking items up to 1 MiB.
fn rig() -> Rig {
    Rig::with(8 << 20, 64 << 10, Settings { max_item_size: 1 << 20, threads: 1, ..Settings::default() })
}

/// Keys `key:000000`.. of about `bytes` in all, one in `every` of them stored (value `v<i>`,
/// flags `i`).
fn setup(r: &mut Rig, bytes: usize, every: usize) -> Vec<String> {
    let keys: Vec<String> = (0..bytes / 11).map(|i| format!("key:{i:06}")).collect();
    for (i, k) in keys.iter().enumerate().step_by(every) {
        assert_eq!(r.run(&format!("set {k} {i} 0 {}\r\nv{i}\r\n", format!("v{i}").len())), "STORED\r\n");
    }
    keys
}

/// What `cmd` (`get`, `gets`, `gat 0`) of all `keys` must answer: each key's own reply, in
/// order, then one `END`.
fn expected(r: &mut Rig, cmd: &str, keys: &[String]) -> String {
    let mut want = String::new();
    for k in keys {
        let one = r.run(&format!("{cmd} {k}\r\n"));
        want.push_str(one.strip_suffix("END\r\n").unwrap());
    }
    want.push_str("END\r\n");
    want
}

fn line(cmd: &str, keys: &[String]) -> Vec<u8> {
    format!("{cmd} {}\r\n", keys.join(" ")).into_bytes()
}

#[test]
fn a_one_megabyte_get_line_in_pieces_and_in_one_go() {
    let mut r = rig();
    let keys = setup(&mut r, 1 << 20, 7);
    let req = line("get", &keys);
    assert!(req.len() > 4 * MAX_GET_LINE);
    let want = expected(&mut r, "get", &keys);
    assert_eq!(want.matches("VALUE ").count(), keys.len().div_ceil(7));

    for chunks in [&[usize::MAX][..], &[1400, 1, 7, 65536, 3, 16384]] {
        r.peak = 0;
        let got = r.feed_in_pieces(&req, chunks);
        assert!(!r.closed, "closed the connection");
        assert!(r.pending.is_empty());
        assert_eq!(String::from_utf8(got).unwrap(), want, "chunks {chunks:?}");
        if chunks.len() > 1 {
            // The input never holds much more than the line's first MAX_GET_LINE bytes.
            assert!(r.peak <= MAX_GET_LINE + 65536, "input grew to {}", r.peak);
        }
    }
    // The connection goes on.
    assert_eq!(r.run("version\r\n"), "VERSION 1.6.18\r\n");
}

#[test]
fn gets_and_gat_lines_stream_with_their_cas_and_touch() {
    let mut r = rig();
    let keys = setup(&mut r, 600 << 10, 5);
    for cmd in ["gets", "gat 0", "gats 100"] {
        let want = expected(&mut r, cmd, &keys);
        if cmd.starts_with("gets") || cmd.starts_with("gats") {
            assert!(want.starts_with("VALUE key:000000 0 2 "), "{}", &want[..40]);
        }
        let got = r.feed_in_pieces(&line(cmd, &keys), &[4096, 333]);
        assert_eq!(String::from_utf8(got).unwrap(), want, "{cmd}");
    }
    // A bad exptime fails the whole line.
    let got = r.feed_in_pieces(&line("gat x", &keys), &[8192]);
    assert_eq!(got, b"CLIENT_ERROR invalid exptime argument\r\n");
    assert!(!r.closed);
}

#[test]
fn a_key_too_long_inside_a_long_line_fails_it_and_the_connection_goes_on() {
    let mut r = rig();
    let mut keys = setup(&mut r, 700 << 10, 3);
    let mid = keys.len() / 2;
    keys.insert(mid, "k".repeat(251));
    let mut req = line("get", &keys);
    req.extend_from_slice(b"version\r\n");
    for chunks in [&[usize::MAX][..], &[100], &[5000, 37]] {
        let got = r.feed_in_pieces(&req, chunks);
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "CLIENT_ERROR bad command line format\r\nVERSION 1.6.18\r\n",
            "chunks {chunks:?}"
        );
        assert!(!r.closed && r.pending.is_empty());
    }
    // A key of a megabyte: dropped as it arrives, not buffered.
    let mut req = b"get a ".to_vec();
    req.extend_from_slice(&vec![b'k'; 1 << 20]);
    req.extend_from_slice(b" b\r\nversion\r\n");
    r.peak = 0;
    let got = r.feed_in_pieces(&req, &[16384]);
    assert_eq!(got, b"CLIENT_ERROR bad command line format\r\nVERSION 1.6.18\r\n");
    assert!(r.peak <= MAX_GET_LINE + 16384);
}

#[test]
fn a_pipeline_after_a_long_line_runs() {
    let mut r = rig();
    let keys = setup(&mut r, 400 << 10, 11);
    let want = expected(&mut r, "get", &keys);
    let mut req = b"set before 0 0 1\r\nb\r\n".to_vec();
    req.extend_from_slice(&line("get", &keys));
    req.extend_from_slice(b"set after 0 0 1\r\na\r\nget before after\r\ndelete before\r\n");
    let got = r.feed_in_pieces(&req, &[3000, 70000]);
    let tail = "STORED\r\nVALUE before 0 1\r\nb\r\nVALUE after 0 1\r\na\r\nEND\r\nDELETED\r\n";
    assert_eq!(String::from_utf8(got).unwrap(), format!("STORED\r\n{want}{tail}"));
}

#[test]
fn a_long_line_reply_is_capped_as_any_multi_get() {
    let mut r = rig();
    r.shared.limits.max_response = 1_000_000;
    r.run("set v 0 0 10\r\n0123456789\r\n");
    // 300 KiB of ` v`: 150,000 hits of 27 bytes each asked for, 4 MB.
    let req = format!("get{}\r\nversion\r\n", " v".repeat(150_000));
    let got = r.feed_in_pieces(req.as_bytes(), &[10_000]);
    assert_eq!(got, b"SERVER_ERROR out of memory writing get response\r\nVERSION 1.6.18\r\n");
    // Under the cap: the whole reply.
    r.shared.limits.max_response = 8 << 20;
    let got = r.feed_in_pieces(req.as_bytes(), &[10_000]);
    let mut want = b"VALUE v 0 10\r\n0123456789\r\n".repeat(150_000);
    want.extend_from_slice(b"END\r\nVERSION 1.6.18\r\n");
    assert!(got == want, "{} bytes, not {}", got.len(), want.len());
}

#[test]
fn other_long_lines_close_without_a_reply() {
    let mut r = rig();
    let mut req = b"set ".to_vec();
    req.extend_from_slice(&vec![b'k'; 300 << 10]);
    let got = r.feed_in_pieces(&req, &[16384]);
    assert!(got.is_empty() && r.closed);
}
