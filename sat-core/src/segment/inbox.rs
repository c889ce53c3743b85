//! An inbox: where the processes of a host tell one of them which chunks
//! it subscribed to have a newer version in their host slots.
//!
//! On one host a release copies its bytes into the chunk's slot, and its
//! subscribers need only hear *that* the slot moved: the version is in the
//! slot, for anyone to read. So the releaser tells them itself, without a
//! message and without the home: it posts the chunk's id in each
//! subscriber's inbox, then rings the subscriber's doorbell
//! (`transport/doorbell.rs`, whose segment holds the inbox). The subscriber
//! takes its inbox when it polls, reads each posted chunk's slot version,
//! and queues the events (`client/events.rs`).
//!
//! The inbox is a small open-addressed set of chunk ids, many writers and
//! one reader, all atomic: a post puts the id in a free cell near its hash
//! (or finds it there already, since a subscriber needs one look per chunk
//! however many releases came); when the cells near it are taken, the post
//! marks the inbox overflowed, and the reader then looks at every chunk it
//! subscribed to. A post is never lost: the reader empties a cell before it
//! reads that chunk's slot, so a post that lands after the emptying is
//! either seen by that read (its release was published before) or left in
//! the cell for the next take.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

use super::SlotRef;

/// Cells of an inbox. A post probes at most `PROBES` of them.
pub const INBOX_CELLS: usize = 64;
const PROBES: usize = 4;

#[repr(C)]
struct Cells {
    /// Bumped by every post: a reader with nothing new skips the cells.
    posted: AtomicU32,
    /// Set when a post found no free cell: look at every chunk.
    overflow: AtomicU32,
    /// Chunk ids plus one (0: free).
    cells: [AtomicU64; INBOX_CELLS],
}

/// The bytes an inbox takes in the data of its slot.
pub const INBOX_BYTES: usize = std::mem::size_of::<Cells>();

/// What a take found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// The chunks posted since the last take.
    pub chunks: Vec<u64>,
    /// Some posts found no cell: every subscribed chunk must be looked at.
    pub overflowed: bool,
}

/// An inbox in the data of a slot of at least [`INBOX_BYTES`] (a doorbell's,
/// or one in process memory for the simulator).
#[derive(Clone)]
pub struct Inbox {
    slot: SlotRef,
}

impl Inbox {
    /// The inbox in `slot`'s data, None when the slot is too small for one.
    pub fn in_slot(slot: SlotRef) -> Option<Inbox> {
        (slot.slot().capacity() >= INBOX_BYTES).then_some(Inbox { slot })
    }

    /// An inbox of its own in process memory (threads of one process: the
    /// simulator and unit tests).
    pub fn in_process() -> Inbox {
        let len = super::slot_footprint(INBOX_BYTES);
        let segment = std::sync::Arc::new(super::Segment::in_process(len));
        let slot = SlotRef::new(segment, 0, INBOX_BYTES).expect("sized for it");
        Inbox { slot }
    }

    fn with<R>(&self, f: impl FnOnce(&Cells) -> R) -> R {
        let slot = self.slot.slot();
        // SAFETY: the slot's data holds at least INBOX_BYTES (checked when
        // the inbox was made), aligned to SLOT_ALIGN, inside a mapping the
        // SlotRef keeps alive; Cells is all atomics (zero is a valid, empty
        // inbox), so shared references to it are sound across threads and
        // processes.
        let cells = unsafe { &*(slot.data_ptr() as *const Cells) };
        f(cells)
    }

    /// Tells the owner that `chunk`'s slot moved.
    pub fn post(&self, chunk: u64) {
        let tag = chunk.wrapping_add(1);
        self.with(|c| {
            let start = (chunk.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize;
            let placed = (0..PROBES).any(|i| {
                let cell = &c.cells[(start + i) % INBOX_CELLS];
                match cell.compare_exchange(0, tag, SeqCst, SeqCst) {
                    Ok(_) => true,
                    Err(held) => held == tag,
                }
            });
            if !placed || tag == 0 {
                c.overflow.store(1, SeqCst);
            }
            c.posted.fetch_add(1, SeqCst);
        })
    }

    /// The number of posts so far (wrapping): a reader that saw this value
    /// last time has nothing to take.
    pub fn posted(&self) -> u32 {
        self.with(|c| c.posted.load(SeqCst))
    }

    /// Empties the inbox (the owner only).
    pub fn take(&self) -> Taken {
        self.with(|c| {
            let mut taken = Taken::default();
            for cell in &c.cells {
                if cell.load(SeqCst) != 0 {
                    let tag = cell.swap(0, SeqCst);
                    if tag != 0 {
                        taken.chunks.push(tag - 1);
                    }
                }
            }
            taken.overflowed = c.overflow.swap(0, SeqCst) != 0;
            taken
        })
    }
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Inbox")
    }
}
