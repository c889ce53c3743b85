//! A slot of a host segment: a 128-byte header, then one version's bytes,
//! or two buffers that take versions in turn.
//!
//! The header's lock word is a readers-writer lock that processes share:
//!
//! | bits | meaning |
//! |---|---|
//! | 31 | a writer holds the slot |
//! | 30 | a writer waits: no new reader may enter |
//! | 0..30 | readers inside: a count, or one bit per reader |
//!
//! **Readers are counted or named** ([`Reader`]). In a run, a process that
//! dies ends the run, so readers are a count. A service outlives its
//! clients: each client reads under its own bit, so that when one dies
//! inside a read scope its home clears that bit ([`Slot::free_holder`]) and
//! writers go on. A writer is always named (`owner`).
//!
//! **Two buffers** (a slot whose capacity holds them, as a service's homes
//! allocate): version `v` lives in buffer `v % 2`, and a release copies its
//! bytes into the buffer of the next version before it moves the version on,
//! in one atomic store. A writer that dies half way through its copy leaves
//! the last version whole in the other buffer; its home frees the lock and
//! readers go on with that version. With one buffer a release copies in
//! place: a writer that dies while copying would leave bytes nobody wrote,
//! which is why only a run (that ends when a process dies) uses it.
//!
//! Every change to it is one atomic read-modify-write. A waiter spins a
//! little, then counts itself in `sleepers` and sleeps on the lock word
//! (`wait.rs`); whoever releases the lock wakes the sleepers when there are
//! any. The futex compares the lock word before sleeping, so a release that
//! lands between a waiter's look and its sleep makes the sleep return at
//! once: no wake-up is lost.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

use super::wait;

/// Slots start at multiples of this (a cache line: two slots' headers never
/// share one).
pub const SLOT_ALIGN: usize = 64;

const WRITER: u32 = 1 << 31;
const WRITER_WAITING: u32 = 1 << 30;
const READERS: u32 = WRITER_WAITING - 1;

/// How many readers a slot can tell apart: one bit each.
pub const READER_BITS: u32 = 30;

/// How a process holds read locks on slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// One of a count: a run's processes, which end together.
    Counted,
    /// Its own bit of the lock word (below [`READER_BITS`]): a service's
    /// clients, whose locks their home frees when they die.
    Bit(u32),
}

impl Reader {
    /// The reader with bit `index`, if a slot has one for it.
    pub fn bit(index: u32) -> Option<Reader> {
        (index < READER_BITS).then_some(Reader::Bit(index))
    }

    /// The lock word with this reader in, if it can enter now: no writer
    /// holds or waits for the slot, and the count has room (or the bit is
    /// free: a bit already set is another holder's, never ours).
    fn enter(self, now: u32) -> Option<u32> {
        if now & (WRITER | WRITER_WAITING) != 0 {
            return None;
        }
        match self {
            Reader::Counted => (now & READERS != READERS).then_some(now + 1),
            Reader::Bit(b) => (now & (1 << b) == 0).then_some(now | 1 << b),
        }
    }
}

/// Where the second buffer of a slot for `size` bytes starts: past the
/// first, aligned.
pub const fn spare_offset(size: usize) -> usize {
    size.div_ceil(SLOT_ALIGN) * SLOT_ALIGN
}

/// The capacity a slot with two buffers of `size` bytes needs.
pub const fn double_capacity(size: usize) -> usize {
    spare_offset(size) + size
}

/// How long a waiter spins before it sleeps. On two cores a holder that is
/// not running cannot let go while a waiter spins, so the spin is short.
const SPINS: u32 = 200;

