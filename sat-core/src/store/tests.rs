//! The local store alone: instances kept identical, LRU eviction within the
//! capacity, MAP'd memory used in place.

use super::*;
use crate::protocol::{Access, Acquire, ToClient};

fn single(id: ChunkId, size: usize) -> ChainLayout {
    ChainLayout::malloc_lst(&[id], &[size]).unwrap()
}

const MESI: ProtocolId = ProtocolId::HomeMesi;

/// Memory a face lends (C's chains, Python's buffers), as a test sets it.
struct Lent {
    bytes: Vec<u8>,
    discardable: bool,
    exposed: bool,
}

impl LocalMemory for Lent {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
    fn discardable(&self) -> bool {
        self.discardable
    }
    fn exposed(&self) -> bool {
        self.exposed
    }
}

/// Makes `chunk` hold version 1 with `bytes`, as a read grant would.
fn fill(store: &mut Store, chunk: ChunkId, bytes: &[u8]) {
    let c = store.get_mut(chunk).unwrap();
    assert_eq!(
        c.side.acquire(Access::Read).unwrap(),
        Acquire::Request(crate::protocol::ToHome::ReadReq { have: None })
    );
    let r = c
        .side
        .on_message(
            ToClient::ReadGrant {
                version: 1,
                with_data: true,
            },
            Some(bytes),
        )
        .unwrap();
    assert!(r.take_data);
    store.take_data(chunk, bytes);
    store.get_mut(chunk).unwrap().side.release().unwrap();
}

#[test]
fn the_same_layout_returns_the_same_chain() {
    let mut s = Store::new(MemoryCapacity::Unlimited);
    let a = s.add_chain(
        ChainLayout::malloc(10, 100, 40).unwrap(),
        &[MESI; 3],
        Vec::new(),
        None,
    );
    let b = s.add_chain(
        ChainLayout::malloc(10, 100, 40).unwrap(),
        &[MESI; 3],
        Vec::new(),
        None,
    );
    assert_eq!(a, b);
    assert_eq!(s.footprint().0, 3);
}

#[test]
fn data_from_the_home_reaches_every_instance() {
    let mut s = Store::new(MemoryCapacity::Unlimited);
    let chain = s.add_chain(
        ChainLayout::malloc(10, 8, 4).unwrap(),
        &[MESI; 2],
        Vec::new(),
        None,
    );
    s.add_chain(single(11, 4), &[MESI], Vec::new(), None);
    fill(&mut s, 11, &[1, 2, 3, 4]);
    assert_eq!(s.chain_bytes(&chain).unwrap(), &[0, 0, 0, 0, 1, 2, 3, 4]);
    let solo = s.place_index(11, None).unwrap();
    let in_chain = s.place_index(11, Some(&chain)).unwrap();
    assert_eq!(solo, in_chain, "the first instance is the chain's");
    let other = 1 - in_chain;
    assert_eq!(s.bytes(11, other).unwrap(), &[1, 2, 3, 4]);
    // A write through the chain spreads to the single instance.
    s.bytes_mut(11, in_chain)
        .unwrap()
        .copy_from_slice(&[9, 9, 9, 9]);
    s.spread(11, in_chain);
    assert_eq!(s.bytes(11, other).unwrap(), &[9; 4]);
}

#[test]
fn a_new_instance_starts_with_the_valid_bytes_of_another() {
    let mut s = Store::new(MemoryCapacity::Unlimited);
    s.add_chain(single(11, 4), &[MESI], Vec::new(), None);
    fill(&mut s, 11, &[5; 4]);
    let chain = s.add_chain(
        ChainLayout::malloc(10, 8, 4).unwrap(),
        &[MESI; 2],
        Vec::new(),
        None,
    );
    assert_eq!(s.chain_bytes(&chain).unwrap(), &[0, 0, 0, 0, 5, 5, 5, 5]);
}

#[test]
fn the_least_recently_used_idle_region_is_evicted() {
    let mut s = Store::new(MemoryCapacity::Chunks(2));
    s.add_chain(single(1, 4), &[MESI], Vec::new(), None);
    s.add_chain(single(2, 4), &[MESI], Vec::new(), None);
    fill(&mut s, 1, &[1; 4]);
    fill(&mut s, 2, &[2; 4]);
    s.prepare(1, 0); // 1 is now more recent than 2
    s.add_chain(single(3, 4), &[MESI], Vec::new(), None);
    assert_eq!(s.footprint(), (2, 8, 1));
    assert!(s.bytes(2, 0).is_none(), "2 was the least recently used");
    assert_eq!(
        s.get(2).unwrap().side.version(),
        None,
        "its copy is invalid"
    );
    assert_eq!(s.bytes(1, 0).unwrap(), &[1; 4]);
    // Using 2 again brings it back zeroed and invalid (the home has it),
    // and evicts the least recently used of the others.
    s.prepare(2, 0);
    assert_eq!(s.bytes(2, 0).unwrap(), &[0; 4]);
    assert!(s.bytes(1, 0).is_none());
    assert_eq!(s.footprint(), (2, 8, 2));
}

