//! The C ABI's entry points with random arguments: random chunk ids,
//! sizes, counts, lists, names and symbol values, NULL where a pointer is
//! taken, handles of chunks that exist and of ones that do not, in random
//! order, first before any attach, then attached to a running service.
//! Nothing may crash, no call may fail with `SAT_ERR_INTERNAL` (a panic
//! caught at the boundary), every failure has a message, and afterwards the
//! service still serves: the library and the servers survive any sequence
//! of calls a C program can make with valid memory.
//!
//! One test in this file: the library's state is per process.

mod common;

use std::ffi::{c_void, CStr, CString};
use std::process::Stdio;
use std::ptr;
use std::time::{Duration, Instant};

use sat::chunks::*;
use sat::run::*;
use sat::status::*;
use sat::sync::*;

/// splitmix64, seeded: a failure names its seed and call number.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Ids that often meet (few values), sometimes far out or reserved.
    fn id(&mut self) -> u64 {
        match self.below(10) {
            0 => self.next(),
            1 => u64::MAX - self.below(4),
            2 => 0xffff_ff00_0000_0000 + self.below(8),
            _ => 1000 + self.below(12),
        }
    }
    fn size(&mut self) -> usize {
        match self.below(8) {
            0 => 0,
            // Over any machine's memory (a chain up to it is legitimate).
            1 => 1 << (44 + self.below(16)),
            2 => usize::MAX - self.below(4) as usize,
            _ => 1 + self.below(70_000) as usize,
        }
    }
    fn count(&mut self) -> u32 {
        match self.below(6) {
            0 => 0,
            1 => u32::MAX,
            _ => 1 + self.below(4) as u32,
        }
    }
    /// A symbol name: NULL, empty, ordinary, long, or with bytes that are
    /// not UTF-8.
    fn name(&mut self) -> Option<CString> {
        let bytes: Vec<u8> = match self.below(6) {
            0 => return None,
            1 => Vec::new(),
            2 => vec![b'x'; 5000],
            3 => (0..1 + self.below(20))
                .map(|_| 1 + self.below(255) as u8)
                .collect(),
            _ => format!("sym{}", self.below(6)).into_bytes(),
        };
        Some(CString::new(bytes).expect("no NUL"))
    }
}

fn status_name(s: i32) -> String {
    // SAFETY: sat_status_string returns a static string for any value.
    unsafe { CStr::from_ptr(sat_status_string(s)) }
        .to_string_lossy()
        .into_owned()
}

/// The calls a C program can make with valid memory, each with random
/// arguments. Returns the status (0 or a negative `sat_status`) or, for
/// calls that return a handle, 0 or -1 (NULL).
struct Caller {
    rng: Rng,
    handles: Vec<*mut sat_chunk_t>,
    buffers: Vec<Vec<u8>>,
}

impl Caller {
    fn consistency(&mut self) -> *const sat_consistency_t {
        match self.rng.below(4) {
            0 => ptr::null(),
            1 => sat_home_only(),
            _ => sat_home_based_mesi(),
        }
    }

    fn handle(&mut self) -> *mut sat_chunk_t {
        if self.handles.is_empty() || self.rng.below(8) == 0 {
            ptr::null_mut()
        } else {
            self.handles[self.rng.below(self.handles.len() as u64) as usize]
        }
    }

    fn keep(&mut self, h: *mut sat_chunk_t) -> i32 {
        if h.is_null() {
            -1
        } else {
            self.handles.push(h);
            0
        }
    }