/// The header of a slot, in shared memory.
#[repr(C, align(64))]
pub struct SlotHeader {
    lock: AtomicU32,
    /// Waiters asleep on `lock`: a release makes a system call only when
    /// there are some.
    sleepers: AtomicU32,
    /// The version the slot holds (0: never written).
    version: AtomicU64,
    /// The rank holding the write lock, plus one (0: none): what lets a
    /// server free a slot whose writer died.
    owner: AtomicU32,
    /// Bumped by every publication: what a process waiting for a newer
    /// version sleeps on ([`Slot::wait_newer`]).
    published: AtomicU32,
    /// The version's size in bytes (at most the slot's capacity).
    size: AtomicU64,
    /// Processes asleep on `published`.
    watchers: AtomicU32,
    /// Subscribers that want a release's bytes with its notification, as
    /// the home counts them: a releaser sends its bytes to the home only
    /// when there are some.
    data_subscribers: AtomicU32,
    /// Subscribers of any kind, as the home counts them: a release with
    /// none tells the home nothing.
    subscribers: AtomicU32,
    /// Processes with a request waiting for the lock, which poll for it
    /// (`client/host.rs`): whoever lets the lock go wakes them.
    lock_waiters: AtomicU32,
    /// The subscribers' ranks plus one (0: a free cell), as the home
    /// keeps them while there are at most [`DIRECT_SUBSCRIBERS`]: a
    /// releaser tells these processes itself ([`Slot::direct_subscribers`]).
    /// A subscriber keeps its cell while it stays subscribed.
    direct: [AtomicU32; DIRECT_SUBSCRIBERS],
    _pad: [u64; 6],
}

/// How many subscribers of a chunk a releaser on one host tells itself;
/// with more, or with one that wants data, the home tells them.
pub const DIRECT_SUBSCRIBERS: usize = 8;

const _: () = assert!(std::mem::size_of::<SlotHeader>() == 2 * SLOT_ALIGN);

/// A slot of a segment mapped in this process.
pub struct Slot<'s> {
    header: &'s SlotHeader,
    data: *mut u8,
    capacity: usize,
}

