//! Synchronization (section 2.4), symbols (Figure 7), publish-subscribe
//! (section 2.5) and topology queries, for C.

use std::ffi::{c_char, c_void, CStr};

use sat_core::client::{Client, Event};

use crate::chunks::{chain_of, sat_chunk_t};
use crate::run::client;
use crate::status::{bad_argument, boundary, fail, sat_status};

fn call(name: &str, f: impl FnOnce(&Client) -> sat_core::SatResult<()>) -> sat_status {
    boundary(name, || match client() {
        Ok(c) => match f(&c) {
            Ok(()) => sat_status::SAT_OK,
            Err(e) => fail(&e),
        },
        Err(s) => s,
    })
}

/// Waits for a wakeup of rendezvous `id` not consumed yet by this process,
/// sent before or after this call (the report's `sleep`/`rendezvous`).
///
/// Several threads of one process: a call returns on a wakeup newer than
/// what the process had consumed when the call began. A wakeup thus
/// releases every call of the process that began before one of them
/// returned on it, and a call made after that waits for the next one; how
/// many threads' calls made close together one wakeup releases depends on
/// their timing. To hand each wakeup to one thread, give each thread an id
/// of its own.
///
/// In a run with recovery, a call that waits when the run loses a process,
/// or the first one after the loss, fails with SAT_ERR_PROCESS_LOST: the
/// wakeup it waits for may have been the lost process's to send. Call it
/// again if another process will wake it (a wakeup sent before still
/// counts).
///
/// Returns: SAT_OK, or SAT_ERR_USAGE (no run, a fork() child),
/// SAT_ERR_TRANSPORT, SAT_ERR_ABORTED, SAT_ERR_PROCESS_LOST.
#[no_mangle]
pub extern "C" fn sat_rendezvous(id: u32) -> sat_status {
    call("rendezvous", |c| c.rendezvous(id))
}

/// Wakes every process sleeping on rendezvous `id`; remembered for the next
/// one to come. Wakeups not consumed in between count as one. Returns once
/// the rendezvous' coordinator has applied it (one round trip): a
/// rendezvous called after it returned, in any process, sees it.
///
/// In a run with replicated homes that loses this process's server while
/// the wakeup is under way, it is sent again through the server that takes
/// over: it is applied once, whether the lost server had passed it on or
/// not, and the call returns as usual.
///
/// Returns: SAT_OK, or SAT_ERR_USAGE, SAT_ERR_TRANSPORT, SAT_ERR_ABORTED.
#[no_mangle]
pub extern "C" fn sat_wakeup(id: u32) -> sat_status {
    call("wakeup", |c| c.wakeup(id))
}

/// Waits until `count` calls of barrier `id` have arrived. A call is an
/// arrival: each thread that calls it arrives once, so two processes whose
/// four threads each call it make a count of 8. The first arrival of a
/// round fixes its count: a call with another count fails with
/// SAT_ERR_USAGE and does not count, and the round goes on waiting for the
/// count it has (as MPI's would, a program whose calls disagree waits).
///
/// In a run with recovery (`satrun --enable-recovery`), each thread's first
/// call after the run lost a process fails with SAT_ERR_PROCESS_LOST and
/// does not count, whether it arrived before the loss or after: call it
/// again with the number of calls the round can still get (a lost client's
/// calls are gone; a lost server takes no client with it). Every thread
/// learns of a loss from a call of its own (also a thread that starts
/// after the loss, at its first call), so each knows to call again with
/// the new count whatever the others did first. An arrival of a lost server's own
/// client that the server carried is sent again through the server that
/// takes over, and counted once: if its round had ended, the call returns
/// SAT_OK (and the next call fails for the loss instead).
///
/// Returns: SAT_OK, or SAT_ERR_USAGE (count 0, no run), SAT_ERR_TRANSPORT,
/// SAT_ERR_ABORTED, SAT_ERR_PROCESS_LOST.
#[no_mangle]
pub extern "C" fn sat_barrier(id: u32, count: u32) -> sat_status {
    call("barrier", |c| c.barrier(id, count))
}

