//! Writes segcache-server(1), the man page, in roff to stdout: generated from the same
//! `clap::Command` the server parses its command line with, so every flag and its help text is
//! the one `segcache-server --help` shows. The Debian package ships it
//! (packaging/debian/build-deb.sh): `cargo run --release -p segcache-server --example manpage`.

use std::io::{self, Write};

use clap::CommandFactory;
use clap_mangen::Man;
use segcache_server::Cli;

/// Where the packaged server keeps its files, and what to read next: sections clap knows nothing
/// of, after the ones it generates.
const FILES_AND_SEE_ALSO: &str = r#".SH FILES
.TP
\fI/etc/segcache/segcache.toml\fR
The configuration file the packaged service starts with (\fB\-\-config\fR); every flag given on
the command line overrides its value.
.TP
\fI/var/lib/segcache/cache.seg\fR
The heap's persistence file in the packaged configuration: a graceful stop (SIGTERM) or a crash
of the process leaves it so that the next start serves every item again.
.SH SIGNALS
SIGTERM and SIGINT stop the server gracefully; SIGUSR2 writes the heap to stable storage.
.SH SEE ALSO
\fBmemcached\fR(1)
"#;

fn main() -> io::Result<()> {
    let man = Man::new(Cli::command());
    let mut out = io::stdout().lock();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    out.write_all(FILES_AND_SEE_ALSO.as_bytes())?;
    man.render_version_section(&mut out)?;
    out.flush()
}
