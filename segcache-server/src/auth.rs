//! Authentication, as memcached: the users of `-Y FILE` (the text protocol's first command is a
//! `set` whose value is `user password`) and of SASL PLAIN over the binary protocol (`-S`, the
//! users read from the file named by `MEMCACHED_SASL_PWDB`, as memcached built with its own
//! password database). Both files hold `user:password` lines.
//!
//! The file is read at start, before privileges are dropped, and again on SIGHUP (as memcached;
//! a file that cannot be read then leaves the users as they were); one that group or others may
//! read or write is refused. A check compares the candidate with every entry, each byte of each,
//! without an early exit, so that its time does not tell how much of a name or password matched.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// The environment variable that names the SASL user file (memcached's, with `-S`).
pub const SASL_PWDB_ENV: &str = "MEMCACHED_SASL_PWDB";

/// The SASL mechanisms offered (`SASL_LIST_MECHS`).
pub const SASL_MECHS: &[u8] = b"PLAIN";

/// The users of an auth file.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Users {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the passwords.
        write!(f, "Users({} entries)", self.entries.len())
    }
}

impl Users {
    /// Reads `path` (what `what` names in messages: `-Y` or `MEMCACHED_SASL_PWDB`), refusing a
    /// file that group or others may read or write.
    pub fn load(path: &Path, what: &str) -> Result<Users, String> {
        let shown = path.display();
        let meta = std::fs::metadata(path).map_err(|e| format!("{what}: could not open authfile [{shown}]: {e}"))?;
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(format!(
                "{what}: authfile [{shown}] may be read or written by group or others (mode {mode:03o}): \
                 run `chmod 600 {shown}`"
            ));
        }
        let data = std::fs::read(path).map_err(|e| format!("{what}: could not read authfile [{shown}]: {e}"))?;
        Users::parse(&data).map_err(|line| {
            format!("{what}: authfile [{shown}] has a malformed entry at line {line}. Should be 'user:password'")
        })
    }

    /// Parses `user:password` lines (the password ends at `\r` or `\n`, and may hold `:`); the
    /// number of the first line without a `:` is the error.
    pub fn parse(data: &[u8]) -> Result<Users, usize> {
        let mut entries = Vec::new();
        for (i, line) in data.split_inclusive(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\n").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return Err(i + 1);
            };
            let pass = &line[colon + 1..];
            let end = pass.iter().position(|&b| b == b'\r').unwrap_or(pass.len());
            entries.push((line[..colon].to_vec(), pass[..end].to_vec()));
        }
        Ok(Users { entries })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `user` with `pass` is an entry. Every entry is compared whole, whatever matched
    /// before.
    pub fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        let mut found = 0u8;
        for (u, p) in &self.entries {
            found |= ct_eq(user, u) & ct_eq(pass, p);
        }
        found == 1
    }

    /// Checks a SASL PLAIN message, `authzid NUL authcid NUL password`: the authorization
    /// identity must be empty or the user's own (as Cyrus SASL without proxy rules).
    pub fn check_plain(&self, msg: &[u8]) -> bool {
        let mut parts = msg.splitn(3, |&b| b == 0);
        let (Some(authz), Some(user), Some(pass)) = (parts.next(), parts.next(), parts.next()) else {
            return false;
        };
        if pass.contains(&0) {
            return false;
        }
        let authz_ok = authz.is_empty() || authz == user;
        self.check(user, pass) & authz_ok
    }
}

/// The users of a file, reloaded on SIGHUP.
pub struct UserFile {
    /// Empty for users given in code (tests).
    path: PathBuf,
    /// How messages name the file: `-Y` or `MEMCACHED_SASL_PWDB`.
    what: &'static str,
    users: RwLock<Users>,
}

impl std::fmt::Debug for UserFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserFile({} {}: {:?})", self.what, self.path.display(), self.current())
    }
}

impl UserFile {
    /// Reads `path` (see [`Users::load`]).
    pub fn load(path: &Path, what: &'static str) -> Result<UserFile, String> {
        let users = RwLock::new(Users::load(path, what)?);
        Ok(UserFile { path: path.to_path_buf(), what, users })
    }

    /// Users given in code, not reloadable.
    pub fn fixed(users: Users) -> UserFile {
        UserFile { path: PathBuf::new(), what: "users", users: RwLock::new(users) }
    }

    /// Reads the file again; on an error the users stay as they were. The number of users.
    pub fn reload(&self) -> Result<usize, String> {
        if self.path.as_os_str().is_empty() {
            return Ok(self.current().len());
        }
        let users = Users::load(&self.path, self.what)?;
        let n = users.len();
        *self.users.write().unwrap_or_else(|e| e.into_inner()) = users;
        Ok(n)
    }