/// Runs, now, the handlers of the notifications and signals that have
/// arrived, and puts how many ran in `*ran` (0: none was waiting; `ran` may
/// be NULL). Handlers otherwise run only while the role waits (in
/// sat_rendezvous, sat_barrier, a sat_read_symbol of a symbol not written
/// yet) and after the role function returns: a role
/// that computes for long between its waits calls this to serve its
/// subscriptions meanwhile, as an MPI program calls MPI_Test. It never
/// waits.
///
/// Only on the role's thread (the thread sat_bootstrap runs the role
/// function on, or the one that called sat_connect), and not from a handler:
/// elsewhere SAT_ERR_USAGE. The handlers run on the caller's thread: one
/// that acquires a chunk the caller holds in a scope is refused; call it
/// holding no scope on what the handlers use.
///
/// Returns: SAT_OK, or SAT_ERR_USAGE (no run, another thread, from a
/// handler), SAT_ERR_TRANSPORT, SAT_ERR_ABORTED.
///
/// # Safety
/// `ran` is NULL or points at a writable variable.
#[no_mangle]
pub unsafe extern "C" fn sat_run_handlers(ran: *mut u32) -> sat_status {
    call("run_handlers", |c| {
        let n = c.run_handlers()?;
        if !ran.is_null() {
            // SAFETY: the caller's writable variable.
            unsafe { *ran = u32::try_from(n).unwrap_or(u32::MAX) };
        }
        Ok(())
    })
}

/// Raises signal `id`: every subscribed process runs its handler.
///
/// Returns: SAT_OK, or SAT_ERR_USAGE, SAT_ERR_TRANSPORT, SAT_ERR_ABORTED.
#[no_mangle]
pub extern "C" fn sat_signal_raise(id: u32) -> sat_status {
    call("signal", |c| c.raise(id))
}

/// The number of clients in the run (the report's `clientGetClientNr`), or
/// a negative status outside a run.
#[no_mangle]
pub extern "C" fn sat_client_count() -> i32 {
    boundary("clientGetClientNr", || match client() {
        Ok(c) => c.client_count() as i32,
        Err(s) => s as i32,
    })
}

/// This process's rank, or a negative status outside a run.
#[no_mangle]
pub extern "C" fn sat_rank() -> i32 {
    boundary("sat_rank", || match client() {
        Ok(c) => c.rank() as i32,
        Err(s) => s as i32,
    })
}

/// This process's role, or a negative status outside a run.
#[no_mangle]
pub extern "C" fn sat_role() -> i32 {
    boundary("sat_role", || match client() {
        Ok(c) => c.role() as i32,
        Err(s) => s as i32,
    })
}

/// The number of S-DSM servers, or a negative status outside a run.
#[no_mangle]
pub extern "C" fn sat_server_count() -> i32 {
    boundary("sat_server_count", || match client() {
        Ok(c) => c.server_count() as i32,
        Err(s) => s as i32,
    })
}

// ----------------------------------------------------------------- symbols

pub(crate) fn name_of(fname: &str, name: *const c_char) -> Result<String, sat_status> {
    if name.is_null() {
        return Err(bad_argument(&format!(
            "{fname}: name is NULL; give a symbol name"
        )));
    }
    // SAFETY: a NUL-terminated C string from the caller.
    match unsafe { CStr::from_ptr(name) }.to_str() {
        Ok(s) => Ok(s.to_owned()),
        Err(_) => Err(bad_argument(&format!("{fname}: the name is not UTF-8"))),
    }
}

/// The report's `initSymbolicTable`: the table needs no set-up; kept so
/// Figure 7 ports as it is.
///
/// Returns: SAT_OK, or SAT_ERR_USAGE, SAT_ERR_TRANSPORT, SAT_ERR_ABORTED.
#[no_mangle]
pub extern "C" fn sat_init_symbol_table() -> sat_status {
    call("initSymbolicTable", |c| c.init_symbol_table())
}

/// Writes `size` bytes at `data` as the value of symbol `name` (replacing
/// any earlier value, whatever its size). A value over a chunk's 1 GiB
/// limit is kept as a chain of chunks: its size is bounded by memory only.
/// An empty value (`size` 0) may be given with `data` NULL.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL name, NULL data with a
/// `size` above 0, a name not UTF-8), SAT_ERR_CHUNK (a value larger than this machine's memory),
/// SAT_ERR_USAGE (among others: the name's bucket has used all its value
/// chunk ids, which values written again with another size use up),
/// SAT_ERR_NO_MEMORY, SAT_ERR_TRANSPORT, SAT_ERR_ABORTED; SAT_ERR_INTEGRITY
/// over a protected symbol.
#[no_mangle]
pub extern "C" fn sat_write_symbol(
    name: *const c_char,
    data: *const c_void,
    size: usize,
) -> sat_status {
    boundary("writeSymbol", || {
        let name = match name_of("writeSymbol", name) {
            Ok(n) => n,
            Err(s) => return s,
        };
        if data.is_null() && size > 0 {
            return bad_argument("writeSymbol: data is NULL; give the bytes to write");
        }
        let bytes = if size == 0 {
            &[][..]
        } else {
            // SAFETY: the caller gives `size` readable bytes at `data`.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }
        };
        call("writeSymbol", |c| c.write_symbol(&name, bytes))
    })
}

