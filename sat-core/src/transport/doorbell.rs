//! Doorbells: how a process of a host wakes another one it has just sent a
//! message to.
//!
//! libfabric's shm provider cannot block on its completion queue
//! (`FI_WAIT_FD` is not supported), so a process waiting for a message used
//! to poll and micro-sleep, and a message waited for a sleep to end. Each
//! process of a run on one host now owns a doorbell, a word in a small memfd
//! that the others map (the bootstrap exchanges where it is, as it exchanges
//! endpoint names). A sender rings the receiver's doorbell once its send is
//! posted (and again when the send completes, for providers that move data
//! later); a waiting process sleeps on its own doorbell with a futex and
//! wakes when it rings ([`crate::progress::Idle`]). A ring costs one atomic
//! add, and a system call only when the owner sleeps.
//!
//! The doorbell is a slot header of its own (`crate::segment`): the ring is
//! its publication counter, the sleepers its watchers. The slot's data is
//! the process's inbox (`segment/inbox.rs`), where its peers post the
//! chunks it subscribed to that they have just released, then its core card
//! (`segment/card.rs`, read by `crate::balance`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::segment::card::{Card, DOORBELL_DATA};
use crate::segment::inbox::Inbox;
use crate::segment::{self, Segment, SegmentError, Segments, SlotPlace, SlotRef};

/// The bytes of a doorbell's segment: its header, its inbox and its card.
const DOORBELL_BYTES: usize = 4096;
const _: () = assert!(segment::slot_footprint(DOORBELL_DATA) <= DOORBELL_BYTES);

/// Where a doorbell is, as the bootstrap carries it: (pid, descriptor).
pub type BellPlace = (u32, i32);

/// One process's doorbell, its own or a peer's.
#[derive(Clone)]
pub struct Doorbell {
    slot: SlotRef,
    /// The process it belongs to.
    pid: u32,
}

impl Doorbell {
    /// This process's own doorbell, and where others find it.
    pub fn create() -> Result<(Doorbell, BellPlace), SegmentError> {
        let segment = Arc::new(Segment::create("sat-doorbell", DOORBELL_BYTES)?);
        let place = segment::publish(&segment);
        let slot = SlotRef::new(segment, 0, DOORBELL_DATA)?;
        Ok((
            Doorbell {
                slot,
                pid: std::process::id(),
            },
            place,
        ))
    }

    /// The doorbell of the process at `place`.
    pub fn open(segments: &mut Segments, place: BellPlace) -> Result<Doorbell, SegmentError> {
        let slot = segments.open(&SlotPlace {
            pid: place.0,
            fd: place.1,
            segment_len: DOORBELL_BYTES as u64,
            offset: 0,
            capacity: DOORBELL_DATA as u64,
        })?;
        Ok(Doorbell { slot, pid: place.0 })
    }

    /// The inbox of the doorbell's process.
    pub fn inbox(&self) -> Inbox {
        Inbox::in_slot(self.slot.clone()).expect("a doorbell's slot holds an inbox")
    }

    /// The core card of the doorbell's process (`crate::balance`).
    pub fn card(&self) -> Card {
        Card::in_slot(self.slot.clone()).expect("a doorbell's slot holds a card")
    }

    /// The process the doorbell belongs to.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn ring(&self) {
        self.slot.slot().announce();
    }

    /// How many times it has rung (wrapping).
    pub fn rung(&self) -> u32 {
        self.slot.slot().announced()
    }

    /// Sleeps until it rings after `seen`, at most `timeout`.
    pub fn wait(&self, seen: u32, timeout: Duration) {
        self.slot.slot().wait_announcement(seen, timeout);
    }
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Doorbell")
    }
}

static OWN: OnceLock<Doorbell> = OnceLock::new();

/// Makes `bell` the doorbell this process's waits sleep on: set once the
/// peers that send to this process ring it (every process of the run has
/// its doorbell, on one host).
pub fn install_own(bell: Doorbell) {
    let _ = OWN.set(bell);
}

/// The doorbell this process's waits sleep on, if it has one.
pub fn own() -> Option<&'static Doorbell> {
    OWN.get()
}