#[test]
fn a_region_in_scope_is_never_evicted() {
    let mut s = Store::new(MemoryCapacity::Chunks(1));
    s.add_chain(single(1, 4), &[MESI], Vec::new(), None);
    fill(&mut s, 1, &[1; 4]);
    assert_eq!(
        s.get_mut(1).unwrap().side.acquire(Access::Read).unwrap(),
        Acquire::Hit
    );
    s.add_chain(single(2, 4), &[MESI], Vec::new(), None);
    assert_eq!(s.bytes(1, 0).unwrap(), &[1; 4], "in scope: kept");
    assert_eq!(s.footprint().0, 2, "over capacity rather than blocked");
}

#[test]
fn mapped_memory_is_used_in_place_and_never_evicted() {
    let mut s = Store::new(MemoryCapacity::Chunks(1));
    let mine: Box<dyn LocalMemory> = Box::new(vec![7u8; 8]);
    let addr = mine.bytes().as_ptr() as usize;
    let chain = s.add_chain(
        ChainLayout::malloc(1, 8, 4).unwrap(),
        &[MESI; 2],
        Vec::new(),
        Some(mine),
    );
    assert_eq!(s.chain_bytes(&chain).unwrap().as_ptr() as usize, addr);
    assert_eq!(
        s.chain_bytes(&chain).unwrap(),
        &[7; 8],
        "the caller's bytes stay"
    );
    s.add_chain(single(5, 4), &[MESI], Vec::new(), None);
    s.add_chain(single(6, 4), &[MESI], Vec::new(), None);
    assert_eq!(s.chain_bytes(&chain).unwrap().as_ptr() as usize, addr);
    assert_eq!(s.footprint().0, 1, "MAP'd memory is not counted");
}

#[test]
fn unmap_gives_the_memory_back_and_forgets_the_places() {
    let mut s = Store::new(MemoryCapacity::Unlimited);
    let mine: Box<dyn LocalMemory> = Box::new(vec![3u8; 8]);
    let addr = mine.bytes().as_ptr() as usize;
    let mapped = s.add_chain(
        ChainLayout::malloc(1, 8, 4).unwrap(),
        &[MESI; 2],
        Vec::new(),
        Some(mine),
    );
    let own = s.add_chain(single(2, 4), &[MESI], Vec::new(), None);
    assert!(
        s.unmap(&own).is_err(),
        "SAT's own memory is not the caller's"
    );
    assert_eq!(
        s.get_mut(1).unwrap().side.acquire(Access::Write).unwrap(),
        Acquire::Request(crate::protocol::ToHome::WriteReq {
            have: None,
            need_data: false
        })
    );
    assert!(s.unmap(&mapped).is_err(), "a chunk waits for the home");
    let c = s.get_mut(1).unwrap();
    c.side
        .on_message(
            ToClient::WriteGrant {
                version: 0,
                with_data: false,
            },
            None,
        )
        .unwrap();
    c.side.release().unwrap();
    let back = s.unmap(&mapped).unwrap();
    assert_eq!(back.bytes().as_ptr() as usize, addr);
    assert_eq!(back.bytes(), &[3; 8]);
    assert_eq!(s.place_index(1, None), None, "chunk 1 has no instance left");
    assert_eq!(
        s.place_index(2, None),
        Some(0),
        "chunk 2 is in the other chain"
    );
    assert!(s.unmap(&mapped).is_err(), "only once");
    // FREE takes SAT's own memory as well, once.
    assert!(s.holds(&own));
    assert_eq!(s.free(&own).unwrap().map(|m| m.bytes().len()), Some(4));
    assert!(!s.holds(&own) && s.free(&own).is_err());
    assert_eq!(s.place_index(2, None), None);
    assert_eq!(s.footprint().0, 0, "nothing resident is left");
}

/// The copy that hashes as it goes gives the bytes and the digest a copy
/// and a separate hash give, at sizes around its block.
#[test]
fn copying_and_hashing_in_one_pass_gives_the_same_digest() {
    for len in [0, 1, 4095, 128 << 10, (128 << 10) + 1, 3 * (128 << 10) - 7] {
        let from: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let mut to = vec![0u8; len];
        let d = super::copy_and_digest(&mut to, &from);
        assert_eq!(to, from, "{len} bytes");
        assert_eq!(d, super::digest(&from), "{len} bytes");
    }
}

