//! The versions a server homes, in host segments.
//!
//! When every process of a run is on one host, a home keeps each chunk's
//! last released version in a slot of a segment its clients map
//! (`crate::segment`), not in its own memory: a client then opens scopes on
//! the slot itself (`client/host.rs`), and no chunk bytes travel in
//! messages. The home still allocates chunks, answers LOOKUPs, keeps the
//! subscribers and is told of each release (`Message::Published`).
//!
//! A service's homes do the same when every client that can attach is on
//! their host ([`backing_for_service`]). A service outlives its clients, so
//! its slots hold two buffers (a client that dies while copying a release
//! in leaves the last version whole) and its clients read under their own
//! bits ([`service_reader`]): when one dies, its home frees the locks it
//! held ([`crate::segment::Slot::free_holder`]).
//!
//! Slots are carved in allocation order out of segments that are sparse: a
//! page costs memory once a version is written to it. Chunks live as long
//! as the run, as their home entries do, so nothing is ever freed.

use std::sync::Arc;

use crate::segment::{self, Reader, Segment, SegmentError, SlotPlace, SlotRef};
use crate::topology::Topology;

/// The address space each segment reserves. Its pages cost nothing until
/// written, so it is large: few segments, few mappings per client.
const SEGMENT_BYTES: usize = 1 << 33;
/// Segments in process memory (the simulator, unit tests) are real
/// allocations, so they stay small.
const PRIVATE_SEGMENT_BYTES: usize = 1 << 22;

/// Where the segments come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backing {
    /// memfd segments that the host's processes map.
    Shared,
    /// This process's memory: for a server whose clients are threads of
    /// the same process (the simulator).
    #[cfg_attr(not(feature = "simulator"), allow(dead_code))]
    Private,
}

pub(crate) struct HostVersions {
    backing: Backing,
    /// Slots hold two buffers (a service's).
    double: bool,
    segments: Vec<(Arc<Segment>, (u32, i32))>,
    /// The first free byte of the last segment.
    used: usize,
}

impl HostVersions {
    pub fn new(backing: Backing, double: bool) -> HostVersions {
        HostVersions {
            backing,
            double,
            segments: Vec::new(),
            used: 0,
        }
    }

    /// Slots allocated from now on hold two buffers, as a service's do: a
    /// run with recovery outlives a client that dies while copying a
    /// release in (before the first allocation).
    pub fn name_holders(&mut self) {
        debug_assert!(self.segments.is_empty(), "before any slot");
        self.double = true;
    }

    /// A slot for a chunk of `size` bytes at version 0, and its place for
    /// the wire.
    pub fn allocate(&mut self, size: usize) -> Result<(SlotRef, SlotPlace), SegmentError> {
        let capacity = if self.double {
            segment::double_capacity(size)
        } else {
            size
        };
        let need = segment::slot_footprint(capacity);
        let fits = self
            .segments
            .last()
            .is_some_and(|(s, _)| self.used + need <= s.len());
        if !fits {
            let len = match self.backing {
                Backing::Shared => SEGMENT_BYTES.max(need),
                Backing::Private => PRIVATE_SEGMENT_BYTES.max(need),
            };
            let segment = Arc::new(match self.backing {
                Backing::Shared => Segment::create("sat-versions", len)?,
                Backing::Private => Segment::in_process(len),
            });
            let name = segment::publish(&segment);
            self.segments.push((segment, name));
            self.used = 0;
        }
        let (segment, (pid, fd)) = self.segments.last().expect("one at least");
        let offset = self.used;
        let slot = SlotRef::new(segment.clone(), offset, capacity)?;
        slot.slot().init_fresh(size);
        self.used += need;
        let place = SlotPlace {
            pid: *pid,
            fd: *fd,
            segment_len: segment.len() as u64,
            offset: offset as u64,
            capacity: capacity as u64,
        };
        Ok((slot, place))
    }
}

/// Whether a run's servers keep versions in host segments: when every
/// process is on one host, unless `SAT_HOST_SEGMENTS=off` (to measure or
/// debug the message path; [`crate::settings`] refuses other values).
pub(crate) fn backing_for_run(one_host: bool) -> Option<Backing> {
    (one_host && wanted()).then_some(Backing::Shared)
}