    /// One random call: (its name, its result).
    fn call(&mut self) -> (&'static str, i32) {
        match self.rng.below(16) {
            0 => {
                let c = self.consistency();
                let (id, size) = (self.rng.id(), self.rng.size());
                ("sat_malloc", self.keep(sat_malloc(c, id, size)))
            }
            1 => {
                let c = self.consistency();
                let n = self.rng.below(4) as usize;
                let mut ids: Vec<u64> = (0..n).map(|_| self.rng.id()).collect();
                let mut sizes: Vec<u64> = (0..n + self.rng.below(2) as usize)
                    .map(|_| self.rng.size() as u64)
                    .collect();
                let ids_list = sat_ulong_list_t {
                    items: ids.as_mut_ptr(),
                    len: ids.len(),
                };
                let sizes_list = sat_ulong_list_t {
                    items: sizes.as_mut_ptr(),
                    len: sizes.len(),
                };
                let sizes_ptr = if self.rng.below(6) == 0 {
                    ptr::null()
                } else {
                    &sizes_list as *const _
                };
                let h = sat_malloc_lst(c, &ids_list, sizes_ptr);
                ("sat_malloc_lst", self.keep(h))
            }
            2 => {
                let c = self.consistency();
                let (id, n) = (self.rng.id(), self.rng.count());
                ("sat_lookup", self.keep(sat_lookup(c, id, n)))
            }
            3 => {
                let c = self.consistency();
                let mut ids: Vec<u64> = (0..self.rng.below(4)).map(|_| self.rng.id()).collect();
                let list = sat_ulong_list_t {
                    items: ids.as_mut_ptr(),
                    len: ids.len(),
                };
                ("sat_lookup_lst", self.keep(sat_lookup_lst(c, &list)))
            }
            4 => {
                // MAP: memory the chunk then uses for as long as it lives,
                // so it is kept until the end of the test.
                let c = self.consistency();
                let size = 1 + self.rng.below(4096) as usize;
                let mut memory = vec![0u8; size];
                let data = memory.as_mut_ptr().cast::<c_void>();
                self.buffers.push(memory);
                let id = self.rng.id();
                ("sat_map", self.keep(sat_map(c, id, size, data)))
            }
            5 => {
                let h = self.handle();
                ("sat_read", sat_read(h) as i32)
            }
            6 => {
                let h = self.handle();
                ("sat_write", sat_write(h) as i32)
            }
            7 => {
                let h = self.handle();
                ("sat_readwrite", sat_readwrite(h) as i32)
            }
            8 => {
                let h = self.handle();
                ("sat_release", sat_release(h) as i32)
            }
            9 => {
                let h = self.handle();
                ("sat_abort", sat_abort(h) as i32)
            }
            10 => {
                let h = self.handle();
                ("sat_put", sat_put(h) as i32)
            }
            11 => {
                let h = self.handle();
                ("sat_get", sat_get(h) as i32)
            }
            12 => {
                let name = self.rng.name();
                let len = self.rng.below(300) as usize;
                let value: Vec<u8> = (0..len).map(|_| self.rng.next() as u8).collect();
                let data = if self.rng.below(8) == 0 {
                    ptr::null()
                } else {
                    value.as_ptr().cast::<c_void>()
                };
                let size = if data.is_null() { len } else { value.len() };
                let name_ptr = name.as_ref().map_or(ptr::null(), |n| n.as_ptr());
                // name is NULL or a C string; data is NULL or points at
                // `size` readable bytes.
                (
                    "sat_write_symbol",
                    sat_write_symbol(name_ptr, data, size) as i32,
                )
            }
            13 => {
                let name = self.rng.name();
                let name_ptr = name.as_ref().map_or(ptr::null(), |n| n.as_ptr());
                let mut data: *mut c_void = ptr::null_mut();
                let mut size = 0usize;
                // SAFETY: name is NULL or a C string; data and size are
                // writable variables.
                let s = unsafe { sat_read_symbol(name_ptr, &mut data, &mut size) } as i32;
                if s == 0 {
                    // SAFETY: a buffer from sat_read_symbol.
                    unsafe { sat_free(data) };
                }
                ("sat_read_symbol", s)
            }
            14 => ("sat_init_symbol_table", sat_init_symbol_table() as i32),
            _ => {
                let which = self.rng.below(5);
                match which {
                    0 => ("sat_rank", sat_rank().min(0)),
                    1 => ("sat_client_count", sat_client_count().min(0)),
                    2 => ("sat_server_count", sat_server_count().min(0)),
                    3 => {
                        let mut ran = 0u32;
                        let out = if self.rng.below(2) == 0 {
                            ptr::null_mut()
                        } else {
                            &mut ran as *mut u32
                        };
                        // SAFETY: NULL or a writable variable.
                        let s = unsafe { sat_run_handlers(out) } as i32;
                        ("sat_run_handlers", s)
                    }
                    _ => {
                        let id = self.rng.below(1000) as u32;
                        ("sat_signal_raise", sat_signal_raise(id) as i32)
                    }
                }
            }
        }
    }
}

