//! Reply spellings: every reply line and code the server writes (text and meta protocol), the
//! error lines a rejected request gets, and the writers for numbers and values.

/// Ends a reply line (and a data block).
pub const CRLF: &[u8] = b"\r\n";

// Text-protocol replies.
pub const STORED: &[u8] = b"STORED\r\n";
pub const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
pub const EXISTS: &[u8] = b"EXISTS\r\n";
pub const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
pub const DELETED: &[u8] = b"DELETED\r\n";
pub const TOUCHED: &[u8] = b"TOUCHED\r\n";
pub const OK: &[u8] = b"OK\r\n";
pub const END: &[u8] = b"END\r\n";
pub const RESET: &[u8] = b"RESET\r\n";
/// Unknown command (also `stats` with an unknown argument).
pub const ERROR: &[u8] = b"ERROR\r\n";

// Errors shared by the text and the meta protocol.
pub const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
pub const NO_MEMORY_STORING: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
pub const STORAGE_FAILED: &[u8] = b"SERVER_ERROR storage failed\r\n";
pub const OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory\r\n";
/// A retrieval reply over the response limit replaces everything written for the request.
pub const GET_TOO_LARGE: &[u8] = b"SERVER_ERROR out of memory writing get response\r\n";
pub const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
/// A meta key that does not decode (when the failure has no line of its own).
pub const BAD_KEY: &[u8] = b"CLIENT_ERROR bad key\r\n";

// Meta-protocol codes (the return flags and `\r\n` follow).
/// Success without a value.
pub const HD: &[u8] = b"HD";
/// Not stored.
pub const NS: &[u8] = b"NS";
/// CAS mismatch.
pub const EX: &[u8] = b"EX";
/// Not found.
pub const NF: &[u8] = b"NF";
/// Miss.
pub const EN: &[u8] = b"EN";
/// A hit with a value: `VA <size>` follows.
pub const VA: &[u8] = b"VA ";
/// `me`: `ME <key> exp=.. cas=.. flags=.. size=..` follows.
pub const ME: &[u8] = b"ME ";
/// `mn`'s reply.
pub const MN_LINE: &[u8] = b"MN\r\n";
/// A miss on a line of its own (`me`).
pub const EN_LINE: &[u8] = b"EN\r\n";
/// `W` return flag: this client won the right to recache.
pub const WON: &[u8] = b" W";

/// The version every protocol reports (text `version`, binary VERSION, `stats`): a memcached 1.6
/// release number, which clients' version checks accept (`stats` names segcache and its own
/// version beside it).
pub const VERSION: &str = "1.6.18";

/// Why a request was rejected. Each has the reply memcached clients expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    /// Unknown command, or a known one with the wrong number of arguments.
    Unknown,
    BadFormat,
    KeyTooLong,
    TooLarge,
    BadDataChunk,
    BadDelta,
    DeleteUsage,
    /// A line longer than the read buffer without a newline: close without a reply, as
    /// memcached does.
    LineTooLong,
    /// The client speaks HTTP: close without a reply.
    Http,
    /// Meta: a flag letter the command does not know.
    InvalidFlag,
    /// Meta: a flag's token is not a valid number (or is too long).
    BadToken,
    /// Meta: an `M` mode the command does not know.
    InvalidMode,
    /// A bad exptime argument (`touch`, `gat`, `flush_all`).
    BadExptime,
    /// Any other reply line, as memcached words it for the case (meta flag errors mostly).
    Msg(&'static [u8]),
}

impl FailKind {
    /// The reply line, or `None` for no reply.
    pub fn reply(self) -> Option<&'static [u8]> {
        Some(match self {
            FailKind::Unknown => b"ERROR\r\n",
            FailKind::BadFormat => b"CLIENT_ERROR bad command line format\r\n",
            // memcached's words for a key over 250 bytes.
            FailKind::KeyTooLong => b"CLIENT_ERROR bad command line format\r\n",
            FailKind::TooLarge => TOO_LARGE,
            FailKind::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            FailKind::BadDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            FailKind::DeleteUsage => b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
            FailKind::LineTooLong | FailKind::Http => return None,
            FailKind::InvalidFlag => b"CLIENT_ERROR invalid flag\r\n",
            FailKind::BadToken => b"CLIENT_ERROR bad token in command line format\r\n",
            FailKind::InvalidMode => b"CLIENT_ERROR invalid mode\r\n",
            FailKind::BadExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            FailKind::Msg(line) => line,
        })
    }

    /// Whether the connection is closed after this failure.
    pub fn closes(self) -> bool {
        matches!(self, FailKind::LineTooLong | FailKind::Http)
    }
}

/// Appends `n` in decimal.
#[inline]
pub fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends `n` in decimal.
#[inline]
pub fn put_i64(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Writes `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
#[inline]
pub fn put_value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.reserve(key.len() + data.len() + 64);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    put_u64(out, u64::from(flags));
    out.push(b' ');
    put_u64(out, data.len() as u64);
    if let Some(cas) = cas {
        out.push(b' ');
        put_u64(out, cas);
    }
    out.extend_from_slice(CRLF);
    out.extend_from_slice(data);
    out.extend_from_slice(CRLF);
}
