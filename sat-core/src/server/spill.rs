//! Out of core: a server whose topology entry gives it a memory capacity
//! (`<memory capacity="64MiB"/>`, or a number of chunks) keeps at most that
//! much of its chunks' versions in RAM; the least recently used of the
//! others wait in files of its own and come back, byte for byte, when a
//! message needs them (DDS's local disk, for a home).
//!
//! What may go out: the version of a chunk whose protocol sends no data
//! without a message coming first ([`HomeSide::can_spill`]: under MESI, no
//! request waits to be granted; a write scope may be open, its release
//! brings the bytes back). Forgetting a client that left then needs no
//! data, and every other use of the chunk goes through
//! [`ServerState::bring_in`] first, which reads the file back. Only the
//! bytes leave: the version number, the copyset and the subscribers stay.
//! A chunk in a host slot (shared memory the server cannot spill) is not
//! counted; a server with a capacity keeps its versions on the message path.
//!
//! The files live in a folder of the server's own (`SAT_SPILL_DIR`, else
//! the system's temporary folder), mode 0700, one file per chunk, mode 0600;
//! the folder goes when the server ends, and satrun removes it after a
//! server it started was stopped by a signal ([`remove_leftovers`]). A server
//! holds a shared `flock` on its folder while it runs; when satrun itself was
//! killed, with its servers, the next satrun removes the folders of this user
//! whose server no longer runs and that nobody holds ([`sweep_dead_folders`]).
//! A file that cannot be written
//! leaves the version in RAM (over the capacity, said in the log); one that
//! cannot be read back is an error the log names, and the message that
//! needed it is dropped.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ServerState;
use crate::topology::MemoryCapacity;

/// The versions a server keeps in RAM, and those it spilled.
#[derive(Debug)]
pub(crate) struct Spill {
    capacity: MemoryCapacity,
    /// Resident versions: chunk -> (last use, bytes).
    resident: HashMap<u64, (u64, usize)>,
    /// The same, by last use (least recent first).
    by_use: BTreeMap<u64, u64>,
    bytes: u64,
    clock: u64,
    /// Spilled versions: chunk -> bytes in its file.
    spilled: HashMap<u64, usize>,
    folder: Option<Folder>,
    /// Versions written out and read back, for the statistics and tests.
    pub written: u64,
    pub read: u64,
}

