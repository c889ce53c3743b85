//! Which ranks have begun to join the run, as satrun hears it.
//!
//! A run starts only once every rank has joined. A rank that exits with
//! status 0 without ever calling into SAT (`/bin/true` in an MPMD line, a
//! script that forgot to start the program) would otherwise leave the ranks
//! that did join waiting for it until the bootstrap times out, and they
//! would then blame the missing rank without saying it is gone. satrun
//! cannot tell such a rank from a program that never meant to use SAT (its
//! own tests run shell commands as ranks), but it can once it knows who
//! joins: a rank that exited without joining, before the run started,
//! while the seed joined, means the run cannot start, and satrun says so
//! at once.
//!
//! The ranks tell it through one pipe: satrun hands its write end to every
//! rank (`SAT_JOIN_FD=fd:device:inode`), and the bootstrap writes its rank
//! there, 4 bytes (a write of at most `PIPE_BUF` bytes is atomic, so
//! records never mix), then closes its copy. The seed (rank 0) keeps its
//! copy until every rank has reached the global barrier and writes
//! [`STARTED`] before it lets any of them go: a rank that exits after the
//! run started finds that record in the pipe, so that a rank whose SAT
//! process could not tell satrun (a wrapper that closes inherited
//! descriptors, as Python's `subprocess` does, or drops the variable) never
//! counts as gone before it joined. The pipe's device and inode guard
//! against a process that inherited the variable but not the descriptor,
//! whose number may then be another file: it writes nothing.
//!
//! A client keeps its copy (close-on-exec) for one more record: a C
//! program that calls `exit()` inside its role ends with status 0, and the
//! run then fails in the server that lost it, which satrun would name. The
//! library's exit handler writes [`LEFT_ROLE`] with its rank first, and
//! satrun names that rank instead (`launcher.rs`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The variable that hands the pipe to the ranks.
pub const JOIN_FD_VAR: &str = "SAT_JOIN_FD";

/// The seed's record once every rank reached the global barrier: the run
/// has started (no rank is numbered so).
pub const STARTED: u32 = u32::MAX;

/// Set in a record with a rank: that rank exited inside its role.
pub const LEFT_ROLE: u32 = 1 << 31;

/// The seed's copy of the pipe, kept from its announce to [`announce_started`].
static SEED_COPY: std::sync::Mutex<Option<OwnedFd>> = std::sync::Mutex::new(None);

/// A client's copy of the pipe (-1: none) and its rank, for
/// [`announce_leaving_role`]: atomics, as an exit handler may run while
/// another thread holds any lock.
static CLIENT_COPY: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);
static CLIENT_RANK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// satrun's side: the pipe, and the records read from it so far.
pub(super) struct JoinNotices {
    read: OwnedFd,
    write: Option<OwnedFd>,
    /// The pipe's device and inode.
    id: (u64, u64),
    /// Bytes of a record not yet whole (a read may end inside one).
    partial: Vec<u8>,
}

impl JoinNotices {
    /// A pipe whose ends are closed on exec (satrun clears the flag of the
    /// write end in each rank only) and never block: a rank's write must
    /// not wait on satrun, and satrun reads only what is there.
    pub(super) fn open() -> io::Result<JoinNotices> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 fills the two-element array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded: both descriptors are open and ours alone.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let id = pipe_id(write.as_raw_fd())?;
        Ok(JoinNotices {
            read,
            write: Some(write),
            id,
            partial: Vec::new(),
        })
    }

    /// The write end a rank inherits (`None` once every rank started).
    pub(super) fn write_fd(&self) -> Option<RawFd> {
        self.write.as_ref().map(|w| w.as_raw_fd())
    }

    /// The value of [`JOIN_FD_VAR`] for the ranks.
    pub(super) fn env_value(&self) -> Option<String> {
        self.write_fd()
            .map(|fd| format!("{fd}:{}:{}", self.id.0, self.id.1))
    }

    /// Closes satrun's own write end once every rank has its copy.
    pub(super) fn every_rank_started(&mut self) {
        self.write = None;
    }

    /// The records that arrived since the last call: ranks that join,
    /// [`STARTED`], and ranks with [`LEFT_ROLE`] set.
    pub(super) fn drain(&mut self) -> Vec<u32> {
        let mut buf = [0u8; 1024];
        loop {
            // SAFETY: `buf` is writable for its length; `read` is open.
            let n =
                unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                self.partial.extend_from_slice(&buf[..n as usize]);
                continue;
            }
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break; // 0: every writer closed; -1 EAGAIN: nothing more now
        }
        let whole = self.partial.len() / 4 * 4;
        let ranks = self.partial[..whole]
            .chunks_exact(4)
            .map(|r| u32::from_le_bytes([r[0], r[1], r[2], r[3]]))
            .collect();
        self.partial.drain(..whole);
        ranks
    }
}

