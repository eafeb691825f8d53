//! `segcache-server`: run with no arguments to serve 127.0.0.1:11211 with a 64 MiB cache.

use std::process::ExitCode;

use clap::Parser;
use segcache_server::{logger, Cli, Server, Settings};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

fn main() -> ExitCode {
    let settings = match Settings::load(Cli::parse()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("segcache-server: {e}");
            return ExitCode::from(2);
        }
    };
    logger::init(settings.log_level);
    let server = match Server::bind(settings) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("segcache-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stop = server.stop_handle();
    let mut signals = match Signals::new([SIGTERM, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("segcache-server: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    std::thread::spawn(move || {
        let mut seen = false;
        for sig in signals.forever() {
            if seen {
                // A second signal: the operator does not want to wait for the drain.
                eprintln!("segcache-server: second signal, exiting now");
                std::process::exit(1);
            }
            seen = true;
            log::warn!("signal {sig}: stopping gracefully");
            stop.stop();
        }
    });
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("segcache-server: {e}");
            ExitCode::FAILURE
        }
    }
}