    fn current(&self) -> std::sync::RwLockReadGuard<'_, Users> {
        self.users.read().unwrap_or_else(|e| e.into_inner())
    }

    /// [`Users::check`] against the users now.
    pub fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        self.current().check(user, pass)
    }

    /// [`Users::check_plain`] against the users now.
    pub fn check_plain(&self, msg: &[u8]) -> bool {
        self.current().check_plain(msg)
    }
}

/// 1 when `a == b`, else 0, in a time that depends on the lengths only: every byte of `b` (the
/// stored secret) is compared, and differences are folded without a branch.
pub fn ct_eq(a: &[u8], b: &[u8]) -> u8 {
    let mut diff = u8::from(a.len() != b.len());
    for (i, &y) in b.iter().enumerate() {
        let x = a.get(i).copied().unwrap_or(!y);
        diff |= x ^ y;
    }
    // 1 when diff is 0: (diff - 1) borrows into the high bit only for 0.
    let d = std::hint::black_box(diff);
    ((u16::from(d).wrapping_sub(1) >> 8) & 1) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn ct_eq_is_equality() {
        let cases: &[(&[u8], &[u8])] =
            &[(b"", b""), (b"a", b"a"), (b"a", b"b"), (b"ab", b"a"), (b"a", b"ab"), (b"", b"x"), (b"x", b"")];
        for &(a, b) in cases {
            assert_eq!(ct_eq(a, b) == 1, a == b, "{a:?} {b:?}");
            assert!(ct_eq(a, b) <= 1);
        }
        // Every single-byte difference, at every position, for every byte value.
        let base = b"hunter2!".to_vec();
        for i in 0..base.len() {
            for v in 0..=255u8 {
                let mut m = base.clone();
                m[i] = v;
                assert_eq!(ct_eq(&m, &base) == 1, m == base);
            }
        }
        // A prefix of the secret, padded with what `a.get` would make of the missing bytes.
        assert_eq!(ct_eq(b"hunter", b"hunter2"), 0);
    }

    #[test]
    fn parse_and_check() {
        let u = Users::parse(b"alice:secret\nbob:pa:ss\r\ncarol:\n").unwrap();
        assert_eq!(u.len(), 3);
        assert!(u.check(b"alice", b"secret"));
        assert!(u.check(b"bob", b"pa:ss"));
        assert!(u.check(b"carol", b""));
        assert!(!u.check(b"alice", b"secre"));
        assert!(!u.check(b"alice", b"secret2"));
        assert!(!u.check(b"alice", b"pa:ss"));
        assert!(!u.check(b"bob", b"secret"));
        assert!(!u.check(b"dave", b"secret"));
        assert!(!u.check(b"", b""));
        // No trailing newline: the last password is whole (memcached would drop its last byte).
        assert!(Users::parse(b"a:b").unwrap().check(b"a", b"b"));
        assert_eq!(Users::parse(b"a:b\nnocolon\n"), Err(2));
        assert_eq!(Users::parse(b"a:b\n\n"), Err(2));
        assert!(Users::parse(b"").unwrap().is_empty());
        assert_eq!(format!("{u:?}"), "Users(3 entries)");
    }

    #[test]
    fn plain_messages() {
        let u = Users::parse(b"alice:secret\nbob:hunter2\n").unwrap();
        assert!(u.check_plain(b"\0alice\0secret"));
        assert!(u.check_plain(b"alice\0alice\0secret"));
        assert!(u.check_plain(b"\0bob\0hunter2"));
        assert!(!u.check_plain(b"bob\0alice\0secret"));
        assert!(!u.check_plain(b"\0alice\0wrong"));
        assert!(!u.check_plain(b"alice\0secret"));
        assert!(!u.check_plain(b"\0alice\0secret\0"));
        assert!(!u.check_plain(b""));
        assert!(!u.check_plain(b"\0bob\0secret"));
    }

    #[test]
    fn load_refuses_open_permissions() {
        let dir = std::env::temp_dir().join(format!("segcache-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("users");
        std::fs::write(&f, "alice:secret\n").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660, 0o602] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = Users::load(&f, "-Y").unwrap_err();
            assert!(e.contains("chmod 600"), "{mode:o}: {e}");
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(Users::load(&f, "-Y").unwrap().check(b"alice", b"secret"), "{mode:o}");
        }
        // Reloaded: the new users; a bad file leaves them as they were.
        let file = UserFile::load(&f, "-Y").unwrap();
        std::fs::write(&f, "bob:pw\n").unwrap();
        assert_eq!(file.reload(), Ok(1));
        assert!(file.check(b"bob", b"pw") && !file.check(b"alice", b"secret"));
        std::fs::write(&f, "alice\n").unwrap();
        assert!(Users::load(&f, "-Y").unwrap_err().contains("malformed"));
        assert!(file.reload().unwrap_err().contains("malformed"));
        assert!(file.check(b"bob", b"pw"));
        assert!(Users::load(&dir.join("absent"), "-Y").unwrap_err().contains("could not open"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
