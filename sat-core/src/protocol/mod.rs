//! Coherence protocols, as pure state machines.
//!
//! A protocol (the DSM-PM2 idea) is a set of handlers with a client side and
//! a home side. Handlers never touch the network: they take an event and
//! return what to send, so that the property tests can drive every message
//! ordering deterministically, and the server and client loops only route.
//!
//! Built so far: [`mesi`], the home-based MESI protocol of section 2.3, for
//! one chunk. Wiring it into the server and client loops, the allocation
//! messages and a second protocol come next (see docs/DESIGN.md).

pub mod mesi;

/// How a scope opens a chunk (Figures 5 and 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read only; local changes are dropped at release.
    Read,
    /// Exclusive, the data may be stale: the writer overwrites it.
    Write,
    /// Exclusive, the data is up to date.
    ReadWrite,
}

impl Access {
    pub fn exclusive(self) -> bool {
        !matches!(self, Access::Read)
    }
}