/// Reads symbol `name`: on success `*data` is a buffer of `*size` bytes
/// allocated with malloc (free it with `free` or `sat_free`). Waits up to
/// `SAT_LOOKUP_TIMEOUT` seconds (60 by default) for a writer.
///
/// With the encryption layer (a libsat built with feature `abe`, SAT_ABE),
/// a value that is a sealed version (what `sat_write_symbol_protected`
/// writes: it begins with a sealed version's header, "SATe" and its
/// format) is opened for this process's tenant: `*data` is then the
/// plaintext, or the call fails with `SAT_ERR_ACCESS_DENIED` (this tenant
/// may not read it, or no tenant key) or `SAT_ERR_INTEGRITY` (also for an
/// older sealed value put back over a newer one: each protected write is
/// numbered, and a reader takes only the name's latest). Any other
/// value is returned as it is, unless the symbol has ever been written
/// protected: such a value was written over it through the plain API, and
/// the call fails with `SAT_ERR_INTEGRITY`.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL name, data or size, a
/// `SAT_LOOKUP_TIMEOUT` that is not a number of seconds), SAT_ERR_TIMEOUT
/// (nobody wrote it within SAT_LOOKUP_TIMEOUT),
/// SAT_ERR_USAGE, SAT_ERR_NO_MEMORY, SAT_ERR_TRANSPORT, SAT_ERR_ABORTED;
/// SAT_ERR_ACCESS_DENIED, SAT_ERR_INTEGRITY (see above).
///
/// # Safety
/// `data` and `size` point at writable variables.
#[no_mangle]
pub unsafe extern "C" fn sat_read_symbol(
    name: *const c_char,
    data: *mut *mut c_void,
    size: *mut usize,
) -> sat_status {
    boundary("readSymbol", || {
        let name = match name_of("readSymbol", name) {
            Ok(n) => n,
            Err(s) => return s,
        };
        if data.is_null() || size.is_null() {
            return bad_argument("readSymbol: data or size is NULL; give where to put the result");
        }
        let timeout = match crate::settings::lookup_timeout() {
            Ok(t) => t,
            Err(s) => return s,
        };
        let c = match client() {
            Ok(c) => c,
            Err(s) => return s,
        };
        match c.read_symbol(&name, timeout) {
            Ok(bytes) => {
                #[cfg(feature = "abe")]
                let bytes = match crate::abe::open_symbol(&c, &name, bytes) {
                    Ok(b) => b,
                    Err(s) => return s,
                };
                // SAFETY: malloc of at least one byte; the caller frees it.
                let buf = unsafe { libc::malloc(bytes.len().max(1)) };
                if buf.is_null() {
                    return crate::status::out_of_memory(&format!(
                        "readSymbol: out of memory for the value of {} bytes",
                        bytes.len()
                    ));
                }
                // SAFETY: buf holds bytes.len() bytes; the out-pointers are valid.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
                    *data = buf;
                    *size = bytes.len();
                }
                sat_status::SAT_OK
            }
            Err(e) => fail(&e),
        }
    })
}

/// Frees a buffer from `sat_read_symbol` (the same as `free`).
///
/// # Safety
/// `p` comes from `sat_read_symbol` or is NULL.
#[no_mangle]
pub unsafe extern "C" fn sat_free(p: *mut c_void) {
    // SAFETY: malloc'd by sat_read_symbol, or NULL.
    unsafe { libc::free(p) }
}

// --------------------------------------------------------- publish-subscribe

/// A chunk handler: the handle it was subscribed with and the caller's
/// parameters.
pub type sat_chunk_handler = Option<unsafe extern "C" fn(*mut sat_chunk_t, *mut c_void)>;

/// A signal handler: the signal raised and the caller's parameters.
pub type sat_signal_handler = Option<unsafe extern "C" fn(u32, *mut c_void)>;