/// The server's folder of spilled versions, removed with it, and the
/// folder opened with a shared `flock` on it: while the server lives no
/// sweep takes the folder, even one whose pid means nothing (another pid
/// namespace that shares the folder).
#[derive(Debug)]
struct Folder(PathBuf, #[allow(dead_code)] Option<std::fs::File>);

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Spill {
    pub(crate) fn new(capacity: MemoryCapacity) -> Spill {
        Spill {
            capacity,
            resident: HashMap::new(),
            by_use: BTreeMap::new(),
            bytes: 0,
            clock: 0,
            spilled: HashMap::new(),
            folder: None,
            written: 0,
            read: 0,
        }
    }

    /// Whether this server bounds its versions at all.
    pub(crate) fn bounded(&self) -> bool {
        !matches!(self.capacity, MemoryCapacity::Unlimited)
    }

    fn over(&self) -> bool {
        match self.capacity {
            MemoryCapacity::Unlimited => false,
            MemoryCapacity::Chunks(n) => self.resident.len() as u64 > n,
            MemoryCapacity::Bytes(n) => self.bytes > n,
        }
    }

    /// `chunk`'s version of `size` bytes is in RAM and was just used.
    pub(crate) fn used(&mut self, chunk: u64, size: usize) {
        self.clock += 1;
        match self.resident.insert(chunk, (self.clock, size)) {
            Some((tick, old)) => {
                self.by_use.remove(&tick);
                self.bytes = self.bytes - old as u64 + size as u64;
            }
            None => self.bytes += size as u64,
        }
        self.by_use.insert(self.clock, chunk);
    }

    /// `chunk` is no longer homed here.
    pub(crate) fn forget(&mut self, chunk: u64) {
        if let Some((tick, size)) = self.resident.remove(&chunk) {
            self.by_use.remove(&tick);
            self.bytes -= size as u64;
        }
        if self.spilled.remove(&chunk).is_some() {
            if let Some(folder) = &self.folder {
                let _ = std::fs::remove_file(file_of(&folder.0, chunk));
            }
        }
    }

    /// The spilled bytes of `chunk`, read without bringing them in.
    pub(crate) fn peek(&self, chunk: u64) -> Option<Vec<u8>> {
        let folder = self.folder.as_ref()?;
        self.spilled.get(&chunk)?;
        std::fs::read(file_of(&folder.0, chunk)).ok()
    }

    /// The folder, made on first use.
    fn folder(&mut self, rank: u32) -> std::io::Result<&Path> {
        if self.folder.is_none() {
            let base = spill_base();
            let mut salt = [0u8; 8];
            getrandom::getrandom(&mut salt).map_err(|e| std::io::Error::other(e.to_string()))?;
            let path = base.join(format!(
                "sat-spill-{}-r{rank}-{:x}",
                std::process::id(),
                u64::from_le_bytes(salt)
            ));
            // SAT_SPILL_DIR is made if missing, as SAT_STATS is; the
            // server's own folder in it is private.
            std::fs::create_dir_all(&base)?;
            let mut builder = std::fs::DirBuilder::new();
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.recursive(false).create(&path)?;
            let claim = std::fs::File::open(&path)
                .and_then(|f| crate::os::flock(&f, libc::LOCK_SH | libc::LOCK_NB).map(|()| f));
            if let Err(e) = &claim {
                tracing::debug!("spill folder {} not claimed: {e}", path.display());
            }
            self.folder = Some(Folder(path, claim.ok()));
        }
        Ok(&self.folder.as_ref().expect("made").0)
    }

    /// Writes `data` as `chunk`'s file.
    fn write_out(&mut self, rank: u32, chunk: u64, data: &[u8]) -> std::io::Result<()> {
        let path = file_of(self.folder(rank)?, chunk);
        let mut file = std::fs::OpenOptions::new();
        file.write(true).create(true).truncate(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut file, 0o600);
        file.open(&path)?.write_all(data)?;
        Ok(())
    }

    /// Reads `chunk`'s file back (it must hold `size` bytes).
    fn read_in(&self, chunk: u64, size: usize) -> std::io::Result<Vec<u8>> {
        let folder = self
            .folder
            .as_ref()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no spill folder"))?;
        let bytes = std::fs::read(file_of(&folder.0, chunk))?;
        if bytes.len() != size {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} bytes where {size} were written", bytes.len()),
            ));
        }
        Ok(bytes)
    }
}

fn file_of(folder: &Path, chunk: u64) -> PathBuf {
    folder.join(format!("{chunk:016x}"))
}

