//! The versions a server homes, in host segments.
//!
//! When every process of a run is on one host, a home keeps each chunk's
//! last released version in a slot of a segment its clients map
//! (`crate::segment`), not in its own memory: a client then opens scopes on
//! the slot itself (`client/host.rs`), and no chunk bytes travel in
//! messages. The home still allocates chunks, answers LOOKUPs, keeps the
//! subscribers and is told of each release (`Message::Published`).
//!
//! Slots are carved in allocation order out of segments that are sparse: a
//! page costs memory once a version is written to it. Chunks live as long
//! as the run, as their home entries do, so nothing is ever freed.

use std::sync::Arc;

use crate::segment::{self, Segment, SegmentError, SlotPlace, SlotRef};

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
    segments: Vec<(Arc<Segment>, (u32, i32))>,
    /// The first free byte of the last segment.
    used: usize,
}

impl HostVersions {
    pub fn new(backing: Backing) -> HostVersions {
        HostVersions {
            backing,
            segments: Vec::new(),
            used: 0,
        }
    }

    /// A slot for a chunk of `size` bytes at version 0, and its place for
    /// the wire.
    pub fn allocate(&mut self, size: usize) -> Result<(SlotRef, SlotPlace), SegmentError> {
        let need = segment::slot_footprint(size);
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
        let slot = SlotRef::new(segment.clone(), offset, size)?;
        slot.slot().init_fresh(size);
        self.used += need;
        let place = SlotPlace {
            pid: *pid,
            fd: *fd,
            segment_len: segment.len() as u64,
            offset: offset as u64,
            capacity: size as u64,
        };
        Ok((slot, place))
    }
}

/// Whether a run's servers keep versions in host segments: when every
/// process is on one host, unless `SAT_HOST_SEGMENTS=off` (to measure or
/// debug the message path; any other value than `on` or `off` is reported
/// and taken as `on`).
pub(crate) fn backing_for_run(one_host: bool) -> Option<Backing> {
    let wanted = match std::env::var("SAT_HOST_SEGMENTS").as_deref() {
        Ok("off") => false,
        Ok("on") | Err(_) => true,
        Ok(other) => {
            tracing::warn!("SAT_HOST_SEGMENTS={other:?} is neither 'on' nor 'off'; using 'on'");
            true
        }
    };
    (one_host && wanted).then_some(Backing::Shared)
}
