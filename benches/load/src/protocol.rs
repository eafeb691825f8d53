//! The memcache text protocol, client side: encode requests, parse replies incrementally.

use std::fmt;

/// What a request was, so its reply can be parsed and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqKind {
    Get { keys: u16 },
    Set,
    Delete,
}

/// One parsed reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Bytes of the buffer the reply used.
    pub consumed: usize,
    /// Keys found (get), or item deleted (delete).
    pub hits: u32,
    /// Keys missing (get), or nothing to delete (delete).
    pub misses: u32,
    /// The server answered ERROR, CLIENT_ERROR or SERVER_ERROR.
    pub error: bool,
}

/// A reply the client cannot make sense of: the connection is out of sync and must be reset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "protocol error: {}", self.0)
    }
}
impl std::error::Error for ProtoError {}

pub fn encode_set(out: &mut Vec<u8>, key: &[u8], flags: u32, ttl: u32, value: &[u8]) {
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(b"set ");
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(num.format(flags).as_bytes());
    out.push(b' ');
    out.extend_from_slice(num.format(ttl).as_bytes());
    out.push(b' ');
    out.extend_from_slice(num.format(value.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

pub fn encode_delete(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(b"delete ");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    memchr::memmem::find(buf, b"\r\n")
}

fn is_error_line(line: &[u8]) -> bool {
    line == b"ERROR" || line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR")
}

fn preview(line: &[u8]) -> String {
    String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned()
}

/// Parses the reply to a request of `kind` at the start of `buf`.
/// `Ok(None)` means the reply is not complete yet.
pub fn parse_reply(buf: &[u8], kind: ReqKind) -> Result<Option<Reply>, ProtoError> {
    match kind {
        ReqKind::Get { keys } => parse_get(buf, keys as u32),
        ReqKind::Set => parse_line(buf, |line| match line {
            b"STORED" => Some((0, 0)),
            b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => Some((0, 1)),
            _ => None,
        }),
        ReqKind::Delete => parse_line(buf, |line| match line {
            b"DELETED" => Some((1, 0)),
            b"NOT_FOUND" => Some((0, 1)),
            _ => None,
        }),
    }
}

fn parse_line(buf: &[u8], classify: impl Fn(&[u8]) -> Option<(u32, u32)>) -> Result<Option<Reply>, ProtoError> {
    let Some(end) = find_crlf(buf) else {
        return Ok(None);
    };
    let line = &buf[..end];
    let consumed = end + 2;
    if is_error_line(line) {
        return Ok(Some(Reply { consumed, hits: 0, misses: 0, error: true }));
    }
    match classify(line) {
        Some((hits, misses)) => Ok(Some(Reply { consumed, hits, misses, error: false })),
        None => Err(ProtoError(format!("unexpected reply {:?}", preview(line)))),
    }
}

fn parse_get(buf: &[u8], keys: u32) -> Result<Option<Reply>, ProtoError> {
    let mut pos = 0;
    let mut hits = 0u32;
    loop {
        let Some(end) = find_crlf(&buf[pos..]) else {
            return Ok(None);
        };
        let line = &buf[pos..pos + end];
        if line == b"END" {
            let consumed = pos + end + 2;
            return Ok(Some(Reply { consumed, hits, misses: keys.saturating_sub(hits), error: false }));
        }
        if is_error_line(line) {
            // An error ends the reply; any VALUE blocks before it are still hits.
            return Ok(Some(Reply { consumed: pos + end + 2, hits, misses: 0, error: true }));
        }
        if !line.starts_with(b"VALUE ") {
            return Err(ProtoError(format!("expected VALUE or END, got {:?}", preview(line))));
        }
        // VALUE <key> <flags> <bytes> [<cas>]
        let mut fields = line.split(|&c| c == b' ').filter(|f| !f.is_empty());
        let bytes = fields
            .nth(3)
            .and_then(|f| std::str::from_utf8(f).ok())
            .and_then(|f| f.parse::<usize>().ok())
            .ok_or_else(|| ProtoError(format!("bad VALUE line {:?}", preview(line))))?;
        let data_start = pos + end + 2;
        let data_end = data_start + bytes;
        if buf.len() < data_end + 2 {
            return Ok(None);
        }
        if &buf[data_end..data_end + 2] != b"\r\n" {
            return Err(ProtoError("value block not followed by CRLF".into()));
        }
        hits += 1;
        pos = data_end + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_hit_miss_and_partial() {
        let r = b"VALUE k1 0 5\r\nhello\r\nEND\r\nEXTRA";
        let reply = parse_reply(r, ReqKind::Get { keys: 1 }).unwrap().unwrap();
        assert_eq!(reply, Reply { consumed: r.len() - 5, hits: 1, misses: 0, error: false });
        // Every prefix is incomplete, never an error or a wrong reply.
        for cut in 0..r.len() - 5 {
            assert_eq!(parse_reply(&r[..cut], ReqKind::Get { keys: 1 }).unwrap(), None, "cut {cut}");
        }
        let miss = parse_reply(b"END\r\n", ReqKind::Get { keys: 3 }).unwrap().unwrap();
        assert_eq!((miss.hits, miss.misses), (0, 3));
    }

    #[test]
    fn multiget_counts_each_key() {
        let r = b"VALUE a 0 1\r\nx\r\nVALUE c 3 2 99\r\nyz\r\nEND\r\n";
        let reply = parse_reply(r, ReqKind::Get { keys: 3 }).unwrap().unwrap();
        assert_eq!((reply.hits, reply.misses, reply.consumed), (2, 1, r.len()));
    }

    #[test]
    fn value_containing_crlf_and_end() {
        let r = b"VALUE a 0 7\r\nEND\r\n\r\n\r\nEND\r\n";
        let reply = parse_reply(r, ReqKind::Get { keys: 1 }).unwrap().unwrap();
        assert_eq!((reply.hits, reply.consumed), (1, r.len()));
    }

    #[test]
    fn set_and_delete_replies() {
        let s = parse_reply(b"STORED\r\n", ReqKind::Set).unwrap().unwrap();
        assert_eq!((s.consumed, s.error), (8, false));
        let e = parse_reply(b"SERVER_ERROR out of memory\r\n", ReqKind::Set).unwrap().unwrap();
        assert!(e.error);
        let d = parse_reply(b"DELETED\r\n", ReqKind::Delete).unwrap().unwrap();
        assert_eq!((d.hits, d.misses), (1, 0));
        let d = parse_reply(b"NOT_FOUND\r\n", ReqKind::Delete).unwrap().unwrap();
        assert_eq!((d.hits, d.misses), (0, 1));
        assert_eq!(parse_reply(b"STOR", ReqKind::Set).unwrap(), None);
        assert!(parse_reply(b"ERROR\r\n", ReqKind::Get { keys: 1 }).unwrap().unwrap().error);
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        assert!(parse_reply(b"HELLO\r\n", ReqKind::Set).is_err());
        assert!(parse_reply(b"VALUE a 0 zz\r\n", ReqKind::Get { keys: 1 }).is_err());
        assert!(parse_reply(b"VALUE a 0 1\r\nxyz\r\n", ReqKind::Get { keys: 1 }).is_err());
        assert!(parse_reply(b"STORED\r\n", ReqKind::Get { keys: 1 }).is_err());
    }

    #[test]
    fn encoders() {
        let mut b = Vec::new();
        encode_set(&mut b, b"key", 7, 60, b"abc");
        assert_eq!(b, b"set key 7 60 3\r\nabc\r\n");
        b.clear();
        encode_delete(&mut b, b"key");
        assert_eq!(b, b"delete key\r\n");
    }
}
