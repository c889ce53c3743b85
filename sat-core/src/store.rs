//! A client's local store: where the bytes of its chunks live (section 2.2).
//!
//! Chunk bytes live in **regions**: one contiguous piece of memory per chunk
//! chain, holding its chunks back to back so that pointer arithmetic runs
//! across chunk boundaries. A single-chunk MALLOC is a chain of one. A MAP'd
//! chain's region is the caller's memory, used in place.
//!
//! A chunk may sit in several chains of one process, so it may have several
//! **places** (region and byte range). The protocol state ([`ClientSide`]) is
//! one per chunk, and its version is the version of the bytes of every
//! **valid** place. Data coming from the home is copied into every resident
//! place, and the bytes of a write scope are copied from the place it was
//! opened through into the others at release, making them all valid. A
//! place that joins later (a new chain over a chunk already held, memory a
//! caller brings with MAP, a region brought back after eviction) is valid
//! only once it holds those bytes: a scope that opens through an invalid
//! place first copies them from a valid one (`Store::make_valid`). So a
//! chain added while one of its chunks is inside another chain's scope never
//! passes the caller's bytes off as the chunk's version.
//!
//! **Capacity** (the topology's `<memory capacity>`, Figure 15c): when the
//! regions SAT allocated hold more chunks or bytes than allowed, the least
//! recently used region whose chunks are all outside scopes and requests is
//! dropped, and its chunks' copies are invalidated. No data is lost by that:
//! outside a write scope the home holds the last released version, and the
//! next acquire fetches it. Regions of MAP'd memory are the caller's, so they
//! are never dropped nor counted, except memory a face lends that may lose
//! its contents where it is ([`LocalMemory::discardable`]: the C ABI's
//! chains, whose `chunk->data` must not move): it counts like SAT's own, and
//! eviction discards its pages instead of dropping it. A region that cannot
//! be dropped (every candidate is in use) lets the store exceed its capacity
//! rather than block.

use rustc_hash::FxHashMap as HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::thread::ThreadId;

use crate::chunk::{ChainLayout, ChunkId};
use crate::protocol::{ClientSide, ProtocolId};
use crate::segment::SlotRef;
use crate::topology::MemoryCapacity;
use memo::Memo;

mod memo;

/// Memory that chunk data can live in: SAT's own buffers, or the caller's
/// memory given to MAP. A face (such as the C ABI) may implement it over
/// memory it owns; the store only reads and writes through these slices.
pub trait LocalMemory: Send {
    /// The memory, read: its length is the chain's size, and it must stay
    /// at the same address for as long as SAT holds it.
    fn bytes(&self) -> &[u8];
    /// The memory, written by scopes and the copies that fill them.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Whether code outside SAT can write these bytes at any time, not
    /// only through a write scope (C's `chunk->data`, a Python buffer):
    /// the store then checks, before a scope reads them, that they are
    /// still the version they claim to be (writes made inside a READ scope
    /// or outside any scope are lost, as Figure 5 says). Default: no.
    fn exposed(&self) -> bool {
        false
    }
    /// Whether the store may evict these bytes in place ([`discard`]) when
    /// it is over its memory capacity: the memory then counts against the
    /// capacity like SAT's own. Default: no (the caller's MAP memory).
    ///
    /// [`discard`]: LocalMemory::discard
    fn discardable(&self) -> bool {
        false
    }
    /// Gives the memory's contents up without moving it (the bytes then
    /// read as zeros; an anonymous mapping returns its pages to the
    /// system). Called only when [`LocalMemory::discardable`], on memory
    /// whose chunks are outside scopes and requests.
    fn discard(&mut self) {
        self.bytes_mut().fill(0);
    }
}

impl LocalMemory for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl LocalMemory for Box<[u8]> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

type RegionId = u64;

/// The digest exposed places are checked against.
fn digest(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Copies `from` into `to` and returns the digest of the bytes, in one pass
/// over memory: each block is hashed while the copy has it in cache (a
/// large version is otherwise read twice, once to copy, once to hash).
pub(crate) fn copy_and_digest(to: &mut [u8], from: &[u8]) -> u64 {
    /// Fits a core's L2 with room to spare.
    const BLOCK: usize = 128 << 10;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for (to, from) in to.chunks_mut(BLOCK).zip(from.chunks(BLOCK)) {
        to.copy_from_slice(from);
        hasher.update(to);
    }
    hasher.digest()
}

/// A chunk chain as this process holds it: its layout and its region of
/// local memory. Cheap to clone; it is a handle, the data stays in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    region: RegionId,
    layout: Arc<ChainLayout>,
}

impl Chain {
    /// The chunk ids in chain order.
    pub fn ids(&self) -> impl Iterator<Item = ChunkId> + '_ {
        self.layout.chunks().iter().map(|&(id, _)| id)
    }

    /// The first chunk of the chain (the report's `baseid`).
    pub fn first(&self) -> ChunkId {
        self.layout.chunks()[0].0
    }

    /// The number of chunks.
    pub fn len(&self) -> usize {
        self.layout.len()
    }

    /// Whether the chain has no chunk (never true of a chain allocated).
    pub fn is_empty(&self) -> bool {
        self.layout.is_empty()
    }

    /// The size of the chain's data in bytes.
    pub fn size(&self) -> usize {
        self.layout.total_size()
    }

    /// Which chunk sits where in the chain's contiguous data.
    pub fn layout(&self) -> &ChainLayout {
        &self.layout
    }

    /// The chain's region: unique to this chain in its process, never
    /// reused (what a chain subscription is keyed by).
    pub(crate) fn region(&self) -> RegionId {
        self.region
    }
}

