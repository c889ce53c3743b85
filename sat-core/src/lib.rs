//! SAT (Share Among Things): a software distributed shared memory over libfabric.
//!
//! Processes of a run allocate chunks in one 64-bit logical address space;
//! servers keep them coherent; clients run user code. This crate is the
//! runtime and its Rust API; the C ABI (`sat-capi`) and the Python module
//! (`sat-python`) are thin faces over it.
//!
//! **A program starts here**: [`bootstrap::run`] with [`bootstrap::Roles`]
//! (a run under `satrun`, `mpirun` or `srun`), or [`service::connect`] (a
//! process that attaches to a service); either gives a [`client::Client`],
//! whose calls are the report's API: MALLOC, LOOKUP, MAP and FREE
//! ([`client::Chain`]), scopes ([`protocol::Access`], the guards
//! [`client::Scope`]), symbols, barriers, rendezvous, signals and
//! publish-subscribe ([`client::Event`]). Every call returns a
//! [`SatResult`]. The README's Rust sections walk through them; the other
//! modules are the runtime, public for SAT's own faces, tools and tests.
//!
//! Modules, one responsibility each:
//! - [`auth`]: the secret of a run or a service, and the handshake proving it;
//! - [`chunk`]: chunks and the layout of chunk chains in local memory;
//! - [`transport`]: messages between ranks (libfabric, or in-process for tests);
//! - [`wire`]: the encoded message headers and their bounds-checked decoding;
//! - [`topology`]: the XML topology of a run (roles, servers, clients, memory);
//! - [`bootstrap`]: rank discovery, the seed exchange, roles, termination;
//! - [`protocol`]: coherence protocols as pure state machines (home-based
//!   MESI, home-only), chosen per chunk;
//! - [`progress`]: the progress engine and its adaptive micro-sleep;
//! - [`server`]: the S-DSM server loop;
//! - [`service`]: the service mode: servers that run on while processes
//!   attach and detach;
//! - [`directory`]: a home's allocation directory (sizes, waiting LOOKUPs);
//! - [`store`]: a client's local chunk data: chains, instances, LRU eviction;
//! - [`sync`]: rendezvous, barriers and signals at their coordinator;
//! - [`quiescence`]: when a run whose clients only wait for events may end;
//! - [`client`]: the client side of a run, as user code sees it;
//! - [`observe`]: the debug stream;
//! - [`settings`]: the environment's tuning variables, parsed once, checked
//!   before a process joins anything;
//! - [`stats`]: the statistics stream;
//! - [`os`]: the few system calls made outside libfabric;
//! - [`launcher`]: `satrun`, which starts the processes of a run on one host;
//! - `simulator` (feature `simulator`): the whole stack under one seeded
//!   scheduler, with the invariants of a shared memory checked at every step.

#[cfg(feature = "abe")]
pub mod abe;
pub mod auth;
pub(crate) mod balance;
pub mod bootstrap;
pub mod chunk;
pub mod client;
pub mod directory;
pub mod error;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod launcher;
pub mod observe;
pub mod os;
pub mod progress;
pub mod protocol;
pub mod quiescence;
pub(crate) mod refusals;
pub mod segment;
pub mod server;
pub mod service;
pub mod settings;
#[cfg(feature = "simulator")]
pub mod simulator;
pub mod stats;
pub mod store;
pub mod sync;
pub mod topology;
pub mod transport;
pub mod wire;

pub use error::{SatError, SatResult};
pub use transport::{Provider, Rank};
