//! Reading a version where it is: a READ scope whose bytes are the home's
//! version in its host slot, not the chain's own memory.
//!
//! A usual READ scope on one host copies the slot's version into the
//! chain's memory (`client/host.rs`), because C's `chunk->data` and
//! Python's `Chain.array` are that memory and must hold what the scope
//! read. A reader that only looks at the bytes inside the scope (a numpy
//! array summed, a frame decoded) can skip that copy: it holds the slot's
//! read lock for the scope, as a usual READ does, and reads the version in
//! the slot. The chain's own bytes and the protocol's state are left as
//! they were, so every other scope is as if this one had not happened.
//!
//! A chunk is read so, not a chain: a view is one block of bytes, and the
//! slots of a chain's chunks are not contiguous (a chain of one chunk is
//! that chunk). Where the chunk cannot be read in place (no host slot, or
//! this process already has it in a scope or a request),
//! [`Client::read_in_place`] says so and the caller opens the usual scope.
//!
//! The view is valid until [`Client::end_read_in_place`]; after it, the
//! bytes it points at may be a later version, or one being written. The
//! mapping stays while a [`SlotView`] lives, so a view kept too long reads
//! whatever the slot holds, never freed memory.

use std::sync::Arc;

use super::{this_thread, Client, WaitFor};
use crate::chunk::ChunkId;
use crate::error::{SatError, SatResult};
use crate::protocol::Access;
use crate::segment::SlotRef;
use crate::stats::{self, Activity};

/// The bytes of a version read in place ([`Client::read_in_place`]).
pub struct SlotView {
    /// Keeps the segment mapped while the view lives.
    slot: SlotRef,
    version: u64,
}

impl SlotView {
    /// The version's bytes. Inside the scope they are the version; after
    /// it, whatever the slot holds (read them inside the scope).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the slot's mapping lives as long as `self.slot`. While
        // the read lock is held nobody writes the version's bytes; after
        // it, a writer may, which the caller was told.
        unsafe { self.slot.slot().version_bytes(self.version) }
    }

    /// The version read.
    pub fn version(&self) -> u64 {
        self.version
    }
}

impl Client {
    /// READ of `chunk` in place: takes the read lock of its host slot
    /// (waiting as a READ waits) and gives the version's bytes there, with
    /// no copy into the chunk's local bytes. `Ok(None)` when the chunk
    /// cannot be read so (module docs): open the usual READ scope then.
    /// End it with [`Client::end_read_in_place`]. While it is open, this
    /// thread may open no other scope on the chunk (it would wait for
    /// itself); other threads may, and wait for it as for any reader.
    pub fn read_in_place(&self, chunk: ChunkId) -> SatResult<Option<SlotView>> {
        self.fatal()?;
        let _sat = stats::doing(Activity::Sdsm);
        let started = stats::scope_start();
        let me = this_thread();
        let (slot, reader, size) = {
            let st = self.lock();
            let c = st.store.get(chunk).ok_or_else(|| super::unknown(chunk))?;
            match st.in_place.get(&chunk) {
                Some(&(t, _)) if t == me => {
                    return Err(SatError::Usage(format!(
                        "READ in place of chunk {chunk} while this thread reads it in place \
                         already: end that scope first"
                    )))
                }
                Some(_) => return Ok(None),
                None => {}
            }
            let Some(slot) = c.host.clone() else {
                return Ok(None);
            };
            if !c.holders.is_empty() || c.side.waiting() || c.orphaned.is_some() {
                return Ok(None);
            }
            (slot, st.host.reader(), c.size)
        };
        if !slot.slot().try_lock_read(reader) {
            // Counted in the slot, so that the holder wakes this process
            // when it lets go.
            slot.slot().lock_waiter(true);
            let got = self.wait_inner(None, WaitFor::Reply, Some(&slot), |_| {
                slot.slot().try_lock_read(reader).then_some(())
            });
            slot.slot().lock_waiter(false);
            got?;
        }
        // The read lock is held: the version and its bytes stay as they are.
        let version = slot.slot().peek_version();
        let view = SlotView {
            slot: slot.clone(),
            version,
        };
        if view.bytes().len() != size {
            // SAFETY: taken above by this call.
            unsafe { slot.slot().unlock_read(reader) };
            return Err(SatError::Usage(format!(
                "chunk {chunk}: its host slot holds {} bytes, the chunk {size}",
                view.bytes().len()
            )));
        }
        let mut st = self.lock();
        // A process never reads a version before it is told of it
        // (`Queue::read_at`).
        st.mail
            .events
            .read_at(chunk, version, || Arc::from(view.bytes()));
        st.in_place.insert(chunk, (me, started));
        st.store.read_in_place += 1;
        Ok(Some(view))
    }

    /// Ends the READ in place of `chunk` ([`Client::read_in_place`]).
    pub fn end_read_in_place(&self, chunk: ChunkId) -> SatResult<()> {
        let _sat = stats::doing(Activity::Sdsm);
        let (slot, reader, started) = {
            let mut st = self.lock();
            let Some((_, started)) = st.in_place.remove(&chunk) else {
                return Err(SatError::Usage(format!(
                    "end of a READ in place of chunk {chunk}: it is not read in place by this \
                     process"
                )));
            };
            let slot = st.store.get(chunk).and_then(|c| c.host.clone());
            (slot, st.host.reader(), started)
        };
        let Some(slot) = slot else {
            return Err(super::unknown(chunk));
        };
        // SAFETY: `read_in_place` took this read lock, recorded in
        // `in_place`, whose entry this call removed.
        unsafe { slot.slot().unlock_read(reader) };
        if slot.slot().lock_waiters() > 0 {
            // Writers waiting for the lock sleep on the slot: wake them.
            slot.slot().announce();
        }
        stats::access(chunk, Access::Read, false, started);
        Ok(())
    }
}
