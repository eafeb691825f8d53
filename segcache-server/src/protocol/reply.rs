//! Reply spellings: the error lines a rejected request gets, and the number writers every
//! reply uses.

/// Why a request was rejected. Each has the reply memcached clients expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    /// Unknown command, or a known one with the wrong number of arguments.
    Unknown,
    BadFormat,
    KeyTooLong,
    BadKey,
    TooLarge,
    BadDataChunk,
    BadDelta,
    DeleteUsage,
    /// A line over the limit without a newline: reply, then close.
    LineTooLong,
    /// The client speaks HTTP: close without a reply.
    Http,
    /// The client speaks memcached's binary protocol (first byte 0x80): reply, then close.
    Binary,
    /// Meta: a flag letter the command does not know.
    InvalidFlag,
    /// Meta: a flag this server cannot honour with the engine it has (see docs/server.md).
    UnsupportedFlag,
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
            FailKind::BadKey => b"CLIENT_ERROR key contains control characters\r\n",
            FailKind::TooLarge => b"SERVER_ERROR object too large for cache\r\n",
            FailKind::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            FailKind::BadDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            FailKind::DeleteUsage => b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
            FailKind::LineTooLong => b"CLIENT_ERROR line too long\r\n",
            FailKind::Http => return None,
            FailKind::Binary => b"CLIENT_ERROR the binary protocol is not supported; use the text or meta protocol\r\n",
            FailKind::InvalidFlag => b"CLIENT_ERROR invalid flag\r\n",
            FailKind::UnsupportedFlag => b"CLIENT_ERROR flag not supported by this server\r\n",
            FailKind::BadToken => b"CLIENT_ERROR bad token in command line format\r\n",
            FailKind::InvalidMode => b"CLIENT_ERROR invalid mode\r\n",
            FailKind::BadExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            FailKind::Msg(line) => line,
        })
    }

    /// Whether the connection is closed after this failure.
    pub fn closes(self) -> bool {
        matches!(self, FailKind::LineTooLong | FailKind::Http | FailKind::Binary)
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