impl<'s> Slot<'s> {
    /// # Safety
    /// `at` must be aligned to [`SLOT_ALIGN`] and point at a header followed
    /// by `capacity` bytes, all inside one mapping that outlives `'s`.
    pub(super) unsafe fn at(at: *mut u8, capacity: usize) -> Slot<'s> {
        Slot {
            // SAFETY: as the caller promises; the header is all atomics, so
            // shared references to it are sound across threads and processes.
            header: unsafe { &*(at as *const SlotHeader) },
            // SAFETY: the data follows the header inside the mapping.
            data: unsafe { at.add(std::mem::size_of::<SlotHeader>()) },
            capacity,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Where the slot's bytes start (aligned to [`SLOT_ALIGN`]), for
    /// structures that live there instead of a version (`inbox.rs`).
    pub(super) fn data_ptr(&self) -> *mut u8 {
        self.data
    }

    /// The version the slot holds now, read without the lock: a hint (a
    /// writer may be about to move it), for deciding whether to ask.
    pub fn peek_version(&self) -> u64 {
        self.header.version.load(SeqCst)
    }

    /// Prepares a slot nobody uses for a chunk of `size` bytes: unlocked, at
    /// version 0, its bytes zero.
    pub fn init(&self, size: usize) {
        assert!(size <= self.capacity, "a slot holds at most its capacity");
        self.header.lock.store(0, SeqCst);
        self.header.sleepers.store(0, SeqCst);
        self.header.owner.store(0, SeqCst);
        self.header.published.store(0, SeqCst);
        self.header.watchers.store(0, SeqCst);
        self.header.data_subscribers.store(0, SeqCst);
        self.header.subscribers.store(0, SeqCst);
        for cell in &self.header.direct {
            cell.store(0, SeqCst);
        }
        self.header.version.store(0, SeqCst);
        self.header.size.store(size as u64, SeqCst);
        // SAFETY: the slot is not in use (the caller's promise, as the one
        // that allocates slots); data holds `capacity` bytes.
        unsafe { std::ptr::write_bytes(self.data, 0, self.capacity) };
    }

    /// Prepares a slot in memory never used before (a fresh segment's
    /// zeroes: unlocked, version 0, zero bytes) for a chunk of `size` bytes,
    /// without touching its data pages.
    pub fn init_fresh(&self, size: usize) {
        assert!(size <= self.capacity, "a slot holds at most its capacity");
        self.header.size.store(size as u64, SeqCst);
    }

    fn size(&self) -> usize {
        (self.header.size.load(SeqCst) as usize).min(self.capacity)
    }

    /// Where the bytes of `version` start, from the slot's data: buffer
    /// `version % 2` when the slot has two.
    fn buffer(&self, version: u64) -> usize {
        let size = self.size();
        let spare = spare_offset(size);
        if version % 2 == 1 && spare + size <= self.capacity {
            spare
        } else {
            0
        }
    }

    /// The bytes of `version` (those of the version the slot holds, for a
    /// holder of its lock).
    ///
    /// # Safety
    /// Nobody writes that buffer while the slice lives.
    unsafe fn bytes_of(&self, version: u64) -> &[u8] {
        // SAFETY: `buffer` keeps offset + size within the capacity, inside
        // the mapping; the caller's promise covers writers.
        unsafe { std::slice::from_raw_parts(self.data.add(self.buffer(version)), self.size()) }
    }

    /// Enters as a counted reader, waiting while a writer holds or waits
    /// for the slot.
    pub fn read(&self) -> ReadGuard<'_, 's> {
        let mut spins = 0;
        loop {
            let now = self.header.lock.load(SeqCst);
            if let Some(next) = Reader::Counted.enter(now) {
                if self
                    .header
                    .lock
                    .compare_exchange(now, next, SeqCst, SeqCst)
                    .is_ok()
                {
                    return ReadGuard {
                        slot: self,
                        reader: Reader::Counted,
                    };
                }
                continue;
            }
            self.pause(&mut spins, now);
        }
    }

    /// Enters as `reader` if no writer holds or waits for the slot.
    pub fn try_read(&self, reader: Reader) -> Option<ReadGuard<'_, 's>> {
        let now = self.header.lock.load(SeqCst);
        reader
            .enter(now)
            .filter(|&next| {
                self.header
                    .lock
                    .compare_exchange(now, next, SeqCst, SeqCst)
                    .is_ok()
            })
            // Made only once the reader is in: a guard's drop lets a reader out.
            .map(|_| ReadGuard { slot: self, reader })
    }

    /// Lets `reader` out.
    fn leave(&self, reader: Reader) {
        let before = match reader {
            Reader::Counted => self.header.lock.fetch_sub(1, SeqCst),
            Reader::Bit(b) => self.header.lock.fetch_and(!(1 << b), SeqCst),
        };
        let after = match reader {
            Reader::Counted => before - 1,
            Reader::Bit(b) => before & !(1 << b),
        };
        if after & READERS == 0 && before & WRITER_WAITING != 0 {
            self.wake();
        }
    }

    /// Enters as the writer for `rank`, waiting for readers and another
    /// writer to leave (new readers wait meanwhile).
    pub fn write(&self, rank: u32) -> WriteGuard<'_, 's> {
        let mut spins = 0;
        loop {
            let now = self.header.lock.load(SeqCst);
            if now & (WRITER | READERS) == 0 {
                // Taking it clears the waiting bit: other waiting writers
                // set it again when they look.
                if self
                    .header
                    .lock
                    .compare_exchange(now, WRITER, SeqCst, SeqCst)
                    .is_ok()
                {
                    self.header.owner.store(rank + 1, SeqCst);
                    return WriteGuard { slot: self };
                }
                continue;
            }
            let before = self.header.lock.fetch_or(WRITER_WAITING, SeqCst);
            if before & (WRITER | READERS) == 0 {
                // The holders left between the look and the mark: nobody
                // is left to wake a sleep on the mark alone (it would last
                // for ever, and keep new readers out too). Look again.
                continue;
            }
            self.pause(&mut spins, before | WRITER_WAITING);
        }
    }

    /// Spins, then sleeps while the lock word still reads `seen`.
    fn pause(&self, spins: &mut u32, seen: u32) {
        if *spins < SPINS {
            *spins += 1;
            std::hint::spin_loop();
            return;
        }
        self.header.sleepers.fetch_add(1, SeqCst);
        wait::wait(&self.header.lock, seen, None);
        self.header.sleepers.fetch_sub(1, SeqCst);
    }

    fn wake(&self) {
        if self.header.sleepers.load(SeqCst) > 0 {
            wait::wake_all(&self.header.lock);
        }
    }

    /// Takes a read lock as `reader` that outlives any guard, for a scope
    /// that holds it across calls, if no writer holds or waits for the
    /// slot. The holder ends it with [`Slot::unlock_read`].
    pub fn try_lock_read(&self, reader: Reader) -> bool {
        self.try_read(reader).map(std::mem::forget).is_some()
    }

    /// Ends a read lock taken by [`Slot::try_lock_read`].
    ///
    /// # Safety
    /// The caller holds such a read lock as `reader` and gives it up here.
    pub unsafe fn unlock_read(&self, reader: Reader) {
        self.leave(reader);
    }

    /// Takes the write lock for `rank` if nobody holds the slot, for a scope
    /// that holds it across calls (ended by [`Slot::unlock_write`]). When
    /// readers hold it, says that a writer waits, so that no new reader
    /// enters: the writer asks again until it gets it.
    pub fn try_lock_write(&self, rank: u32) -> bool {
        let now = self.header.lock.load(SeqCst);
        if now & (WRITER | READERS) == 0
            && self
                .header
                .lock
                .compare_exchange(now, WRITER, SeqCst, SeqCst)
                .is_ok()
        {
            self.header.owner.store(rank + 1, SeqCst);
            return true;
        }
        if now & WRITER == 0 {
            self.header.lock.fetch_or(WRITER_WAITING, SeqCst);
        }
        false
    }

    /// Ends a write lock taken by [`Slot::try_lock_write`], with or without
    /// a publication before it.
    ///
    /// # Safety
    /// The caller holds the write lock and gives it up here.
    pub unsafe fn unlock_write(&self) {
        drop(WriteGuard { slot: self });
    }

    /// The version's bytes, for a holder of a lock taken by
    /// [`Slot::try_lock_read`] or [`Slot::try_lock_write`].
    ///
    /// # Safety
    /// The caller holds a lock on the slot for as long as it uses the
    /// bytes, and holds no mutable view of them.
    pub unsafe fn held_bytes(&self) -> &[u8] {
        // SAFETY: the caller's lock keeps writers out (or is the writer's,
        // which writes only the other buffer, or only in a release).
        unsafe { self.bytes_of(self.peek_version()) }
    }

    /// The bytes of `version` where they are, for a reader that holds the
    /// read lock (and knows the version it holds).
    ///
    /// # Safety
    /// Nobody writes that buffer while the slice is used: the caller holds
    /// a read lock, or takes the risk of reading a later version.
    pub unsafe fn version_bytes(&self, version: u64) -> &'s [u8] {
        // SAFETY: `buffer` keeps offset + size within the capacity, inside
        // the mapping, which lives for 's; the caller's promise covers
        // writers.
        unsafe { std::slice::from_raw_parts(self.data.add(self.buffer(version)), self.size()) }
    }