/// Memory a face lends that may be evicted in place (the C ABI's chains):
/// it counts against the capacity like SAT's own; over it, the least
/// recently used idle one loses its contents but keeps its address, and
/// comes back (counted again, invalid until filled) when next used.
#[test]
fn discardable_memory_counts_and_is_evicted_in_place() {
    let mut s = Store::new(MemoryCapacity::Chunks(2));
    let lent: Box<dyn LocalMemory> = Box::new(Lent {
        bytes: vec![0u8; 4],
        discardable: true,
        exposed: false,
    });
    let addr = lent.bytes().as_ptr() as usize;
    let chain = s.add_chain(single(1, 4), &[MESI], Vec::new(), Some(lent));
    assert_eq!(s.footprint(), (1, 4, 0), "lent memory is counted");
    fill(&mut s, 1, &[1; 4]);
    s.add_chain(single(2, 4), &[MESI], Vec::new(), None);
    fill(&mut s, 2, &[2; 4]);
    s.prepare(2, 0); // 2 is now more recent than 1
    s.add_chain(single(3, 4), &[MESI], Vec::new(), None);
    assert_eq!(s.footprint(), (2, 8, 1));
    assert!(s.chain_bytes(&chain).is_none(), "1 was evicted");
    assert_eq!(
        s.get(1).unwrap().side.version(),
        None,
        "its copy is invalid"
    );
    assert_eq!(s.bytes(2, 0).unwrap(), &[2; 4]);
    // Used again: the same address, zeroed and invalid (the home has it),
    // counted again, and the least recently used other one goes.
    s.prepare(1, 0);
    let back = s.chain_bytes(&chain).unwrap();
    assert_eq!((back.as_ptr() as usize, back), (addr, &[0u8; 4][..]));
    assert_eq!(s.footprint(), (2, 8, 2));
    // Given back while evicted or not, the count follows.
    let mem = s.unmap(&chain).unwrap();
    assert_eq!(mem.bytes().as_ptr() as usize, addr);
    assert_eq!(s.footprint().0, 1);
}

/// Bytes written into an exposed place outside any scope (C's
/// `chunk->data`, a kept numpy array) never become another place's: a
/// place made resident again copies only from places checked first.
#[test]
fn bytes_written_outside_a_scope_never_reach_another_place() {
    let mut s = Store::new(MemoryCapacity::Chunks(1));
    s.add_chain(single(1, 4), &[MESI], Vec::new(), None);
    let mut face = Box::new(Lent {
        bytes: vec![0u8; 4],
        discardable: false,
        exposed: true,
    });
    let outside = face.bytes.as_mut_ptr();
    s.add_chain(single(1, 4), &[MESI], Vec::new(), Some(face));
    fill(&mut s, 1, &[1; 4]);
    // SAFETY: the store keeps the face's memory, unresized, while the chain
    // lives; nothing else uses it now (as C code writing chunk->data).
    unsafe { outside.write_bytes(9, 4) };
    // Chunk 2 takes the only counted room: chunk 1's own place is evicted.
    s.add_chain(single(2, 4), &[MESI], Vec::new(), None);
    assert!(s.bytes(1, 0).is_none(), "the own place was evicted");
    s.prepare(1, 0);
    assert_ne!(
        s.bytes(1, 0).unwrap(),
        &[9; 4],
        "the written bytes were copied in"
    );
    assert_eq!(
        s.get(1).unwrap().side.version(),
        None,
        "no place holds the version: it is fetched again"
    );
}

/// A pushed version (an update, a learned set's push) leaves memory the
/// caller owns (MAP) as the caller filled it, and its place invalid: a PUT
/// then publishes the caller's bytes (Figure 6). SAT's own places take it.
/// A granted version is written everywhere, the caller's memory included.
#[test]
fn a_pushed_version_leaves_the_callers_memory_alone() {
    let mut s = Store::new(MemoryCapacity::Unlimited);
    let mapped = Box::new(Lent {
        bytes: vec![0x33u8; 4],
        discardable: false,
        exposed: true,
    });
    s.add_chain(single(1, 4), &[MESI], Vec::new(), Some(mapped));
    s.take_push(1, &[0x22; 4]);
    assert_eq!(s.bytes(1, 0), Some(&[0x33u8; 4][..]), "the caller's bytes");
    assert!(!s.get(1).unwrap().places[0].valid, "not the version's");
    s.take_data(1, &[0x44; 4]);
    assert_eq!(s.bytes(1, 0), Some(&[0x44u8; 4][..]), "a grant fills it");
    // A face's own chain (C's, discardable) and SAT's memory take a push.
    let own = Box::new(Lent {
        bytes: vec![0x33u8; 4],
        discardable: true,
        exposed: true,
    });
    s.add_chain(single(2, 4), &[MESI], Vec::new(), Some(own));
    s.take_push(2, &[0x22; 4]);
    assert_eq!(s.bytes(2, 0), Some(&[0x22u8; 4][..]));
    s.add_chain(single(3, 4), &[MESI], Vec::new(), None);
    s.take_push(3, &[0x22; 4]);
    assert_eq!(s.bytes(3, 0), Some(&[0x22u8; 4][..]));
}