/// Pointers a handler closure carries to the C side.
#[derive(Clone, Copy)]
struct Ptrs(*mut sat_chunk_t, *mut c_void);
// SAFETY: handlers run on the role's thread; the pointers are the caller's.
unsafe impl Send for Ptrs {}
// SAFETY: as above.
unsafe impl Sync for Ptrs {}

/// SUBSCRIBE: after every write release of any chunk of the chain, from any
/// process, `handler(chunk, params)` runs in this process, given the handle
/// it was subscribed with (in the client loop after the role function
/// returns, while it waits in a rendezvous, a barrier or a symbol read, and
/// when it calls
/// sat_run_handlers). A handler may
/// use the whole API; a READ of the chain inside it sees every release it
/// was run for.
///
/// Releases that arrive while the handler waits to run merge: it runs at
/// least once after each release of any chunk of the chain, but not once
/// per chunk per release. Each handle is a subscription of its own: two
/// handles whose chains start at the same chunk (LOOKUP(10, 4) and
/// LOOKUP(10, 2), say) each have their handler, a release of a chunk both
/// hold runs both, and UNSUBSCRIBE of one leaves the other. SUBSCRIBE twice
/// with one handle, before UNSUBSCRIBE, is `SAT_ERR_USAGE`. A handler that
/// wants the released bytes with the notification subscribes with
/// sat_subscribe_data instead.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL chunk or handler),
/// SAT_ERR_USAGE (already subscribed through this handle, a handle that is
/// not valid, no run), SAT_ERR_TRANSPORT, SAT_ERR_ABORTED.
#[no_mangle]
pub extern "C" fn sat_subscribe(
    chunk: *mut sat_chunk_t,
    handler: sat_chunk_handler,
    params: *mut c_void,
) -> sat_status {
    boundary("SUBSCRIBE", || {
        let chain = match chain_of("SUBSCRIBE", chunk) {
            Ok(c) => c,
            Err(s) => return s,
        };
        let Some(h) = handler else {
            return bad_argument("SUBSCRIBE: handler is NULL; give the function to run");
        };
        let ptrs = Ptrs(chunk, params);
        call("SUBSCRIBE", |c| {
            c.subscribe_chain(&chain, false, move |_, _: &Event| {
                let p = ptrs;
                // SAFETY: the caller's handler with its own arguments.
                unsafe { h(p.0, p.1) };
                Ok(())
            })
        })
    })
}

/// What a data subscription's handler is told of a release
/// (sat_subscribe_data). The library fills it in; the handler reads it.
#[repr(C)]
pub struct sat_release_t {
    /// The chunk released: one of the handle's chain (the latest released,
    /// when notifications merged).
    pub chunk_id: u64,
    /// The version its home had just applied when the notification left.
    pub version: u64,
    /// Where that chunk starts in the chain's data (`chunk->data +
    /// offset` is where a scope would show these bytes).
    pub offset: usize,
    /// That version's bytes. They belong to the library: valid until the
    /// handler returns, never to be written.
    pub data: *const c_void,
    /// How many bytes: the released chunk's size.
    pub size: usize,
}

/// A data subscription's handler: the handle it was subscribed with, the
/// release it is told of (valid until it returns) and the caller's
/// parameters.
pub type sat_chunk_data_handler =
    Option<unsafe extern "C" fn(*mut sat_chunk_t, *const sat_release_t, *mut c_void)>;