/// The device and inode of pipe `fd`.
fn pipe_id(fd: RawFd) -> io::Result<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills the stat buffer it is given.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        return Err(io::Error::other("not a pipe"));
    }
    Ok((st.st_dev, st.st_ino))
}

/// The rank's side, called once by the bootstrap when the rank is known:
/// tells satrun this rank is joining. The seed keeps the inherited pipe for
/// [`announce_started`], the other ranks for [`announce_leaving_role`]
/// (only a client's exit handler writes there), each close-on-exec so that
/// the programs they start do not hold it. Does nothing outside satrun, or
/// where the variable names a descriptor that is not satrun's pipe. Best
/// effort: a rank that cannot tell satrun joins all the same.
pub(crate) fn announce_joining(rank: u32) {
    let Some(value) = std::env::var_os(JOIN_FD_VAR) else {
        return;
    };
    let Some(copy) = announce_through(&value, rank) else {
        return;
    };
    // SAFETY: fcntl on a descriptor this process owns.
    unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    if rank == 0 {
        *SEED_COPY.lock().unwrap_or_else(|p| p.into_inner()) = Some(copy);
    } else {
        use std::os::fd::IntoRawFd;
        use std::sync::atomic::Ordering;
        CLIENT_RANK.store(rank, Ordering::Relaxed);
        let old = CLIENT_COPY.swap(copy.into_raw_fd(), Ordering::Release);
        if old >= 0 {
            // SAFETY: a copy an earlier join of this process kept, ours.
            drop(unsafe { OwnedFd::from_raw_fd(old) });
        }
    }
}

/// A client's exit handler, when the process exits inside its role: tells
/// satrun so, which then names this rank rather than the server that lost
/// it. Does nothing where the client kept no copy of the pipe.
pub fn announce_leaving_role() {
    use std::sync::atomic::Ordering;
    let fd = CLIENT_COPY.load(Ordering::Acquire);
    if fd < 0 {
        return;
    }
    let record = (LEFT_ROLE | CLIENT_RANK.load(Ordering::Relaxed)).to_le_bytes();
    // SAFETY: `fd` stays open until the process exits (nothing closes it
    // after it is stored); `record` is readable for its length.
    let _ = unsafe { libc::write(fd, record.as_ptr().cast(), record.len()) };
}

/// The seed, once every rank reached the global barrier and before it lets
/// them go: tells satrun the run has started, and closes its copy.
pub(crate) fn announce_started() {
    let copy = SEED_COPY.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(fd) = copy {
        let _ = write_record(&fd, STARTED);
    }
}

/// [`announce_joining`] with the variable's value given: writes the record
/// and returns the descriptor.
fn announce_through(value: &std::ffi::OsStr, rank: u32) -> Option<OwnedFd> {
    let mut parts = value.to_str()?.splitn(3, ':');
    let fd = parts.next()?.parse::<RawFd>().ok()?;
    let id = (
        parts.next()?.parse::<u64>().ok()?,
        parts.next()?.parse::<u64>().ok()?,
    );
    if fd < 0 || pipe_id(fd).ok() != Some(id) {
        return None;
    }
    // SAFETY: `fd` is the pipe satrun handed down (its device and inode
    // matched), open in this process and owned by nothing else in it: the
    // bootstrap takes it once.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    write_record(&fd, rank).ok()?;
    Some(fd)
}