    /// Copies `bytes` in as the slot's next version, for the holder of the
    /// write lock taken by [`Slot::try_lock_write`], and wakes the
    /// processes waiting for one; returns the new version. Refused when
    /// `bytes` is not the version's size.
    ///
    /// # Safety
    /// The caller holds the write lock.
    pub unsafe fn publish_held(&self, bytes: &[u8]) -> Result<u64, usize> {
        WriteGuard { slot: self }.publish_keeping_lock(bytes)
    }

    /// Copies `bytes` into the next version's buffer and leaves the version
    /// and the lock as they are: a chain's release, staged for the home to
    /// commit ([`Slot::commit_staged`], `server/bracket.rs`). Returns the
    /// version staged, or None for a slot with one buffer (staging would
    /// overwrite the version readers may need: publish instead).
    ///
    /// # Safety
    /// This process holds the write lock.
    pub unsafe fn stage_held(&self, bytes: &[u8]) -> Result<Option<u64>, usize> {
        let size = self.size();
        if bytes.len() != size {
            return Err(size);
        }
        if spare_offset(size) + size > self.capacity {
            return Ok(None);
        }
        let next = self.header.version.load(SeqCst) + 1;
        // SAFETY: the write lock (the caller's promise) makes this process
        // the only one to touch the next buffer; `buffer` keeps it inside
        // the mapping.
        let into =
            unsafe { std::slice::from_raw_parts_mut(self.data.add(self.buffer(next)), size) };
        into.copy_from_slice(bytes);
        Ok(Some(next))
    }