/// One local instance of a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    region: RegionId,
    range: Range<usize>,
    /// It holds the bytes of the version the protocol state records.
    valid: bool,
    /// Its memory can be written outside SAT ([`LocalMemory::exposed`]).
    exposed: bool,
}

/// What the process knows of one chunk.
pub(crate) struct LocalChunk {
    pub size: usize,
    /// The protocol it runs here now (an adaptive chunk's changes).
    pub protocol: ProtocolId,
    /// The protocol its home allocated it with, as every allocation answer
    /// says: what a MALLOC of it here must ask for.
    pub allocated: ProtocolId,
    pub side: Box<dyn ClientSide>,
    /// The host slot its home keeps the version in, when it does: scopes
    /// are then opened on the slot (`client/host.rs`), and `side` is the
    /// home-only protocol's whatever `protocol` says.
    pub host: Option<SlotRef>,
    /// Whether `host` is set: for the whole life of the chunk here (the
    /// client moves `host` out while it works on the slot).
    in_host_slot: bool,
    /// Its instances; the first is the one plain chunk calls use.
    places: Vec<Place>,
    /// The instance the open write scope was acquired through: its bytes
    /// are the new version at release.
    scope_place: usize,
    /// The threads inside a scope (or waiting for one) of this chunk: a
    /// thread waits for another's scope, and is told of its own misuse.
    pub holders: Vec<ThreadId>,
    /// The instance each holder's scope opened through, beside `holders`
    /// (same order): a chain's RELEASE or ABORT ends only scopes its own
    /// chain opened, not part of a wider one (`Client::release_chain`).
    pub holder_places: Vec<usize>,
    /// Threads of this process that wait for another thread's scope on the
    /// chunk, in the order they began to, and whether each asks to write. A
    /// thread that comes later does not pass one whose access conflicts
    /// with its own (`Client::acquire_at`): without the queue, a thread
    /// that reads again as soon as it released got the chunk before a
    /// writer that waited, every time, and starved it.
    pub queued: Vec<(ThreadId, bool)>,
    /// The open scope's start, access and hit, for the statistics stream.
    pub scope_stat: Option<(u64, crate::protocol::Access, bool)>,
    /// Grants taken so far: a thread that sent a request waits for the
    /// next one (another thread's request may follow it at once).
    pub grants: u64,
    /// The digest of the version's bytes, kept while the chunk has an
    /// exposed place and no host slot ([`LocalChunk::keeps_digest`]): what
    /// an exposed place is checked against.
    digest: Option<u64>,
    /// The bytes an open write scope of a diffing protocol opened on
    /// ([`crate::protocol::hlrc`]): its release publishes what differs.
    pub twin: Option<Vec<u8>>,
    /// The protocol epoch `side` speaks in (an adaptive chunk's: see
    /// `client/switch.rs`; 0 for every other chunk).
    pub epoch: u32,
    /// A switch the home asked for while a scope of this process was open:
    /// applied when the last one ends (epoch, protocol).
    pub switch_to: Option<(u32, ProtocolId)>,
    /// The access of the last request sent to the home: asked again under
    /// the new protocol when a switch finds it unanswered. None for a
    /// request asked ahead of a chain's READ (`Client::acquire_chain`),
    /// which no thread waits for: a switch drops it.
    pub asking: Option<crate::protocol::Access>,
    /// A request to ask again after a switch, that could not leave yet.
    pub reask: Option<crate::protocol::Access>,
    /// The copy was asked for ahead of a chain's READ (`Client::acquire_chain`)
    /// since the last scope opened here: that READ asked the home, and the
    /// statistics count it as a miss even if the grant came before it.
    pub asked_ahead: bool,
    /// The barrier pass (`client/learned.rs`) of the last READ of the chunk
    /// here: a read request is the first after a barrier when it differs.
    pub read_pass: u64,
    /// The home this process's scopes and requests of the chunk were with
    /// is lost (`client/failover.rs`), and why: the threads inside a scope
    /// or waiting for one end it here, without a message (a write publishes
    /// nothing), and the last one starts the chunk afresh.
    pub orphaned: Option<String>,
}

impl LocalChunk {
    /// `thread` is inside a scope of the chunk (or waits for one), opened
    /// through instance `place`.
    pub fn add_holder(&mut self, thread: ThreadId, place: usize) {
        self.holders.push(thread);
        self.holder_places.push(place);
    }

    /// `thread`'s scope has ended; a thread that ends another's scope (the
    /// end of a C role) takes the first holder's.
    pub fn remove_holder(&mut self, thread: ThreadId) {
        self.remove_holder_through(thread, None)
    }

