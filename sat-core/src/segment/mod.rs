//! A **host segment**: memory that a server and the clients on its host map
//! together, holding the home versions of chunks in **slots**, so that a
//! client on the same host reads and publishes a version without a message
//! through its server (docs/PERFORMANCE.md, "the data path").
//!
//! This module is the building block: the memory (a `memfd` mapped shared by
//! every process of the host, or plain memory for one process's tests and the
//! simulator), and the slot (`slot.rs`): a header with a readers-writer lock
//! and the version number, then the version's bytes. The lock is the scope
//! discipline of a home on one host, "one writer or many readers":
//! - a READ scope holds a read lock while it copies the version (or reads it
//!   in place); a WRITE or READWRITE scope holds the write lock until its
//!   RELEASE has copied its bytes in and moved the version on;
//! - a writer waiting keeps new readers out, so writers do not starve;
//! - waiting spins briefly, then sleeps on the lock word (a futex shared
//!   between processes) and wakes when the holder lets go: nothing polls.
//!
//! `inbox.rs` is how a releaser tells the subscribers of a chunk that its
//! slot moved, without a message; `card.rs`, which core a process is on and
//! whether it sleeps (`crate::balance`). `shared.rs` names slots on the wire and maps segments once per process.
//! Which chunks have a slot is decided by the layers above: a server homes
//! its chunks' versions in slots when every process of the run is on its
//! host (`server/host.rs`), and its clients then open scopes on them
//! directly (`client/host.rs`).

pub mod barrier;
pub mod card;
pub mod inbox;
mod memory;
mod shared;
mod slot;
pub(crate) mod wait;

pub use memory::{Segment, SegmentError};
pub use shared::{publish, slot_footprint, Segments, SlotPlace, SlotRef};
pub use slot::{
    double_capacity, Reader, Slot, SlotHeader, DIRECT_SUBSCRIBERS, READER_BITS, SLOT_ALIGN,
};

#[cfg(test)]
mod tests;