    /// A copy of `version`'s bytes, read without the lock, when the slot
    /// holds two buffers and still holds `version` once they are copied: a
    /// writer writes the buffer of the version after the next only once the
    /// next one is out, so the copy is whole. None otherwise (a newer version
    /// is out, or one buffer).
    pub fn read_settled(&self, version: u64) -> Option<Vec<u8>> {
        let size = self.size();
        if spare_offset(size) + size > self.capacity || self.header.version.load(SeqCst) != version
        {
            return None;
        }
        // SAFETY: nobody writes `version`'s buffer before `version + 1` is
        // published, which the check below sees; what was read before is
        // then discarded.
        let bytes = unsafe { self.bytes_of(version) }.to_vec();
        (self.header.version.load(SeqCst) == version).then_some(bytes)
    }

    /// The home's side of a staged release: when process `owner` holds the
    /// write lock and `version` is the next one, the staged bytes become the
    /// slot's version, the lock goes and its waiters wake. Returns a copy of
    /// the bytes when `with_bytes` (taken before the lock goes), or None
    /// when the slot is not in that state.
    pub fn commit_staged(&self, owner: u32, version: u64, with_bytes: bool) -> Option<Vec<u8>> {
        let h = self.header;
        if h.owner.load(SeqCst) != owner + 1 || h.version.load(SeqCst) + 1 != version {
            return None;
        }
        h.version.store(version, SeqCst);
        h.published.fetch_add(1, SeqCst);
        if h.watchers.load(SeqCst) > 0 {
            wait::wake_all(&h.published);
        }
        let bytes = if with_bytes {
            // SAFETY: the write lock is still held: nobody writes the bytes.
            unsafe { self.bytes_of(version) }.to_vec()
        } else {
            Vec::new()
        };
        self.release_if_owner(owner);
        Some(bytes)
    }

    /// The version and a copy of its bytes, read without the lock.
    ///
    /// # Safety
    /// No release into the slot is under way (after the run, or between
    /// the simulator's steps, where a release is never half done): a writer
    /// inside its scope is fine, since a scope writes the slot only as it
    /// releases.
    pub unsafe fn snapshot(&self) -> (u64, Vec<u8>) {
        let version = self.header.version.load(SeqCst);
        // SAFETY: the caller's promise: nobody writes the bytes meanwhile.
        let bytes = unsafe { self.bytes_of(version) }.to_vec();
        (version, bytes)
    }

    /// The slot's first 8 bytes as one word that processes change with
    /// atomic operations (a slot used as a synchronization object, not a
    /// version: `barrier.rs`).
    pub fn word(&self) -> &std::sync::atomic::AtomicU64 {
        assert!(self.capacity >= 8, "a word needs 8 bytes");
        // SAFETY: the data starts 64 bytes after an aligned header, so it is
        // aligned for a u64, and the capacity checked above covers it; it is
        // only ever accessed atomically.
        unsafe { &*(self.data as *const std::sync::atomic::AtomicU64) }
    }

    /// A process starts or stops waiting for the lock (see
    /// [`Slot::lock_waiters`]).
    pub fn lock_waiter(&self, waiting: bool) {
        if waiting {
            self.header.lock_waiters.fetch_add(1, SeqCst);
        } else {
            self.header.lock_waiters.fetch_sub(1, SeqCst);
        }
    }

    /// Processes waiting for the lock.
    pub fn lock_waiters(&self) -> u32 {
        self.header.lock_waiters.load(SeqCst)
    }

    /// The publication counter (what [`Slot::announce`] moves on).
    pub fn announced(&self) -> u32 {
        self.header.published.load(SeqCst)
    }

