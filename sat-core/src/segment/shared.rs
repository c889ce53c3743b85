//! Slots by handle, and segments by the name other processes know them by.
//!
//! A server allocates the slots of the chunks it homes in segments of its own
//! and names each slot on the wire by [`SlotPlace`]: the process that made
//! the segment, its descriptor there, the segment's length and the slot's
//! offset. A client maps each segment once ([`Segments`]) and keeps a
//! [`SlotRef`] per chunk, which keeps the mapping alive.
//!
//! Segments made in this process are also entered in a process-wide table,
//! so that a server and clients running as threads of one process (the
//! whole-stack simulator, unit tests) share one mapping; segments in plain
//! process memory, which no other process can open, are named there by
//! negative numbers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bincode::{Decode, Encode};

use super::{Segment, SegmentError, Slot, SlotHeader, SLOT_ALIGN};

/// Where a slot lives, as the wire carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct SlotPlace {
    /// The process that made the segment.
    pub pid: u32,
    /// Its descriptor in that process (negative: a segment in that
    /// process's memory only, reachable from its own threads).
    pub fd: i32,
    pub segment_len: u64,
    pub offset: u64,
    /// The most bytes a version may have.
    pub capacity: u64,
}

/// One slot of a mapped segment; the segment stays mapped while it lives.
#[derive(Clone)]
pub struct SlotRef {
    segment: Arc<Segment>,
    offset: usize,
    capacity: usize,
}

impl SlotRef {
    /// The slot at `offset` of `segment`, checked to lie inside it.
    pub fn new(
        segment: Arc<Segment>,
        offset: usize,
        capacity: usize,
    ) -> Result<Self, SegmentError> {
        segment.slot(offset, capacity)?;
        Ok(SlotRef {
            segment,
            offset,
            capacity,
        })
    }

    pub fn slot(&self) -> Slot<'_> {
        self.segment
            .slot(self.offset, self.capacity)
            .expect("checked when the handle was made")
    }
}

impl std::fmt::Debug for SlotRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SlotRef(offset {}, capacity {})",
            self.offset, self.capacity
        )
    }
}

/// The bytes a slot of `capacity` takes in a segment, header included.
pub const fn slot_footprint(capacity: usize) -> usize {
    (std::mem::size_of::<SlotHeader>() + capacity).div_ceil(SLOT_ALIGN) * SLOT_ALIGN
}

type Table = Mutex<HashMap<i32, Weak<Segment>>>;

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// Enters `segment` in this process's table and returns the name other
/// processes (or threads) open it by: (pid, descriptor).
pub fn publish(segment: &Arc<Segment>) -> (u32, i32) {
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    t.retain(|_, s| s.strong_count() > 0);
    let fd = match segment.fd() {
        Some(fd) => fd,
        None => (1..)
            .map(|n: i32| -n)
            .find(|n| !t.contains_key(n))
            .expect("a free name"),
    };
    t.insert(fd, Arc::downgrade(segment));
    (std::process::id(), fd)
}

/// The segments a process has mapped, by name.
#[derive(Default)]
pub struct Segments {
    mapped: HashMap<(u32, i32), Arc<Segment>>,
}

impl Segments {
    /// The slot `place` names, mapping its segment on first use.
    pub fn open(&mut self, place: &SlotPlace) -> Result<SlotRef, SegmentError> {
        let key = (place.pid, place.fd);
        let segment = match self.mapped.get(&key) {
            Some(s) => s.clone(),
            None => {
                let s = open_segment(place)?;
                self.mapped.insert(key, s.clone());
                s
            }
        };
        let too_big = |v: u64| {
            usize::try_from(v).map_err(|_| SegmentError::OutOfBounds {
                offset: usize::MAX,
                capacity: usize::MAX,
                len: segment.len(),
            })
        };
        SlotRef::new(
            segment.clone(),
            too_big(place.offset)?,
            too_big(place.capacity)?,
        )
    }
}

fn open_segment(place: &SlotPlace) -> Result<Arc<Segment>, SegmentError> {
    if place.pid == std::process::id() {
        let t = table().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = t.get(&place.fd).and_then(Weak::upgrade) {
            return Ok(s);
        }
    }
    if place.fd < 0 {
        return Err(SegmentError::NotShared { pid: place.pid });
    }
    let len = usize::try_from(place.segment_len).map_err(|_| SegmentError::OutOfBounds {
        offset: 0,
        capacity: usize::MAX,
        len: 0,
    })?;
    Segment::open(place.pid, place.fd, len).map(Arc::new)
}