/// SUBSCRIBE with the data: as sat_subscribe, but each notification carries
/// the bytes of the chunk released, at the version it tells of, and
/// `handler(chunk, release, params)` gets them in `release`. A handler that
/// only needs those bytes needs no READ: across hosts that saves a round
/// trip to the home per notification.
///
/// The bytes are that version's, whatever happened since: a handler that
/// must see the newest version READs the chain (its scope then sees at
/// least the version told). Notifications merge as sat_subscribe's do: a
/// run tells of the latest release of any chunk of the chain, with that
/// chunk's bytes; earlier releases merged into it are not given one by one.
/// The home sends the bytes to every data subscriber of a chunk, so a large
/// chunk costs its size per subscriber and release; a chain's notification
/// carries one chunk, never the whole chain.
///
/// sat_unsubscribe ends it, as it ends sat_subscribe's. A handle is
/// subscribed once, with or without data.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL chunk or handler),
/// SAT_ERR_USAGE (already subscribed through this handle, a protected
/// chain, whose bytes are sealed: subscribe it with sat_subscribe and READ
/// it; a handle that is not valid, no run), SAT_ERR_TRANSPORT,
/// SAT_ERR_ABORTED.
#[no_mangle]
pub extern "C" fn sat_subscribe_data(
    chunk: *mut sat_chunk_t,
    handler: sat_chunk_data_handler,
    params: *mut c_void,
) -> sat_status {
    const NAME: &str = "SUBSCRIBE with data";
    boundary(NAME, || {
        let chain = match chain_of(NAME, chunk) {
            Ok(c) => c,
            Err(s) => return s,
        };
        #[cfg(feature = "abe")]
        if crate::chunks::live(NAME, chunk).is_ok_and(|i| i.protected().is_some()) {
            return crate::status::usage(&format!(
                "{NAME} of chunk {}: the chain is protected and its chunks' bytes are sealed; \
                 subscribe with sat_subscribe and READ the chain in the handler",
                chain.first()
            ));
        }
        let Some(h) = handler else {
            return bad_argument(&format!(
                "{NAME}: handler is NULL; give the function to run"
            ));
        };
        let ptrs = Ptrs(chunk, params);
        let layout = chain.layout().clone();
        call(NAME, |c| {
            c.subscribe_chain(&chain, true, move |_, event: &Event| {
                let Event::Chunk {
                    chunk: released,
                    version,
                    data: Some(data),
                } = event
                else {
                    // A data subscription is only given events with their
                    // bytes (`client/events.rs`).
                    return Ok(());
                };
                let offset = layout
                    .position(*released)
                    .map_or(0, |i| layout.range(i).start);
                let release = sat_release_t {
                    chunk_id: *released,
                    version: *version,
                    offset,
                    data: data.as_ptr().cast(),
                    size: data.len(),
                };
                let p = ptrs;
                // SAFETY: the caller's handler with its own arguments; the
                // release and its bytes outlive the call.
                unsafe { h(p.0, &release, p.1) };
                Ok(())
            })
        })
    })
}

/// UNSUBSCRIBE: the handler this handle was subscribed with will not run
/// again, not even for releases already notified. Other handles'
/// subscriptions go on, whatever chunks they share with it. Called from
/// another thread while that handler runs on the role's thread, it returns
/// once that run has ended.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL), SAT_ERR_USAGE (not
/// subscribed, a handle that is not valid), SAT_ERR_TRANSPORT.
#[no_mangle]
pub extern "C" fn sat_unsubscribe(chunk: *mut sat_chunk_t) -> sat_status {
    boundary("UNSUBSCRIBE", || {
        let chain = match chain_of("UNSUBSCRIBE", chunk) {
            Ok(c) => c,
            Err(s) => return s,
        };
        call("UNSUBSCRIBE", |c| c.unsubscribe_chain(&chain))
    })
}

/// Runs `handler(id, params)` after signal `id` is raised: at least once
/// after each raise. Raises that come while an earlier one still waits for
/// its handler merge into it, as a chunk's notifications do (section 2.5:
/// signals work as publish-subscribe), so the number of runs counts
/// nothing: keep a count in a chunk where the number matters.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL handler), SAT_ERR_USAGE
/// (already subscribed, no run), SAT_ERR_TRANSPORT, SAT_ERR_ABORTED.
#[no_mangle]
pub extern "C" fn sat_signal_subscribe(
    id: u32,
    handler: sat_signal_handler,
    params: *mut c_void,
) -> sat_status {
    boundary("signal subscribe", || {
        let Some(h) = handler else {
            return bad_argument("signal subscribe: handler is NULL");
        };
        let ptrs = Ptrs(std::ptr::null_mut(), params);
        call("signal subscribe", |c| {
            c.subscribe_signal(id, move |_, _| {
                let p = ptrs;
                // SAFETY: the caller's handler with its own arguments.
                unsafe { h(id, p.1) };
                Ok(())
            })
        })
    })
}

/// Stops the handler of signal `id`: it will not run again, not even for
/// raises already heard of. Called from another thread while that handler
/// runs on the role's thread, it returns once that run has ended.
///
/// Returns: SAT_OK, or SAT_ERR_USAGE (not subscribed, no run),
/// SAT_ERR_TRANSPORT.
#[no_mangle]
pub extern "C" fn sat_signal_unsubscribe(id: u32) -> sat_status {
    call("signal unsubscribe", |c| c.unsubscribe_signal(id))
}
