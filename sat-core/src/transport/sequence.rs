//! Per-sender order of the libfabric transport's eager packets.
//!
//! `FI_ORDER_SAS` makes the provider process one sender's sends in order,
//! but the completions of the receives they match may be reported in
//! another order: completion order is a separate promise, which shm and tcp
//! do not make. So every eager packet carries a sequence number, counted
//! per (sender, receiver) pair, in its tag; the receiver delivers a sender's
//! packets by that number, holding one that completes early until those
//! before it have. A packet that repeats a number already delivered, or runs
//! too far ahead of the next one due, cannot come from a well-behaved peer:
//! it is refused (the transport drops and logs it).

use std::collections::BTreeMap;

/// Bits of an eager tag the sequence number takes.
pub const SEQ_BITS: u32 = 19;
const MODULO: u32 = 1 << SEQ_BITS;

/// How many packets of one sender may wait for an earlier one. An early
/// completion can be ahead by at most the receives posted at once (the
/// transport's receive slots, 64); a peer that goes further is refused.
pub const MAX_EARLY: u32 = 64;

/// The sequence numbers a sender gives its packets to one destination.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outgoing {
    next: u32,
}

impl Outgoing {
    /// The number of the next packet (taken: call [`Outgoing::untake`] if
    /// the packet is not sent after all).
    pub fn take(&mut self) -> u32 {
        let seq = self.next;
        self.next = (self.next + 1) % MODULO;
        seq
    }

    /// Gives back `seq`, the last number taken, for a packet never sent:
    /// the receiver would otherwise wait for it forever.
    pub fn untake(&mut self, seq: u32) {
        debug_assert_eq!((seq + 1) % MODULO, self.next);
        self.next = seq;
    }
}

/// The packets of one sender, put back in order.
#[derive(Debug)]
pub struct Incoming<T> {
    expected: u32,
    early: BTreeMap<u32, T>,
}

impl<T> Default for Incoming<T> {
    fn default() -> Self {
        Incoming {
            expected: 0,
            early: BTreeMap::new(),
        }
    }
}

impl<T> Incoming<T> {
    /// Takes packet `seq`: appends to `ready` the packets now due, in
    /// order (none while an earlier one is missing). A packet that cannot
    /// be in order is given back, with the reason.
    pub fn arrive(
        &mut self,
        seq: u32,
        packet: T,
        ready: &mut Vec<T>,
    ) -> Result<(), (T, &'static str)> {
        if seq >= MODULO {
            return Err((packet, "sequence number out of range"));
        }
        let ahead = seq.wrapping_sub(self.expected) % MODULO;
        if ahead == 0 {
            ready.push(packet);
            self.expected = (self.expected + 1) % MODULO;
            while let Some(next) = self.early.remove(&self.expected) {
                ready.push(next);
                self.expected = (self.expected + 1) % MODULO;
            }
            return Ok(());
        }
        if ahead > MODULO / 2 {
            return Err((
                packet,
                "sequence number already delivered (a repeated packet)",
            ));
        }
        if ahead > MAX_EARLY || self.early.len() >= MAX_EARLY as usize {
            return Err((packet, "sequence number too far ahead of the next one due"));
        }
        if self.early.contains_key(&seq) {
            return Err((
                packet,
                "sequence number already waiting (a repeated packet)",
            ));
        }
        self.early.insert(seq, packet);
        Ok(())
    }

    /// Starts over for a new peer in the same slot (a service's client that
    /// left and another that joined): returns the packets still waiting.
    pub fn reset(&mut self) -> Vec<T> {
        self.expected = 0;
        std::mem::take(&mut self.early).into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrive(inc: &mut Incoming<u32>, seq: u32) -> Result<Vec<u32>, &'static str> {
        let mut ready = Vec::new();
        inc.arrive(seq, seq, &mut ready).map_err(|(_, why)| why)?;
        Ok(ready)
    }

    #[test]
    fn packets_that_complete_out_of_order_are_delivered_in_order() {
        let mut inc = Incoming::default();
        assert_eq!(arrive(&mut inc, 0), Ok(vec![0]));
        assert_eq!(arrive(&mut inc, 2), Ok(vec![]));
        assert_eq!(arrive(&mut inc, 3), Ok(vec![]));
        assert_eq!(arrive(&mut inc, 1), Ok(vec![1, 2, 3]));
        assert_eq!(arrive(&mut inc, 4), Ok(vec![4]));
    }

    #[test]
    fn numbers_wrap_around() {
        let mut out = Outgoing { next: MODULO - 2 };
        let seqs: Vec<u32> = (0..4).map(|_| out.take()).collect();
        assert_eq!(seqs, vec![MODULO - 2, MODULO - 1, 0, 1]);
        let mut inc = Incoming {
            expected: MODULO - 2,
            early: BTreeMap::new(),
        };
        assert_eq!(arrive(&mut inc, 0), Ok(vec![]));
        assert_eq!(arrive(&mut inc, MODULO - 2), Ok(vec![MODULO - 2]));
        assert_eq!(arrive(&mut inc, MODULO - 1), Ok(vec![MODULO - 1, 0]));
    }

    #[test]
    fn repeated_and_runaway_packets_are_refused() {
        let mut inc = Incoming::default();
        arrive(&mut inc, 0).unwrap();
        assert!(arrive(&mut inc, 0)
            .unwrap_err()
            .contains("already delivered"));
        assert!(arrive(&mut inc, 1 + MAX_EARLY + 1)
            .unwrap_err()
            .contains("too far ahead"));
        assert!(arrive(&mut inc, MODULO)
            .unwrap_err()
            .contains("out of range"));
        arrive(&mut inc, 5).unwrap();
        assert!(arrive(&mut inc, 5).unwrap_err().contains("already waiting"));
        assert_eq!(inc.reset(), vec![5]);
        assert_eq!(arrive(&mut inc, 0), Ok(vec![0]));
    }

    #[test]
    fn an_untaken_number_is_the_next_one() {
        let mut out = Outgoing::default();
        let a = out.take();
        out.untake(a);
        assert_eq!(out.take(), a);
    }
}