/// Where servers make their spill folders.
fn spill_base() -> PathBuf {
    std::env::var_os("SAT_SPILL_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(std::env::temp_dir, PathBuf::from)
}

/// Removes the spill folders process `pid` left (it was killed before it
/// could); returns how many.
pub(crate) fn remove_leftovers(pid: u32) -> std::io::Result<usize> {
    let prefix = format!("sat-spill-{pid}-r");
    let mut removed = 0;
    let entries = match std::fs::read_dir(spill_base()) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_dir_all(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// A spill folder removed by [`sweep_dead_folders`]: its name and the pid of
/// the server that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweptFolder {
    pub name: String,
    pub pid: u32,
}

/// Removes, in the folder servers spill to, the spill folders of this user's
/// servers that no longer run and that no live process holds (a server holds
/// its own while it runs). Returns what it removed; a folder it cannot look
/// at is left alone.
pub fn sweep_dead_folders() -> std::io::Result<Vec<SweptFolder>> {
    sweep_dead_folders_in(&spill_base())
}

/// The pid in a spill folder's name, `sat-spill-<pid>-r<rank>-<salt>`.
fn folder_pid(name: &str) -> Option<u32> {
    let (pid, rest) = name.strip_prefix("sat-spill-")?.split_once('-')?;
    let (rank, salt) = rest.strip_prefix('r')?.split_once('-')?;
    let digits = |s: &str, radix: u32| !s.is_empty() && s.chars().all(|c| c.is_digit(radix));
    (digits(pid, 10) && digits(rank, 10) && digits(salt, 16))
        .then(|| pid.parse().ok())
        .flatten()
}

fn sweep_dead_folders_in(base: &Path) -> std::io::Result<Vec<SweptFolder>> {
    use std::os::unix::fs::MetadataExt;
    let entries = match std::fs::read_dir(base) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    // SAFETY: geteuid takes no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let mut swept = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Some(pid) = folder_pid(&name) else {
            continue;
        };
        if !crate::os::process_gone(pid) {
            continue;
        }
        let path = entry.path();
        // Not following a link: the folder itself, this user's.
        let ours = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == euid);
        if !ours {
            continue;
        }
        let Ok(folder) = std::fs::File::open(&path) else {
            continue;
        };
        if crate::os::flock(&folder, libc::LOCK_EX | libc::LOCK_NB).is_err() {
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {
                tracing::debug!(pid, folder = %name, "removed the spill folder of a server that no longer runs");
                swept.push(SweptFolder { name, pid });
            }
            Err(e) => tracing::debug!(folder = %name, "a dead server's spill folder stays: {e}"),
        }
    }
    Ok(swept)
}