    /// [`LocalChunk::remove_holder`] of the scope opened through instance
    /// `place` when given: `thread`'s own such scope, else another
    /// thread's (any thread may end a scope of its process).
    pub fn remove_holder_through(&mut self, thread: ThreadId, place: Option<usize>) {
        let at = |want: Option<ThreadId>| {
            (0..self.holders.len()).find(|&i| {
                want.is_none_or(|t| self.holders[i] == t)
                    && place.is_none_or(|p| self.holder_places[i] == p)
            })
        };
        let i = (at(Some(thread)).or_else(|| at(None)))
            .or_else(|| self.holders.iter().position(|&t| t == thread))
            .or((!self.holders.is_empty()).then_some(0));
        if let Some(i) = i {
            self.holders.swap_remove(i);
            self.holder_places.swap_remove(i);
        }
    }

    /// Whether a scope on the chunk was opened through instance `place`
    /// (by any thread of the process).
    pub fn holds_through(&self, place: Option<usize>) -> bool {
        place.is_some_and(|p| self.holder_places.contains(&p))
    }

    /// The instance the scope `thread` would end opened through (its own,
    /// else the first holder's, as [`LocalChunk::remove_holder`] takes).
    pub fn holder_place(&self, thread: ThreadId) -> Option<usize> {
        let i = self.holders.iter().position(|&t| t == thread);
        i.or((!self.holders.is_empty()).then_some(0))
            .map(|i| self.holder_places[i])
    }

    /// Whether the chunk's bytes are digested (while copied in or out) and
    /// checked against the digest before a scope trusts them: when code
    /// outside SAT can write them (C's `chunk->data`, numpy views) and the
    /// version comes from a home's messages, where fetching it again costs
    /// a round trip. A chunk in a host slot keeps no digest: its exposed
    /// places stop being valid when its last scope here ends
    /// ([`Store::distrust_exposed`]), so the next scope that reads copies
    /// the slot's bytes in again, which costs what hashing them would, and
    /// no release hashes the version it copies out (a third of a large
    /// hand-off's time).
    fn keeps_digest(&self) -> bool {
        !self.in_host_slot && self.places.iter().any(|p| p.exposed)
    }
}

struct Region {
    layout: Arc<ChainLayout>,
    /// None once evicted; allocated again (zeroed) when next used.
    mem: Option<Box<dyn LocalMemory>>,
    /// The caller's memory (MAP): never evicted, not counted, unless
    /// `discardable`.
    mapped: bool,
    /// Memory lent by a face that eviction discards in place: counted, and
    /// `discarded` instead of dropped.
    discardable: bool,
    /// Its contents were given up (evicted in place): not resident.
    discarded: bool,
    last_use: u64,
}

impl Region {
    /// The memory, while it holds chunk data (not evicted or discarded).
    fn resident(&self) -> Option<&dyn LocalMemory> {
        self.mem.as_deref().filter(|_| !self.discarded)
    }

    fn resident_mut(&mut self) -> Option<&mut (dyn LocalMemory + 'static)> {
        if self.discarded {
            return None;
        }
        self.mem.as_deref_mut()
    }
}

/// Whether [`Store::make_valid_with`] checks exposed places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exposed {
    Check,
    /// Nothing outside SAT has run since they were checked or filled, or
    /// their version is being replaced.
    Trusted,
}

pub(crate) struct Store {
    /// Write scopes opened with no message since the last grant came
    /// ([`crate::protocol::mesi::EXCLUSIVE_BURST`]).
    pub silent_writes: u32,
    /// Chunks pushed as a barrier ended, taken in (`client/learned.rs`).
    pub pushed: u64,
    /// Read requests sent ahead of a chain's READ (`Client::acquire_chain`).
    pub asked_ahead: u64,
    /// PUTs published straight from the caller's bytes into a host slot
    /// (`Client::put`).
    pub put_direct: u64,
    /// READs in place (`client/in_place.rs`).
    pub read_in_place: u64,
    /// Protocol switches of adaptive chunks applied (`client/switch.rs`).
    pub switches: u64,
    /// Chunks whose switch (or the request asked again after it) waits
    /// for a message that could not leave (`client/switch.rs`).
    pub switching: std::collections::BTreeSet<ChunkId>,
    chunks: Memo<ChunkId, LocalChunk>,
    regions: HashMap<RegionId, Region>,
    /// The region of each chain allocated here, so allocating the same
    /// chain again returns it.
    by_layout: HashMap<Arc<ChainLayout>, RegionId>,
    next_region: RegionId,
    capacity: MemoryCapacity,
    clock: u64,
    /// What SAT-allocated resident regions hold, and discardable ones.
    resident_chunks: u64,
    resident_bytes: u64,
    evictions: u64,
    /// Chunk instances in MAP'd memory that is not discardable (the
    /// caller's, always resident).
    mapped_chunks: u64,
}

impl Store {
    pub fn new(capacity: MemoryCapacity) -> Store {
        Store {
            silent_writes: 0,
            pushed: 0,
            asked_ahead: 0,
            put_direct: 0,
            read_in_place: 0,
            switches: 0,
            switching: Default::default(),
            chunks: Memo::default(),
            regions: HashMap::default(),
            by_layout: HashMap::default(),
            next_region: 0,
            capacity,
            clock: 0,
            resident_chunks: 0,
            resident_bytes: 0,
            evictions: 0,
            mapped_chunks: 0,
        }
    }

    pub fn get(&self, chunk: ChunkId) -> Option<&LocalChunk> {
        self.chunks.get(&chunk)
    }

