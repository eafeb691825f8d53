//! The crash tests' log of acknowledged operations, shared by `crash.rs` and `tier_crash.rs`: a
//! child writes `B <op>` before each operation and `A` after it returns; the parent, after the
//! kill, adds `R <op>` for how the operation in flight turned out, and replays the log.

use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub enum State {
    Absent,
    Value(u64, u64), // version, expiry (0: never)
}

/// Replays the log: the acknowledged state of each key, and the operation in flight at the kill.
pub fn replay(log: &str) -> (HashMap<u64, State>, Option<(u64, State)>, u64) {
    let mut state = HashMap::new();
    let mut pending: Option<(u64, State)> = None;
    let mut max_version = 0;
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
        // A line torn by the kill parses as nothing: its operation had not started.
        match (f.first().copied(), f.get(1).copied()) {
            (Some("A"), None) => {
                if let Some((k, s)) = pending.take() {
                    state.insert(k, s);
                }
            }
            (Some("B"), Some("D")) => pending = num(2).map(|k| (k, State::Absent)),
            (Some("B"), Some("S")) => pending = num(2).zip(num(3)).map(|(k, v)| (k, State::Value(v, 0))),
            // The parent's record of how the operation in flight at a kill turned out.
            (Some("R"), Some("D")) => {
                pending = None;
                if let Some(k) = num(2) {
                    state.insert(k, State::Absent);
                }
            }
            (Some("R"), Some("S")) => {
                pending = None;
                if let (Some(k), Some(v), Some(at)) = (num(2), num(3), num(4)) {
                    state.insert(k, State::Value(v, at));
                }
            }
            (Some("B"), Some("T")) if f.len() == 5 => {
                pending = num(2).zip(num(3)).zip(num(4)).map(|((k, v), at)| (k, State::Value(v, at)))
            }
            _ => {}
        }
        if let Some((_, State::Value(v, _))) = &pending {
            max_version = max_version.max(*v);
        }
    }
    (state, pending, max_version)
}