    /// Sleeps until the publication counter moves past `seen` or `timeout`
    /// passes (a doorbell's wait: `transport/doorbell.rs`).
    pub fn wait_announcement(&self, seen: u32, timeout: std::time::Duration) {
        let h = self.header;
        h.watchers.fetch_add(1, SeqCst);
        if h.published.load(SeqCst) == seen {
            wait::wait(&h.published, seen, Some(timeout));
        }
        h.watchers.fetch_sub(1, SeqCst);
    }

    /// Bumps the publication counter and wakes its watchers (after a
    /// change to [`Slot::word`] that ends a wait).
    pub fn announce(&self) {
        let h = self.header;
        h.published.fetch_add(1, SeqCst);
        if h.watchers.load(SeqCst) > 0 {
            wait::wake_all(&h.published);
        }
    }

    /// The home's subscribers of the chunk, as it set them: (all, those
    /// that want data).
    pub fn subscribers(&self) -> (u32, u32) {
        (
            self.header.subscribers.load(SeqCst),
            self.header.data_subscribers.load(SeqCst),
        )
    }

    /// The home records its subscribers: their ranks, and how many of them
    /// want data. Set before the home answers a SUBSCRIBE, and read by a
    /// releaser after it has published: a release that reads no subscriber
    /// was published before any SUBSCRIBE returned, so it was promised to
    /// nobody.
    ///
    /// The cells change in place, so that a releaser reading them while
    /// they change still finds every subscriber that stays: one that
    /// leaves frees its cell, one that comes takes a free cell, and the
    /// cells are written before the counts. While there are more
    /// subscribers than cells, the cells are not kept (releasers then tell
    /// the home) and are rebuilt, in place, when the count falls back.
    /// Only the home writes them.
    pub fn set_subscribers(&self, ranks: &[u32], with_data: u32) {
        let h = self.header;
        if ranks.len() <= DIRECT_SUBSCRIBERS {
            for cell in &h.direct {
                let held = cell.load(SeqCst);
                if held != 0 && !ranks.contains(&(held - 1)) {
                    cell.store(0, SeqCst);
                }
            }
            for &rank in ranks {
                let tag = rank + 1;
                if h.direct.iter().any(|c| c.load(SeqCst) == tag) {
                    continue;
                }
                if let Some(free) = h.direct.iter().find(|c| c.load(SeqCst) == 0) {
                    free.store(tag, SeqCst);
                }
            }
        }
        h.data_subscribers.store(with_data, SeqCst);
        h.subscribers.store(ranks.len() as u32, SeqCst);
    }

    /// The subscribers a releaser tells itself, into `ranks`: true when
    /// there are some and none wants data and they fit the cells; false
    /// when the home must tell them (or there is nobody to tell:
    /// [`Slot::subscribers`] says which).
    pub fn direct_subscribers(&self, ranks: &mut Vec<u32>) -> bool {
        ranks.clear();
        let (all, with_data) = self.subscribers();
        if all == 0 || with_data > 0 || all as usize > DIRECT_SUBSCRIBERS {
            return false;
        }
        ranks.extend(
            self.header
                .direct
                .iter()
                .map(|c| c.load(SeqCst))
                .filter(|&t| t != 0)
                .map(|t| t - 1),
        );
        true
    }