/// Makes `calls` random calls and checks each failure: no internal error,
/// a message for every failure; returns how many succeeded.
fn random_calls(caller: &mut Caller, calls: u64, seed: u64) -> u64 {
    let mut ok = 0;
    for n in 0..calls {
        let (name, s) = caller.call();
        if s == 0 {
            ok += 1;
            continue;
        }
        assert_ne!(
            s,
            sat_status::SAT_ERR_INTERNAL as i32,
            "seed {seed}, call {n}: {name} failed inside the library: {}",
            last_error()
        );
        if s != -1 {
            assert!(
                (-12..0).contains(&s),
                "seed {seed}, call {n}: {name} returned {s}, not a sat_status"
            );
        }
        assert!(
            !last_error().is_empty(),
            "seed {seed}, call {n}: {name} failed ({}) with no message",
            status_name(s)
        );
    }
    ok
}

fn last_error() -> String {
    let e = sat_last_error();
    if e.is_null() {
        String::new()
    } else {
        // SAFETY: sat_last_error returns NULL or a C string valid until the
        // thread's next call.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// `satrun --serve` (tcp) for the attached part; stopped when dropped.
struct Service {
    child: std::process::Child,
    address: String,
    dir: std::path::PathBuf,
}

impl Service {
    fn start() -> Service {
        let satrun = common::profile_dir().join("satrun");
        assert!(
            satrun.exists(),
            "{} is missing: build it with cargo build -p sat-core --bin satrun",
            satrun.display()
        );
        let dir = std::env::temp_dir().join(format!("sat-random-calls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("address");
        let child = common::command(&satrun)
            .args([
                "--serve",
                "--servers",
                "2",
                "--slots",
                "4",
                "--provider",
                "tcp",
            ])
            .arg("--address-file")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start satrun --serve");
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut service = Service {
            child,
            address: String::new(),
            dir,
        };
        loop {
            if let Ok(a) = std::fs::read_to_string(&file) {
                service.address = a.trim().to_owned();
                return service;
            }
            assert!(
                service.child.try_wait().unwrap().is_none() && Instant::now() < deadline,
                "the service did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid and a signal touches no memory.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
        if !std::thread::panicking() {
            assert_eq!(status.code(), Some(0), "the service did not stop cleanly");
        }
    }
}

#[test]
fn random_calls_neither_crash_nor_corrupt() {
    // A LOOKUP of a chunk nobody allocated waits this long (seconds)
    // before it fails: most random ids are such chunks.
    std::env::set_var("SAT_LOOKUP_TIMEOUT", "0.01");
    let seed = 0x5a7_c0de;
    let mut caller = Caller {
        rng: Rng(seed),
        handles: Vec::new(),
        buffers: Vec::new(),
    };
    // Not attached: every call fails, with a message.
    let ok = random_calls(&mut caller, 20_000, seed);
    assert_eq!(ok, 0, "{ok} calls succeeded before any attach");

    let service = Service::start();
    let address = CString::new(service.address.clone()).unwrap();
    // SAFETY: a C string.
    assert_eq!(
        unsafe { sat_connect(address.as_ptr()) },
        sat_status::SAT_OK,
        "{}",
        last_error()
    );
    let ok = random_calls(&mut caller, 10_000, seed);
    assert!(
        ok > 1000,
        "only {ok} of 10000 calls succeeded attached: the test misses the library"
    );
    // Scopes the random calls left open are released at detach.
    assert_eq!(sat_detach(), sat_status::SAT_OK, "detach: {}", last_error());

    // The servers survived: a new session writes and reads a chain.
    // SAFETY: a C string.
    assert_eq!(
        unsafe { sat_connect(address.as_ptr()) },
        sat_status::SAT_OK,
        "{}",
        last_error()
    );
    let h = sat_malloc(sat_home_based_mesi(), 77, 8192);
    assert!(!h.is_null(), "{}", last_error());
    assert_eq!(sat_write(h), sat_status::SAT_OK, "{}", last_error());
    // SAFETY: a chunk handle of 8192 bytes, in a write scope.
    unsafe { ptr::write_bytes((*h).data.cast::<u8>(), 0x3c, 8192) };
    assert_eq!(sat_release(h), sat_status::SAT_OK, "{}", last_error());
    let again = sat_lookup(sat_home_based_mesi(), 77, 1);
    assert!(!again.is_null(), "{}", last_error());
    assert_eq!(sat_get(again), sat_status::SAT_OK, "{}", last_error());
    // SAFETY: as above, after GET.
    let bytes = unsafe { std::slice::from_raw_parts((*again).data.cast::<u8>(), 8192) };
    assert!(bytes.iter().all(|&b| b == 0x3c));
    assert_eq!(sat_detach(), sat_status::SAT_OK, "{}", last_error());
    drop(caller);
}
