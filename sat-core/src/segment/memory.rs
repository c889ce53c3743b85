//! The memory of a host segment: a `memfd` mapped `MAP_SHARED` (the server
//! creates it; clients on its host map the same file through
//! `/proc/<pid>/fd/<fd>`), or zeroed process memory for tests and the
//! simulator. A `memfd` has no name in `/dev/shm`: it vanishes with the last
//! process that maps it, so a crash leaves nothing behind.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use super::slot::{Slot, SlotHeader, SLOT_ALIGN};

/// Why a segment or a slot could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error("host segment: {call} failed: {source}")]
    System {
        call: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "host segment: a slot at offset {offset} of {capacity} bytes does not fit a segment of \
         {len} bytes aligned to {SLOT_ALIGN}"
    )]
    OutOfBounds {
        offset: usize,
        capacity: usize,
        len: usize,
    },
    #[error(
        "host segment: process {pid}'s segment lives in its own memory and cannot be mapped \
         from another process"
    )]
    NotShared { pid: u32 },
}

fn last_os_error(call: &'static str) -> SegmentError {
    SegmentError::System {
        call,
        source: std::io::Error::last_os_error(),
    }
}

enum Backing {
    /// A memfd mapped shared; the fd is kept so that other processes of the
    /// host can open it.
    Shared(OwnedFd),
    /// Process memory, for tests and the simulator.
    Private(std::alloc::Layout),
}

/// A host segment's memory, mapped in this process.
pub struct Segment {
    base: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: the segment is memory shared between threads and processes by
// design; every access to it goes through a slot's atomics and its lock
// discipline (`slot.rs`), never through unsynchronised references.
unsafe impl Send for Segment {}
// SAFETY: as for Send.
unsafe impl Sync for Segment {}

impl Segment {
    /// A new segment of `len` bytes (rounded up to a page), zeroed, that
    /// other processes of this host may map with [`Segment::open`]. The
    /// memory is sparse: pages cost nothing until first written.
    pub fn create(name: &str, len: usize) -> Result<Segment, SegmentError> {
        let cname = CString::new(name).unwrap_or_else(|_| CString::new("sat-segment").unwrap());
        // SAFETY: cname is a valid C string; memfd_create reads it only.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(last_os_error("memfd_create"));
        }
        // SAFETY: fd was just returned by memfd_create and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let len = round_to_page(len);
        // SAFETY: fd is an open memfd; ftruncate only sets its size.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(last_os_error("ftruncate"));
        }
        let base = map_shared(fd.as_raw_fd(), len)?;
        Ok(Segment {
            base,
            len,
            backing: Backing::Shared(fd),
        })
    }

    /// Maps the segment that process `pid` created as its descriptor `fd`
    /// (both as that process reports them: [`Segment::fd`]).
    pub fn open(pid: u32, fd: RawFd, len: usize) -> Result<Segment, SegmentError> {
        let path = CString::new(format!("/proc/{pid}/fd/{fd}")).expect("no NUL");
        // SAFETY: path is a valid C string.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(last_os_error("open /proc/<pid>/fd"));
        }
        // SAFETY: raw was just returned by open and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = round_to_page(len);
        // A mapping past the file's end would fault (SIGBUS) when touched.
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fd is open; st receives one stat structure.
        if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
            return Err(last_os_error("fstat"));
        }
        // SAFETY: fstat succeeded and filled st.
        let file_len = unsafe { st.assume_init() }.st_size.max(0) as usize;
        if file_len < len {
            return Err(SegmentError::OutOfBounds {
                offset: 0,
                capacity: len,
                len: file_len,
            });
        }
        let base = map_shared(fd.as_raw_fd(), len)?;
        Ok(Segment {
            base,
            len,
            backing: Backing::Shared(fd),
        })
    }

    /// A segment in this process's memory only (tests, the simulator).
    pub fn in_process(len: usize) -> Segment {
        let len = round_to_page(len);
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("a valid layout");
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Segment {
            base,
            len,
            backing: Backing::Private(layout),
        }
    }

    /// The descriptor other processes open it by (None for process memory).
    pub fn fd(&self) -> Option<RawFd> {
        match &self.backing {
            Backing::Shared(fd) => Some(fd.as_raw_fd()),
            Backing::Private(_) => None,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot at `offset` whose version holds up to `capacity` bytes:
    /// refused unless it lies wholly inside the segment at an aligned
    /// offset (offsets come from the wire and are never trusted).
    pub fn slot(&self, offset: usize, capacity: usize) -> Result<Slot<'_>, SegmentError> {
        let fits = offset.is_multiple_of(SLOT_ALIGN)
            && std::mem::size_of::<SlotHeader>()
                .checked_add(capacity)
                .and_then(|n| n.checked_add(offset))
                .is_some_and(|end| end <= self.len);
        if !fits {
            return Err(SegmentError::OutOfBounds {
                offset,
                capacity,
                len: self.len,
            });
        }
        // SAFETY: offset + header + capacity lies inside the mapping (checked
        // above), and offset is aligned for the header.
        Ok(unsafe { Slot::at(self.base.as_ptr().add(offset), capacity) })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        match &self.backing {
            // SAFETY: base and len are the mapping made at construction;
            // slots borrow the segment, so none outlives it.
            Backing::Shared(_) => unsafe {
                libc::munmap(self.base.as_ptr().cast(), self.len);
            },
            // SAFETY: base was allocated with this layout.
            Backing::Private(layout) => unsafe { std::alloc::dealloc(self.base.as_ptr(), *layout) },
        }
    }
}

fn round_to_page(len: usize) -> usize {
    len.max(1).div_ceil(4096) * 4096
}

fn map_shared(fd: RawFd, len: usize) -> Result<NonNull<u8>, SegmentError> {
    // SAFETY: a fresh shared mapping of an open file of at least `len` bytes
    // (ftruncate'd by its creator); the kernel picks the address.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(last_os_error("mmap"));
    }
    Ok(NonNull::new(ptr.cast()).expect("mmap does not return NULL on success"))
}
