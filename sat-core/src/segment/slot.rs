//! A slot of a host segment: a 128-byte header, then one version's bytes.
//!
//! The header's lock word is a readers-writer lock that processes share:
//!
//! | bits | meaning |
//! |---|---|
//! | 31 | a writer holds the slot |
//! | 30 | a writer waits: no new reader may enter |
//! | 0..30 | readers inside |
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

    /// Enters as a reader, waiting while a writer holds or waits for the slot.
    pub fn read(&self) -> ReadGuard<'_, 's> {
        let mut spins = 0;
        loop {
            let now = self.header.lock.load(SeqCst);
            if now & (WRITER | WRITER_WAITING) == 0 && now & READERS != READERS {
                if self
                    .header
                    .lock
                    .compare_exchange(now, now + 1, SeqCst, SeqCst)
                    .is_ok()
                {
                    return ReadGuard { slot: self };
                }
                continue;
            }
            self.pause(&mut spins, now);
        }
    }

    /// Enters as a reader if no writer holds or waits for the slot.
    pub fn try_read(&self) -> Option<ReadGuard<'_, 's>> {
        let now = self.header.lock.load(SeqCst);
        (now & (WRITER | WRITER_WAITING) == 0
            && now & READERS != READERS
            && self
                .header
                .lock
                .compare_exchange(now, now + 1, SeqCst, SeqCst)
                .is_ok())
        // Made only once the reader is in: a guard's drop lets a reader out.
        .then(|| ReadGuard { slot: self })
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
            let waiting = self.header.lock.fetch_or(WRITER_WAITING, SeqCst) | WRITER_WAITING;
            self.pause(&mut spins, waiting);
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

    /// Takes a read lock that outlives any guard, for a scope that holds it
    /// across calls, if no writer holds or waits for the slot. The holder
    /// ends it with [`Slot::unlock_read`].
    pub fn try_lock_read(&self) -> bool {
        self.try_read().map(std::mem::forget).is_some()
    }

    /// Ends a read lock taken by [`Slot::try_lock_read`].
    ///
    /// # Safety
    /// The caller holds such a read lock and gives it up here.
    pub unsafe fn unlock_read(&self) {
        drop(ReadGuard { slot: self });
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
        // SAFETY: the caller's lock keeps writers out (or is the writer's).
        unsafe { std::slice::from_raw_parts(self.data, self.size()) }
    }

    /// Copies `bytes` in as the slot's next version, for the holder of the
    /// write lock taken by [`Slot::try_lock_write`], and wakes the
    /// processes waiting for one; returns the new version. Refused when
    /// `bytes` is not the version's size.
    ///
    /// # Safety
    /// The caller holds the write lock.
    pub unsafe fn publish_held(&self, bytes: &[u8]) -> Result<u64, usize> {
        let size = self.size();
        if bytes.len() != size {
            return Err(size);
        }
        // SAFETY: the write lock makes the caller the only one to touch the
        // bytes; they lie inside the mapping.
        let data = unsafe { std::slice::from_raw_parts_mut(self.data, size) };
        data.copy_from_slice(bytes);
        Ok(WriteGuard { slot: self }.publish_keeping_lock())
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
        let bytes = unsafe { std::slice::from_raw_parts(self.data, self.size()) }.to_vec();
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
}

/// A read lock on a slot: its version and bytes stay as they are.
pub struct ReadGuard<'g, 's> {
    slot: &'g Slot<'s>,
}

impl ReadGuard<'_, '_> {
    pub fn version(&self) -> u64 {
        self.slot.header.version.load(SeqCst)
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: no writer holds the slot while this read lock is held, so
        // nothing writes these bytes; they lie inside the mapping.
        unsafe { std::slice::from_raw_parts(self.slot.data, self.slot.size()) }
    }
}

impl Drop for ReadGuard<'_, '_> {
    fn drop(&mut self) {
        let before = self.slot.header.lock.fetch_sub(1, SeqCst);
        if before & READERS == 1 && before & WRITER_WAITING != 0 {
            self.slot.wake();
        }
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
        unsafe { std::slice::from_raw_parts(self.slot.data, self.slot.size()) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: this guard is the slot's only holder, and `&mut self`
        // makes this the only reference to the bytes through it.
        unsafe { std::slice::from_raw_parts_mut(self.slot.data, self.slot.size()) }
    }

    /// Makes the bytes written the slot's next version, and wakes the
    /// processes waiting for one.
    pub fn publish(&mut self) -> u64 {
        self.publish_in_place()
    }

    /// [`WriteGuard::publish`], for a lock held beyond this guard: the
    /// guard is consumed without letting the lock go.
    fn publish_keeping_lock(self) -> u64 {
        let version = self.publish_in_place();
        std::mem::forget(self);
        version
    }

    fn publish_in_place(&self) -> u64 {
        let h = self.slot.header;
        let version = h.version.fetch_add(1, SeqCst) + 1;
        h.published.fetch_add(1, SeqCst);
        if h.watchers.load(SeqCst) > 0 {
            wait::wake_all(&h.published);
        }
        version
    }
}

impl Drop for WriteGuard<'_, '_> {
    fn drop(&mut self) {
        self.slot.header.owner.store(0, SeqCst);
        self.slot.header.lock.fetch_and(!WRITER, SeqCst);
        self.slot.wake();
    }
}
