//! A process's **core card**: where the processes of a run on one host read
//! which core each of the others is on and whether it sleeps
//! (`crate::balance`). It lives in the process's doorbell slot, after the
//! inbox, so every process that can ring a peer can read its card.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering::SeqCst};

use super::inbox::INBOX_BYTES;
use super::SlotRef;

#[repr(C)]
struct Cells {
    /// The thread the card speaks for (the role's thread), 0: none.
    tid: AtomicI32,
    /// 1 while that thread sleeps in a SAT wait.
    asleep: AtomicU32,
    /// The core it last ran on, as it last looked.
    cpu: AtomicU32,
    /// The count of its doorbell's rings when it went to sleep: a peer that
    /// finds the count moved on knows it was woken, before it runs.
    rung: AtomicU32,
    /// When it last woke (CLOCK_MONOTONIC, ns): of two processes sharing a
    /// core, the one that woke last is the one waiting for it.
    woke_ns: AtomicU64,
    /// The cores its thread may run on when the card was claimed (bit n:
    /// core n; 0: not to be moved). A move sets its affinity back to these.
    cores: AtomicU64,
}

/// The bytes a card takes after the inbox in a doorbell's slot.
pub const CARD_BYTES: usize = std::mem::size_of::<Cells>();
/// Where the card starts in the slot's data (aligned for its atomics).
const CARD_AT: usize = INBOX_BYTES.next_multiple_of(8);
/// The data a doorbell's slot holds: its inbox, then its card.
pub const DOORBELL_DATA: usize = CARD_AT + CARD_BYTES;

/// What a card says, read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CardView {
    pub tid: i32,
    pub asleep: bool,
    pub cpu: u32,
    /// Its doorbell's ring count when it went to sleep.
    pub rung: u32,
    pub woke_ns: u64,
    pub cores: u64,
}

/// The card in a doorbell's slot.
#[derive(Clone)]
pub struct Card {
    slot: SlotRef,
}

impl Card {
    /// The card in `slot`'s data; None when the slot is too small for one
    /// (a peer whose doorbell predates cards).
    pub fn in_slot(slot: SlotRef) -> Option<Card> {
        (slot.slot().capacity() >= DOORBELL_DATA).then_some(Card { slot })
    }

    fn with<R>(&self, f: impl FnOnce(&Cells) -> R) -> R {
        let slot = self.slot.slot();
        // SAFETY: the slot's data holds at least DOORBELL_DATA bytes (checked
        // when the card was made) in a mapping the SlotRef keeps alive;
        // CARD_AT is a multiple of 8 from the slot's aligned data; Cells is
        // all atomics, valid for any bytes (zero: no thread), so shared
        // references to it are sound across threads and processes.
        let cells = unsafe { &*(slot.data_ptr().add(CARD_AT) as *const Cells) };
        f(cells)
    }

    pub fn view(&self) -> CardView {
        self.with(|c| CardView {
            tid: c.tid.load(SeqCst),
            asleep: c.asleep.load(SeqCst) != 0,
            cpu: c.cpu.load(SeqCst),
            rung: c.rung.load(SeqCst),
            woke_ns: c.woke_ns.load(SeqCst),
            cores: c.cores.load(SeqCst),
        })
    }

    /// The card now speaks for thread `tid` (0: for none), running on `cpu`,
    /// allowed on `cores` (bit n: core n).
    pub fn claim(&self, tid: i32, cpu: u32, cores: u64) {
        self.with(|c| {
            c.asleep.store(0, SeqCst);
            c.cpu.store(cpu, SeqCst);
            c.cores.store(cores, SeqCst);
            c.tid.store(tid, SeqCst);
        })
    }

    /// Its thread is about to sleep on `cpu`, until its doorbell's ring
    /// count moves past `rung`.
    pub fn sleeps(&self, cpu: u32, rung: u32) {
        self.with(|c| {
            c.cpu.store(cpu, SeqCst);
            c.rung.store(rung, SeqCst);
            c.asleep.store(1, SeqCst);
        })
    }

    /// Its thread woke, on `cpu`, at `now_ns`.
    pub fn woke(&self, cpu: u32, now_ns: u64) {
        self.with(|c| {
            c.cpu.store(cpu, SeqCst);
            c.woke_ns.store(now_ns, SeqCst);
            c.asleep.store(0, SeqCst);
        })
    }

    /// Another process moved its thread to `cpu`.
    pub fn moved_to(&self, cpu: u32) {
        self.with(|c| c.cpu.store(cpu, SeqCst));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{slot_footprint, Segment};
    use std::sync::Arc;

    #[test]
    fn a_card_follows_the_inbox_and_says_what_was_written() {
        let segment = Arc::new(Segment::in_process(slot_footprint(DOORBELL_DATA)));
        let slot = SlotRef::new(segment.clone(), 0, DOORBELL_DATA).unwrap();
        let card = Card::in_slot(slot.clone()).expect("room for a card");
        let inbox = crate::segment::inbox::Inbox::in_slot(slot).unwrap();
        assert_eq!(card.view(), CardView::default(), "zeroed: no thread");
        card.claim(42, 1, 0b11);
        card.sleeps(0, 5);
        inbox.post(7);
        let v = card.view();
        assert_eq!(
            (v.tid, v.asleep, v.cpu, v.rung),
            (42, true, 0, 5),
            "the inbox did not touch it"
        );
        card.woke(1, 99);
        card.moved_to(0);
        assert_eq!(
            card.view(),
            CardView {
                tid: 42,
                asleep: false,
                cpu: 0,
                rung: 5,
                woke_ns: 99,
                cores: 0b11
            }
        );
        let small = SlotRef::new(segment, 0, INBOX_BYTES).unwrap();
        assert!(
            Card::in_slot(small).is_none(),
            "an inbox-only slot has no card"
        );
    }
}