/// One record: atomic (4 bytes) and never blocking (the pipe is not).
fn write_record(fd: &OwnedFd, record: u32) -> io::Result<()> {
    let bytes = record.to_le_bytes();
    // SAFETY: `fd` is open; `bytes` is readable for its length.
    let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    if n == bytes.len() as isize {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_back_whole_and_in_order() {
        let mut joins = JoinNotices::open().unwrap();
        let fd = joins.write_fd().unwrap();
        let write = |bytes: &[u8]| {
            // SAFETY: `fd` is the open write end; `bytes` readable.
            let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
            assert_eq!(n, bytes.len() as isize);
        };
        assert!(joins.drain().is_empty());
        write(&7u32.to_le_bytes());
        write(&300u32.to_le_bytes()[..3]);
        assert_eq!(joins.drain(), vec![7]);
        write(&300u32.to_le_bytes()[3..]);
        assert_eq!(joins.drain(), vec![300]);
        joins.every_rank_started();
        assert!(joins.write_fd().is_none());
        assert!(joins.drain().is_empty());
    }

    /// A copy of the pipe's write end, as a rank inherits it.
    fn rank_copy(joins: &JoinNotices) -> RawFd {
        // SAFETY: dup of an open descriptor; the test closes or hands on the copy.
        let fd = unsafe { libc::dup(joins.write_fd().unwrap()) };
        assert!(fd >= 0);
        fd
    }

    fn value_of(joins: &JoinNotices, fd: RawFd) -> String {
        format!("{fd}:{}:{}", joins.id.0, joins.id.1)
    }

    /// A client keeps its copy after its record, for the one its exit
    /// handler may write.
    #[test]
    fn a_rank_writes_its_record_and_keeps_its_copy_for_its_exit() {
        let mut joins = JoinNotices::open().unwrap();
        let value = value_of(&joins, rank_copy(&joins));
        let kept = announce_through(value.as_ref(), 5).expect("kept");
        assert_eq!(joins.drain(), vec![5]);
        write_record(&kept, LEFT_ROLE | 5).unwrap();
        assert_eq!(joins.drain(), vec![LEFT_ROLE | 5]);
    }

    /// The seed keeps its copy, and says the run started only when asked:
    /// after its own record, never before.
    #[test]
    fn the_seed_keeps_its_copy_until_the_run_starts() {
        let mut joins = JoinNotices::open().unwrap();
        let value = value_of(&joins, rank_copy(&joins));
        let kept = announce_through(value.as_ref(), 0).expect("the seed keeps its copy");
        assert_eq!(joins.drain(), vec![0]);
        write_record(&kept, STARTED).unwrap();
        drop(kept);
        assert_eq!(joins.drain(), vec![STARTED]);
    }

    #[test]
    fn a_descriptor_that_is_not_the_pipe_is_left_alone() {
        let mut joins = JoinNotices::open().unwrap();
        let fd = rank_copy(&joins);
        let (dev, ino) = joins.id;
        for value in [
            format!("{fd}:{dev}:{}", ino + 1),
            format!("{fd}:{}:{ino}", dev + 1),
            format!("{fd}:{ino}"),
            format!("x:{dev}:{ino}"),
            format!("-1:{dev}:{ino}"),
        ] {
            assert!(announce_through(value.as_ref(), 9).is_none(), "{value}");
        }
        assert!(joins.drain().is_empty());
        // Not closed either: it still writes.
        // SAFETY: `fd` is still open; the record is readable.
        let n = unsafe { libc::write(fd, 3u32.to_le_bytes().as_ptr().cast(), 4) };
        assert_eq!(n, 4);
        assert_eq!(joins.drain(), vec![3]);
        // SAFETY: closes the test's own copy, once.
        unsafe { libc::close(fd) };
    }
}