impl ServerState<'_> {
    /// Makes sure `chunk`'s version is in RAM (reading its file back if it
    /// was spilled) and counts the use. False when it cannot be read back:
    /// the caller drops what needed it.
    pub(super) fn bring_in(&mut self, chunk: u64) -> bool {
        if !self.spill.bounded() {
            return true;
        }
        let Some(entry) = self.homes.get_mut(&chunk) else {
            return true;
        };
        if entry.slot.is_some() {
            return true;
        }
        if let Some(&size) = self.spill.spilled.get(&chunk) {
            let bytes = match self.spill.read_in(chunk, size) {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::error!(
                        "server {}: chunk {chunk}'s version cannot be read back from its spill \
                         file: {e}; the message that needed it is dropped",
                        self.rank
                    );
                    return false;
                }
            };
            let last = entry
                .side
                .last_release_mut()
                .expect("only protocols that give their last release out spill");
            last.data = bytes.into();
            self.spill.spilled.remove(&chunk);
            self.spill.read += 1;
        }
        let size = entry.side.data().len();
        self.spill.used(chunk, size);
        true
    }

    /// Spills the least recently used versions until the capacity holds,
    /// never `keep` (the chunk being worked on).
    pub(super) fn make_room(&mut self, keep: u64) {
        if !self.spill.over() {
            return;
        }
        let candidates: Vec<u64> = self.spill.by_use.values().copied().collect();
        for chunk in candidates {
            if !self.spill.over() {
                break;
            }
            if chunk == keep {
                continue;
            }
            let Some(entry) = self.homes.get_mut(&chunk) else {
                self.spill.forget(chunk);
                continue;
            };
            if !entry.side.can_spill() {
                continue;
            }
            let Some(last) = entry.side.last_release_mut() else {
                continue;
            };
            let data = std::mem::replace(&mut last.data, Arc::from(Vec::new()));
            if let Err(e) = self.spill.write_out(self.rank, chunk, &data) {
                tracing::warn!(
                    "server {}: chunk {chunk}'s version cannot be spilled ({e}): it stays in \
                     memory, over the server's capacity",
                    self.rank
                );
                last.data = data;
                return;
            }
            let (tick, size) = self.spill.resident.remove(&chunk).expect("resident");
            self.spill.by_use.remove(&tick);
            self.spill.bytes -= size as u64;
            self.spill.spilled.insert(chunk, size);
            self.spill.written += 1;
        }
    }

    /// The last released version of `chunk` and its bytes, from RAM or from
    /// its spill file (for the simulator's checks and `SAT_HOME_DUMP`).
    pub(super) fn current_of(&self, chunk: u64) -> Option<(u64, Arc<[u8]>)> {
        let entry = self.homes.get(&chunk)?;
        match self.spill.peek(chunk) {
            Some(bytes) => Some((entry.side.version(), bytes.into())),
            None => Some(entry.current()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_go_first_and_the_count_holds() {
        let mut s = Spill::new(MemoryCapacity::Bytes(100));
        s.used(1, 40);
        s.used(2, 40);
        assert!(!s.over());
        s.used(3, 40);
        assert!(s.over());
        assert_eq!(s.by_use.values().next(), Some(&1));
        s.used(1, 40);
        assert_eq!(s.by_use.values().next(), Some(&2));
        s.forget(2);
        assert!(!s.over() && s.bytes == 80);
        let mut c = Spill::new(MemoryCapacity::Chunks(1));
        c.used(5, 1 << 20);
        assert!(!c.over());
        c.used(6, 1);
        assert!(c.over());
    }

    #[test]
    fn a_file_comes_back_byte_for_byte_and_the_folder_goes_with_the_spill() {
        let mut s = Spill::new(MemoryCapacity::Bytes(1));
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + 3) as u8).collect();
        s.write_out(9, 42, &data).unwrap();
        s.spilled.insert(42, data.len());
        assert_eq!(s.read_in(42, data.len()).unwrap(), data);
        assert!(
            s.read_in(42, 5).is_err(),
            "a size that does not match is refused"
        );
        let folder = s.folder.as_ref().unwrap().0.clone();
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&folder), 0o700);
        assert_eq!(mode(&file_of(&folder, 42)), 0o600);
        drop(s);
        assert!(!folder.exists());
    }

    #[test]
    fn a_spill_folder_name_gives_its_pid() {
        assert_eq!(folder_pid("sat-spill-123-r0-ab12"), Some(123));
        for not in [
            "sat-spill-123-r0",
            "sat-spill-x-r0-ab",
            "sat-spill-123-0-ab",
            "sat-spill-123-r0-zz",
            "sat-stats.0",
        ] {
            assert_eq!(folder_pid(not), None, "{not:?}");
        }
    }

    /// A dead server's folder goes, with its files; one that a live process
    /// holds stays (a server of another pid namespace), and so does a live
    /// server's.
    #[test]
    fn the_sweep_takes_only_unheld_folders_of_dead_servers() {
        let base = std::env::temp_dir().join(format!("sat-spill-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        let dead = child.id();
        let names = [
            format!("sat-spill-{dead}-r0-1f"),
            format!("sat-spill-{dead}-r1-2f"),
            format!("sat-spill-{}-r2-3f", std::process::id()),
        ];
        for n in &names {
            std::fs::create_dir(base.join(n)).unwrap();
            std::fs::write(base.join(n).join("000000000000002a"), b"version").unwrap();
        }
        let held = std::fs::File::open(base.join(&names[1])).unwrap();
        crate::os::flock(&held, libc::LOCK_SH).unwrap();
        let swept = sweep_dead_folders_in(&base).unwrap();
        let left: Vec<bool> = names.iter().map(|n| base.join(n).exists()).collect();
        drop(held);
        let _ = std::fs::remove_dir_all(&base);
        assert_eq!(
            swept,
            [SweptFolder {
                name: names[0].clone(),
                pid: dead
            }]
        );
        assert_eq!(left, [false, true, true], "{names:?}");
    }

    /// A server's own folder is held while it lives: a sweep leaves it.
    #[test]
    fn a_servers_folder_is_held_while_it_lives() {
        let mut s = Spill::new(MemoryCapacity::Chunks(1));
        s.write_out(0, 1, b"one").unwrap();
        let folder = s.folder.as_ref().unwrap().0.clone();
        let other = std::fs::File::open(&folder).unwrap();
        let taken = crate::os::flock(&other, libc::LOCK_EX | libc::LOCK_NB);
        drop(s);
        assert!(taken.is_err(), "{} was not held", folder.display());
    }
}
