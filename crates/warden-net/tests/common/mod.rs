//! What the firewall tests share: the run-time prerequisites (root).

#[path = "../../../../tests/support/prerequisite.rs"]
mod prerequisite;
pub use prerequisite::*;