    pub fn get_mut(&mut self, chunk: ChunkId) -> Option<&mut LocalChunk> {
        self.chunks.get_mut(&chunk)
    }

    /// The chunks (at most `at_most`, lowest first) that a thread other
    /// than `me` holds in a scope or waits for.
    pub fn held_beside(&self, me: ThreadId, at_most: usize) -> Vec<ChunkId> {
        let mut held: Vec<ChunkId> = (self.chunks.iter())
            .filter(|(_, c)| c.holders.iter().any(|&t| t != me))
            .map(|(&id, _)| id)
            .collect();
        held.sort_unstable();
        held.truncate(at_most);
        held
    }

    /// The chunks known here, in id order.
    pub fn chunk_ids(&self) -> Vec<ChunkId> {
        let mut ids: Vec<ChunkId> = self.chunks.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The chain allocated with exactly `layout`, if any.
    pub fn existing(&self, layout: &ChainLayout) -> Option<Chain> {
        let &region = self.by_layout.get(layout)?;
        Some(Chain {
            region,
            layout: self.regions[&region].layout.clone(),
        })
    }

    /// Adds a chain whose chunks' sizes and protocols the homes confirmed.
    /// `memory` is the caller's (MAP) or None for SAT's own zeroed buffer.
    /// The same layout without memory returns the chain already there. The
    /// caller's bytes are not a version of the chunks: its places start
    /// invalid (a READ or READWRITE fills them; a WRITE publishes them).
    /// Discardable memory (a face's own, zeroed) is made resident as SAT's
    /// own buffer is: counted, and filled from a valid local instance if
    /// one exists.
    pub fn add_chain(
        &mut self,
        layout: ChainLayout,
        protocols: &[ProtocolId],
        hosts: Vec<Option<SlotRef>>,
        memory: Option<Box<dyn LocalMemory>>,
    ) -> Chain {
        if memory.is_none() {
            if let Some(chain) = self.existing(&layout) {
                return chain;
            }
        }
        let layout = Arc::new(layout);
        let region = self.next_region;
        self.next_region += 1;
        let exposed = memory.as_ref().is_some_and(|m| m.exposed());
        let mut hosts = hosts.into_iter();
        for (i, &(id, size)) in layout.chunks().iter().enumerate() {
            let host = hosts.next().flatten();
            let chunk = self.chunks.get_or_insert_with(id, || LocalChunk {
                size,
                protocol: protocols[i].starting(),
                allocated: protocols[i],
                side: match host {
                    Some(_) => ProtocolId::HomeOnly.consistency().new_client(size),
                    None => protocols[i].starting().consistency().new_client(size),
                },
                in_host_slot: host.is_some(),
                host,
                places: Vec::new(),
                scope_place: 0,
                holders: Vec::new(),
                holder_places: Vec::new(),
                queued: Vec::new(),
                scope_stat: None,
                grants: 0,
                digest: None,
                twin: None,
                epoch: 0,
                switch_to: None,
                asking: None,
                reask: None,
                asked_ahead: false,
                read_pass: 0,
                orphaned: None,
            });
            chunk.places.push(Place {
                region,
                range: layout.range(i),
                valid: false,
                exposed,
            });
        }
        let mapped = memory.is_some();
        let discardable = memory.as_ref().is_some_and(|m| m.discardable());
        if mapped && !discardable {
            self.mapped_chunks += layout.len() as u64;
        } else if !mapped {
            self.by_layout.insert(layout.clone(), region);
        }
        self.regions.insert(
            region,
            Region {
                layout: layout.clone(),
                mem: memory,
                mapped,
                discardable,
                // Discardable memory starts given up: it holds no version,
                // and make_resident counts it in.
                discarded: discardable,
                last_use: 0,
            },
        );
        if !mapped || discardable {
            self.make_resident(region);
        }
        Chain { region, layout }
    }

    /// The place of `chunk` in `chain`, or its first place for None.
    pub fn place_index(&self, chunk: ChunkId, chain: Option<&Chain>) -> Option<usize> {
        let c = self.chunks.get(&chunk)?;
        match chain {
            None => (!c.places.is_empty()).then_some(0),
            Some(chain) => c.places.iter().position(|p| p.region == chain.region),
        }
    }

    /// Gets the instance `place` of `chunk` ready for a scope: its region in
    /// memory (evicting others if needed) and marked as just used.
    pub fn prepare(&mut self, chunk: ChunkId, place: usize) {
        let region = self.chunks[&chunk].places[place].region;
        let r = self.regions.get_mut(&region).expect("known");
        if r.mem.is_some() && !r.discarded {
            // Resident already, as for nearly every scope: one look.
            self.clock += 1;
            r.last_use = self.clock;
            return;
        }
        self.make_resident(region);
        self.clock += 1;
        self.regions.get_mut(&region).expect("known").last_use = self.clock;
    }

    /// Records the instance a write scope opened through.
    pub fn set_scope_place(&mut self, chunk: ChunkId, place: usize) {
        if let Some(c) = self.chunks.get_mut(&chunk) {
            c.scope_place = place;
        }
    }

    /// The bytes of `chunk` at instance `place` (None if not resident).
    pub fn bytes(&self, chunk: ChunkId, place: usize) -> Option<&[u8]> {
        let p = self.chunks.get(&chunk)?.places.get(place)?;
        let mem = self.regions.get(&p.region)?.resident()?;
        Some(&mem.bytes()[p.range.clone()])
    }

    pub fn bytes_mut(&mut self, chunk: ChunkId, place: usize) -> Option<&mut [u8]> {
        let p = self.chunks.get(&chunk)?.places.get(place)?;
        let mem = self.regions.get_mut(&p.region)?.resident_mut()?;
        Some(&mut mem.bytes_mut()[p.range.clone()])
    }

    /// The bytes of the open write scope of `chunk`.
    pub fn scope_bytes(&self, chunk: ChunkId) -> Option<&[u8]> {
        self.bytes(chunk, self.chunks.get(&chunk)?.scope_place)
    }

    /// The first chunk and the length of the chain that holds instance
    /// `place` of `chunk`.
    pub fn chain_start(&self, chunk: ChunkId, place: usize) -> Option<(ChunkId, usize)> {
        let region = self.chunks.get(&chunk)?.places.get(place)?.region;
        let layout = &self.regions.get(&region)?.layout;
        Some((layout.chunks().first()?.0, layout.len()))
    }

    pub fn scope_place(&self, chunk: ChunkId) -> Option<usize> {
        Some(self.chunks.get(&chunk)?.scope_place)
    }

    /// The whole contiguous data of a chain (None if not resident).
    pub fn chain_bytes(&self, chain: &Chain) -> Option<&[u8]> {
        Some(self.regions.get(&chain.region)?.resident()?.bytes())
    }

    pub fn chain_bytes_mut(&mut self, chain: &Chain) -> Option<&mut [u8]> {
        Some(
            self.regions
                .get_mut(&chain.region)?
                .resident_mut()?
                .bytes_mut(),
        )
    }

    /// Bytes from the home: the chunk's new content in every resident place.
    pub fn take_data(&mut self, chunk: ChunkId, data: &[u8]) {
        self.take_version(chunk, data, false)
    }

    /// A version the home pushed unasked (update-based MESI's updates, a
    /// learned set's pushes): as [`Store::take_data`], except that memory
    /// the caller owns (MAP'd, not a face's own chain) is left alone and
    /// its place invalid. Its bytes are the caller's until a scope opens
    /// there: a PUT publishes them (Figure 6), and a scope that reads copies
    /// the version in then. Written over, a PUT of memory the caller had
    /// just filled published the pusher's bytes.
    pub fn take_push(&mut self, chunk: ChunkId, data: &[u8]) {
        self.take_version(chunk, data, true)
    }

    fn take_version(&mut self, chunk: ChunkId, data: &[u8], pushed: bool) {
        let Some(c) = self.chunks.get_mut(&chunk) else {
            return;
        };
        let exposed = c.keeps_digest();
        let mut digested = None;
        for p in &mut c.places {
            p.valid = false;
            if let Some(mem) = self
                .regions
                .get_mut(&p.region)
                .filter(|r| !(pushed && r.mapped && !r.discardable))
                .and_then(|r| r.resident_mut())
            {
                let to = &mut mem.bytes_mut()[p.range.clone()];
                if exposed && digested.is_none() {
                    digested = Some(copy_and_digest(to, data));
                } else {
                    to.copy_from_slice(data);
                }
                p.valid = true;
            }
        }
        c.digest = match (exposed, digested) {
            (false, _) => None,
            (true, Some(d)) => Some(d),
            (true, None) => Some(digest(data)),
        };
    }

    /// Before a scope reads through instance `place` of `chunk`: if it does
    /// not hold the version the protocol state records, copy it from an
    /// instance that does. Returns false when none does (the version is
    /// then forgotten, so that the next request asks the home for data).
    pub fn make_valid(&mut self, chunk: ChunkId, place: usize) -> bool {
        self.make_valid_with(chunk, place, Exposed::Check)
    }

    /// [`Store::make_valid`], saying whether exposed places must be checked
    /// against the digest first: not when nothing outside SAT can have
    /// written them since they were last checked or filled (the caller has
    /// held the client's lock since), nor when the version they hold is
    /// about to be replaced anyway. Hashing a large version costs as much
    /// as copying it.
    pub fn make_valid_with(&mut self, chunk: ChunkId, place: usize, exposed: Exposed) -> bool {
        if exposed == Exposed::Check {
            self.check_exposed(chunk);
        }
        let Some(c) = self.chunks.get(&chunk) else {
            return false;
        };
        if c.side.version().is_none() {
            return false;
        }
        if c.places[place].valid {
            return true;
        }
        let Some(from) = c.places.iter().position(|p| p.valid) else {
            self.forget_version(chunk);
            return false;
        };
        self.copy_place(chunk, from, place);
        true
    }

    /// Exposed places whose bytes are no longer the version's (code
    /// outside SAT wrote them, in a READ scope or outside any scope) stop
    /// being valid: the next scope sees the version again, from another
    /// place or from the home.
    fn check_exposed(&mut self, chunk: ChunkId) {
        let Some(c) = self.chunks.get(&chunk) else {
            return;
        };
        let Some(want) = c.digest else {
            return;
        };
        let changed: Vec<usize> = c
            .places
            .iter()
            .enumerate()
            .filter(|(_, p)| p.valid && p.exposed)
            .filter(|(_, p)| {
                let mem = self.regions.get(&p.region).and_then(|r| r.resident());
                mem.is_some_and(|m| digest(&m.bytes()[p.range.clone()]) != want)
            })
            .map(|(i, _)| i)
            .collect();
        if changed.is_empty() {
            return;
        }
        tracing::debug!(
            "chunk {chunk}: local bytes written outside a write scope: dropped (Figure 5)"
        );
        let c = self.chunks.get_mut(&chunk).expect("known");
        for i in changed {
            c.places[i].valid = false;
        }
        if !c.places.iter().any(|p| p.valid) {
            self.forget_version(chunk);
        }
    }

    /// Copies instance `from` of `chunk` over instance `to` (both
    /// resident), which becomes valid.
    fn copy_place(&mut self, chunk: ChunkId, from: usize, to: usize) {
        let c = self.chunks.get_mut(&chunk).expect("known");
        let (src, dst) = (c.places[from].clone(), c.places[to].clone());
        c.places[to].valid = true;
        if dst.exposed && c.digest.is_none() && !c.in_host_slot {
            let mem = self.regions.get(&src.region).and_then(|r| r.resident());
            let c = self.chunks.get_mut(&chunk).expect("known");
            c.digest = mem.map(|m| digest(&m.bytes()[src.range.clone()]));
        }
        if src.region == dst.region {
            let mem = self
                .regions
                .get_mut(&src.region)
                .and_then(|r| r.resident_mut());
            mem.expect("resident")
                .bytes_mut()
                .copy_within(src.range, dst.range.start);
            return;
        }
        // Lend the source out of the map for the copy: two regions of one
        // map cannot be borrowed at once otherwise, and a copy through a
        // temporary buffer would cost an allocation.
        let from_mem = self
            .regions
            .get_mut(&src.region)
            .and_then(|r| r.mem.take())
            .expect("resident");
        let to_mem = self
            .regions
            .get_mut(&dst.region)
            .and_then(|r| r.resident_mut());
        to_mem.expect("resident").bytes_mut()[dst.range]
            .copy_from_slice(&from_mem.bytes()[src.range]);
        self.regions.get_mut(&src.region).expect("known").mem = Some(from_mem);
    }

    /// The local bytes of `chunk` are no version any more (a write scope
    /// ended without publishing, or no valid instance is left): every
    /// place is invalid and the protocol forgets the version, if it may.
    pub fn forget_version(&mut self, chunk: ChunkId) {
        if let Some(c) = self.chunks.get_mut(&chunk) {
            for p in &mut c.places {
                p.valid = false;
            }
            c.digest = None;
            c.side.evict();
        }
    }

    /// The local bytes of `chunk` do not hold the version the protocol
    /// state records (a PUT published the caller's bytes straight into the
    /// chunk's host slot): every place is invalid, so the next scope that
    /// reads finds none valid and asks for the data ([`Store::make_valid`]).
    /// The protocol keeps the version, which the home holds.
    pub fn drop_bytes(&mut self, chunk: ChunkId) {
        if let Some(c) = self.chunks.get_mut(&chunk) {
            for p in &mut c.places {
                p.valid = false;
            }
            c.digest = None;
        }
    }

    /// `chunk`'s home is gone, with everything it knew of this process's
    /// copy, scopes and requests (`client/failover.rs`): a chunk nobody here
    /// holds starts afresh at once; one in a scope or a request is marked
    /// orphaned, and starts afresh when its last holder lets go
    /// ([`Store::leave_orphan`]).
    pub fn orphan(&mut self, chunk: ChunkId, why: &str) {
        let Some(c) = self.chunks.get_mut(&chunk) else {
            return;
        };
        if c.holders.is_empty() && !c.side.in_scope() && !c.side.waiting() {
            self.afresh(chunk);
        } else {
            c.orphaned = Some(why.to_owned());
        }
    }

    /// A thread's scope or request on orphaned `chunk` ends here; the last
    /// one starts the chunk afresh.
    pub fn leave_orphan(&mut self, chunk: ChunkId, thread: std::thread::ThreadId) {
        let Some(c) = self.chunks.get_mut(&chunk) else {
            return;
        };
        c.remove_holder(thread);
        if c.holders.is_empty() {
            self.afresh(chunk);
        }
    }

    /// `chunk` as if just allocated here: no version, no scope, no request.
    fn afresh(&mut self, chunk: ChunkId) {
        if let Some(c) = self.chunks.get_mut(&chunk) {
            c.side = c.protocol.starting().consistency().new_client(c.size);
            c.orphaned = None;
            c.twin = None;
            c.asking = None;
            c.reask = None;
            c.asked_ahead = false;
            c.scope_stat = None;
        }
        self.forget_version(chunk);
    }

    /// Moves `chunk`'s slot handle out, for a call that needs the store and
    /// the slot at once: a clone would be two atomic operations on the
    /// segment's count, paid on every scope of a small hand-off. Nothing in
    /// the store looks at the handle meanwhile (`in_host_slot` says where
    /// the version is). Given back with [`Store::put_slot`].
    pub fn take_slot(&mut self, chunk: ChunkId) -> Option<SlotRef> {
        self.chunks.get_mut(&chunk).and_then(|c| c.host.take())
    }

    /// Gives back a handle [`Store::take_slot`] moved out.
    pub fn put_slot(&mut self, chunk: ChunkId, slot: SlotRef) {
        if let Some(c) = self.chunks.get_mut(&chunk) {
            c.host = Some(slot);
        }
    }

    /// The last scope of `chunk` here has ended. When its version is in a
    /// host slot, code outside SAT may write its exposed places from now
    /// on, and no digest is kept to tell ([`LocalChunk::keeps_digest`]):
    /// they stop being valid, and the next scope that reads takes the
    /// slot's bytes again (one copy, which costs what hashing them would).
    pub fn distrust_exposed(&mut self, chunk: ChunkId) {
        let Some(c) = self.chunks.get_mut(&chunk) else {
            return;
        };
        if !c.in_host_slot {
            return;
        }
        let mut distrusted = false;
        for p in c.places.iter_mut().filter(|p| p.exposed && p.valid) {
            p.valid = false;
            distrusted = true;
        }
        if distrusted && !c.places.iter().any(|p| p.valid) {
            self.forget_version(chunk);
        }
    }

    /// Copies instance `from` of `chunk` into its other resident instances
    /// (after a write scope, so every local instance shows the new version).
    pub fn spread(&mut self, chunk: ChunkId, from: usize) {
        let Some(c) = self.chunks.get_mut(&chunk) else {
            return;
        };
        c.places[from].valid = true;
        c.digest = None;
        if c.keeps_digest() {
            let src = c.places[from].clone();
            let mem = self.regions.get(&src.region).and_then(|r| r.resident());
            let d = mem.map(|m| digest(&m.bytes()[src.range]));
            self.chunks.get_mut(&chunk).expect("known").digest = d;
        }
        let c = self.chunks.get_mut(&chunk).expect("known");
        for to in 0..c.places.len() {
            if to == from {
                continue;
            }
            let c = self.chunks.get_mut(&chunk).expect("known");
            c.places[to].valid = false;
            let region = c.places[to].region;
            if self.is_resident(region) {
                self.copy_place(chunk, from, to);
            }
        }
    }

    /// Whether `chain` is in this store (a chain given back by FREE or
    /// UNMAP no longer is).
    pub fn holds(&self, chain: &Chain) -> bool {
        self.regions.contains_key(&chain.region)
    }

    /// Takes a MAP'd chain's memory back: the chain's places are removed
    /// (its chunks stay known through their other chains, if any). Refused
    /// while a chunk of the chain is in a scope or a request.
    pub fn unmap(&mut self, chain: &Chain) -> Result<Box<dyn LocalMemory>, String> {
        let Some(r) = self.regions.get(&chain.region) else {
            return Err("this chain is not (or no longer) in this process".into());
        };
        if !r.mapped {
            return Err(
                "this chain was allocated by SAT, not MAP'd: there is no memory to give back \
                 (FREE gives it back)"
                    .into(),
            );
        }
        self.free(chain)
            .map(|memory| memory.expect("MAP'd memory is always resident"))
    }

    /// Gives `chain` back in this process, MAP'd or not: its local bytes
    /// go (returned when they are in memory), its chunks stay known here,
    /// with the instances other chains hold. Refused while a chunk of the
    /// chain is inside a scope: nothing changes then.
    pub fn free(&mut self, chain: &Chain) -> Result<Option<Box<dyn LocalMemory>>, String> {
        if !self.regions.contains_key(&chain.region) {
            return Err("this chain is not (or no longer) in this process".into());
        }
        if !self.idle(chain.region) {
            // The scope may be another chain's over the same chunk, or a
            // request another thread waits for: say which to end.
            return Err(
                "a chunk of this chain is inside a scope, or a thread waits for one: \
                        release that scope first (RELEASE or ABORT of the chain that opened \
                        it, which may be another chain over the same chunks)"
                    .into(),
            );
        }
        let r = self.regions.remove(&chain.region).expect("checked");
        // Counted as `add_chain` and `make_resident` count: MAP'd memory
        // that cannot be discarded apart, the rest while it holds bytes.
        let resident = if r.mapped {
            r.discardable && !r.discarded
        } else {
            r.mem.is_some()
        };
        let pinned = r.mapped && !r.discardable;
        if pinned {
            self.mapped_chunks -= r.layout.len() as u64;
        } else if resident {
            self.resident_chunks -= r.layout.len() as u64;
            self.resident_bytes -= r.layout.total_size() as u64;
        }
        if !r.mapped && self.by_layout.get(&r.layout) == Some(&chain.region) {
            // A MALLOC of the same chain makes a new one.
            self.by_layout.remove(&r.layout);
        }
        for &(id, _) in r.layout.chunks() {
            if let Some(c) = self.chunks.get_mut(&id) {
                c.places.retain(|p| p.region != chain.region);
                c.scope_place = 0;
                if !c.places.iter().any(|p| p.valid) {
                    c.side.evict();
                }
            }
        }
        // Data already evicted had its `free` events then.
        if pinned || resident {
            self.record_freed(&r.layout);
        }
        Ok(r.mem)
    }

    /// Chunks whose data is in memory, and how many regions were evicted.
    pub fn footprint(&self) -> (u64, u64, u64) {
        (self.resident_chunks, self.resident_bytes, self.evictions)
    }

    /// For the statistics stream: the chunks known here, and the chunk
    /// instances whose data is in local memory (SAT's and MAP'd).
    pub fn stats_counts(&self) -> (usize, u64) {
        (self.chunks.len(), self.resident_chunks + self.mapped_chunks)
    }

    /// A `free` event for every chunk of a region whose data just left.
    fn record_freed(&self, layout: &ChainLayout) {
        if !crate::stats::on() {
            return;
        }
        let (chunks, footprint) = self.stats_counts();
        for &(id, size) in layout.chunks() {
            crate::stats::chunk_event(crate::stats::ChunkEvent::Free, id, size, chunks, footprint);
        }
    }

    fn over_capacity(&self) -> bool {
        match self.capacity {
            MemoryCapacity::Unlimited => false,
            MemoryCapacity::Chunks(n) => self.resident_chunks > n,
            MemoryCapacity::Bytes(n) => self.resident_bytes > n,
        }
    }

    /// Brings `region` into memory (zeroed, then filled from other local
    /// instances where they hold valid bytes), then evicts least recently
    /// used regions while over capacity.
    fn make_resident(&mut self, region: RegionId) {
        let r = self.regions.get_mut(&region).expect("known region");
        match (&r.mem, r.discarded) {
            (Some(_), false) => return,
            // The same memory, in place: it holds zeros until filled.
            (Some(_), true) => r.discarded = false,
            (None, _) => r.mem = Some(Box::new(vec![0u8; r.layout.total_size()])),
        }
        let layout = r.layout.clone();
        self.resident_chunks += layout.len() as u64;
        self.resident_bytes += layout.total_size() as u64;
        for &(id, _) in layout.chunks() {
            // The copy's source must hold the version: exposed places are
            // checked first, since code outside SAT may have written them
            // (a copy from one would make its bytes a trusted place's).
            self.check_exposed(id);
            let c = &self.chunks[&id];
            if c.side.version().is_none() {
                continue;
            }
            // Exposed places of a chunk in a host slot hold the version
            // only inside scopes ([`Store::distrust_exposed`]): outside
            // them, code outside SAT may write them before a scope comes.
            let exposed = |p: &Place| p.region == region && p.exposed;
            if c.in_host_slot && c.holders.is_empty() && c.places.iter().any(exposed) {
                continue;
            }
            // Start from the version held elsewhere, if an instance holds it.
            let to = c.places.iter().position(|p| p.region == region);
            let from = c.places.iter().position(|p| p.valid);
            if let (Some(from), Some(to)) = (from, to) {
                self.copy_place(id, from, to);
            }
        }
        self.clock += 1;
        self.regions.get_mut(&region).expect("known").last_use = self.clock;
        self.evict_while_over(region);
    }

    fn is_resident(&self, region: RegionId) -> bool {
        self.regions
            .get(&region)
            .is_some_and(|r| r.mem.is_some() && !r.discarded)
    }

    /// The places in `region` lose their bytes (it is evicted): a chunk
    /// valid nowhere else forgets its version.
    fn invalidate_chunks_of(&mut self, region: RegionId) {
        let layout = self.regions[&region].layout.clone();
        for &(id, _) in layout.chunks() {
            if let Some(c) = self.chunks.get_mut(&id) {
                for p in c.places.iter_mut().filter(|p| p.region == region) {
                    p.valid = false;
                }
                if !c.places.iter().any(|p| p.valid) {
                    c.side.evict();
                }
            }
        }
    }

    /// Whether every chunk of `region` is outside scopes and requests.
    fn idle(&self, region: RegionId) -> bool {
        self.regions[&region].layout.chunks().iter().all(|(id, _)| {
            let s = &self.chunks[id].side;
            !s.in_scope() && !s.waiting()
        })
    }

    fn evict_while_over(&mut self, keep: RegionId) {
        while self.over_capacity() {
            let victim = self
                .regions
                .iter()
                .filter(|(&id, r)| id != keep && (!r.mapped || r.discardable))
                .filter(|(&id, _)| self.is_resident(id) && self.idle(id))
                .min_by_key(|(_, r)| r.last_use)
                .map(|(&id, _)| id);
            let Some(victim) = victim else {
                tracing::debug!(
                    "memory capacity {:?} exceeded: every other region is in use",
                    self.capacity
                );
                return;
            };
            self.invalidate_chunks_of(victim);
            let r = self.regions.get_mut(&victim).expect("found");
            if r.discardable {
                // Lent memory stays where it is (C's chunk->data): only
                // its contents go.
                r.mem.as_mut().expect("lent memory").discard();
                r.discarded = true;
            } else {
                r.mem = None;
            }
            self.resident_chunks -= r.layout.len() as u64;
            self.resident_bytes -= r.layout.total_size() as u64;
            self.evictions += 1;
            tracing::debug!(
                "evicted the local data of chunk {} ({} chunks, LRU)",
                r.layout.chunks()[0].0,
                r.layout.len()
            );
            let layout = r.layout.clone();
            self.record_freed(&layout);
        }
    }
}

#[cfg(test)]
mod tests;
