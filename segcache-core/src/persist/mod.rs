//! Persistence: the heap's memory (anonymous or a file), the file's header, and opening and
//! closing it. Checking a reopened heap and rebuilding its index are the engine's
//! (`engine::recover`).

pub(crate) mod file;
pub(crate) mod file_layout;
pub(crate) mod header;
pub(crate) mod held;
pub(crate) mod region;
pub(crate) mod resident;
pub(crate) mod share;
pub(crate) mod space;