/// [`backing_for_run`] for a run with recovery: its clients read under bits
/// of their own, as a service's do, so that a lost client's read locks can
/// be freed; a run with more clients than a slot has bits goes through
/// messages.
pub(crate) fn backing_for_recovering_run(one_host: bool, topology: &Topology) -> Option<Backing> {
    let bits = every_client_named(topology, one_host, "run, with recovery on,");
    backing_for_run(one_host && bits)
}

/// Where a run's servers keep versions, as every process of it must agree:
/// host slots, as [`backing_for_run`] and [`backing_for_recovering_run`]
/// say, except with replicated homes, which see every release pass through
/// them (`server/replicas.rs`): versions stay on the message path there.
pub(crate) fn backing_for(
    one_host: bool,
    recovering: bool,
    topology: &Topology,
) -> Option<Backing> {
    let host = if recovering {
        backing_for_recovering_run(one_host, topology)
    } else {
        backing_for_run(one_host)
    };
    host.filter(|_| topology.replication() == 1)
}

/// Whether every client of `topology` has a reader bit of its own in a
/// slot's lock word; says so when host segments are `wanted` but cannot be.
fn every_client_named(topology: &Topology, wanted: bool, what: &str) -> bool {
    let clients = topology.clients();
    let bits = clients
        .iter()
        .all(|&c| service_reader(topology, c).is_some());
    if wanted && !bits {
        tracing::info!(
            "this {what} has {} client slots; host segments tell at most {} readers apart, so \
             its clients' chunks go through messages",
            clients.len(),
            segment::READER_BITS
        );
    }
    bits
}

fn wanted() -> bool {
    crate::settings::get().host_segments
}

/// Whether a service's servers keep versions in host segments: when every
/// client that can attach is on their host (`local_only`: the servers are
/// on one host, and their endpoints are on loopback or the shm provider's,
/// which no other host reaches), every client slot has a reader bit of its
/// own, and `SAT_HOST_SEGMENTS` is not `off`.
pub(crate) fn backing_for_service(local_only: bool, topology: &Topology) -> Option<Backing> {
    service_backing(local_only, topology, wanted())
}

/// [`backing_for_service`], with `SAT_HOST_SEGMENTS` read already.
fn service_backing(local_only: bool, topology: &Topology, wanted: bool) -> Option<Backing> {
    let bits = every_client_named(topology, local_only, "service");
    (local_only && bits && wanted).then_some(Backing::Shared)
}

/// The reader bit of a service's client `rank`: its place among the
/// topology's clients, when a slot's lock word has a bit for it.
pub(crate) fn service_reader(topology: &Topology, rank: u32) -> Option<Reader> {
    let index = topology.clients().iter().position(|&c| c == rank)?;
    Reader::bit(u32::try_from(index).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service keeps versions in host slots only when no other host can
    /// reach it and every client slot has a reader bit of its own; each
    /// client's bit is its place among the client slots.
    #[test]
    fn a_service_uses_host_slots_only_on_one_host_and_with_a_bit_per_client() {
        let small = Topology::service(2, segment::READER_BITS).unwrap();
        assert_eq!(service_backing(true, &small, true), Some(Backing::Shared));
        assert_eq!(
            service_backing(false, &small, true),
            None,
            "reachable from elsewhere"
        );
        assert_eq!(
            service_backing(true, &small, false),
            None,
            "SAT_HOST_SEGMENTS=off"
        );
        let bits: Vec<Reader> = small
            .clients()
            .iter()
            .map(|&c| service_reader(&small, c).expect("a bit"))
            .collect();
        assert_eq!(bits.first(), Some(&Reader::Bit(0)));
        assert_eq!(
            bits.last(),
            Some(&Reader::Bit(segment::READER_BITS - 1)),
            "one bit per client slot, in order"
        );
        assert_eq!(service_reader(&small, 0), None, "a server reads no slot");
        let large = Topology::service(2, segment::READER_BITS + 1).unwrap();
        assert_eq!(
            service_backing(true, &large, true),
            None,
            "a client without a bit"
        );
    }
}