    /// Waits until the slot holds a version newer than `than`, at most
    /// `timeout` (None: no limit); returns the version it holds then. Spins
    /// briefly, then sleeps until a publication wakes it.
    pub fn wait_newer(&self, than: u64, timeout: Option<std::time::Duration>) -> u64 {
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        let mut spins = 0;
        loop {
            let seen = self.header.published.load(SeqCst);
            let version = self.header.version.load(SeqCst);
            if version > than {
                return version;
            }
            let left = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return version,
                },
            };
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            self.header.watchers.fetch_add(1, SeqCst);
            wait::wait(&self.header.published, seen, left);
            self.header.watchers.fetch_sub(1, SeqCst);
        }
    }

    /// Frees the write lock held by `rank` (a process that died inside a
    /// write scope): the version is left as it was. Returns whether it held
    /// it.
    pub fn release_if_owner(&self, rank: u32) -> bool {
        if self
            .header
            .owner
            .compare_exchange(rank + 1, 0, SeqCst, SeqCst)
            .is_err()
        {
            return false;
        }
        self.header.lock.fetch_and(!WRITER, SeqCst);
        self.wake();
        true
    }

    /// Frees every lock a process that is gone held on the slot: the write
    /// lock if `rank` held it (a release it had not finished copying is
    /// not published: its version stays the last whole one, in the other
    /// buffer), and its read lock as `reader`. A writer that was waiting
    /// may have been the dead one: the waiting mark goes, and live waiting
    /// writers set it again when they next ask. Wakes the processes waiting
    /// for the lock. Returns whether the process held a lock.
    pub fn free_holder(&self, rank: u32, reader: Reader) -> bool {
        let wrote = self.release_if_owner(rank);
        let read = match reader {
            Reader::Bit(b) => self.header.lock.fetch_and(!(1 << b), SeqCst) & (1 << b) != 0,
            // A count does not say whose: a run ends instead.
            Reader::Counted => false,
        };
        self.header.lock.fetch_and(!WRITER_WAITING, SeqCst);
        self.wake();
        self.announce();
        wrote || read
    }
}

/// A read lock on a slot: its version and bytes stay as they are.
pub struct ReadGuard<'g, 's> {
    slot: &'g Slot<'s>,
    reader: Reader,
}

impl ReadGuard<'_, '_> {
    pub fn version(&self) -> u64 {
        self.slot.header.version.load(SeqCst)
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: no writer holds the slot while this read lock is held, so
        // nothing writes these bytes.
        unsafe { self.slot.bytes_of(self.version()) }
    }
}

impl Drop for ReadGuard<'_, '_> {
    fn drop(&mut self) {
        self.slot.leave(self.reader);
    }
}

/// The write lock on a slot.
pub struct WriteGuard<'g, 's> {
    slot: &'g Slot<'s>,
}

impl WriteGuard<'_, '_> {
    pub fn version(&self) -> u64 {
        self.slot.header.version.load(SeqCst)
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: this guard is the slot's only holder.
        unsafe { self.slot.bytes_of(self.version()) }
    }

    /// Copies `bytes` in as the slot's next version, and wakes the
    /// processes waiting for one; returns the new version. Refused (with
    /// the slot's size) when `bytes` is not the version's size.
    pub fn publish(&mut self, bytes: &[u8]) -> Result<u64, usize> {
        self.copy_and_move_on(bytes)
    }

    /// [`WriteGuard::publish`], for a lock held beyond this guard: the
    /// guard is consumed without letting the lock go.
    fn publish_keeping_lock(self, bytes: &[u8]) -> Result<u64, usize> {
        let published = self.copy_and_move_on(bytes);
        std::mem::forget(self);
        published
    }

    /// The copy into the next version's buffer, then the version moved on
    /// in one store: until then readers (after a writer's death) find the
    /// last version whole, when the slot has two buffers.
    fn copy_and_move_on(&self, bytes: &[u8]) -> Result<u64, usize> {
        let s = self.slot;
        let size = s.size();
        if bytes.len() != size {
            return Err(size);
        }
        let h = s.header;
        let next = h.version.load(SeqCst) + 1;
        // SAFETY: the write lock makes this guard the only one to touch the
        // bytes; `buffer` keeps them inside the mapping.
        let into = unsafe { std::slice::from_raw_parts_mut(s.data.add(s.buffer(next)), size) };
        into.copy_from_slice(bytes);
        h.version.store(next, SeqCst);
        h.published.fetch_add(1, SeqCst);
        if h.watchers.load(SeqCst) > 0 {
            wait::wake_all(&h.published);
        }
        Ok(next)
    }
}

impl Drop for WriteGuard<'_, '_> {
    fn drop(&mut self) {
        self.slot.header.owner.store(0, SeqCst);
        self.slot.header.lock.fetch_and(!WRITER, SeqCst);
        self.slot.wake();
    }
}
