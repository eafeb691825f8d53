//! Persistence: the heap's memory (anonymous or a file), the file's header, opening and closing
//! it, and verifying or rebuilding a reopened heap.

pub(crate) mod file;
pub(crate) mod file_layout;
pub(crate) mod header;
pub(crate) mod held;
pub(crate) mod open;
pub(crate) mod recover;
pub(crate) mod region;
pub(crate) mod resident;
pub(crate) mod share;
pub(crate) mod space;
pub(crate) mod undo;
