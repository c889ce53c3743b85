//! The bootstrap (Figure 10) and the process's client.
//!
//! The paper's API has no client argument (`MALLOC(consistency, id, size)`):
//! a process plays one role, so its client is process-wide state, installed
//! while `sat_bootstrap` runs and removed when it returns.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

use sat_core::bootstrap::{run, Roles};
use sat_core::client::Client;

use crate::status::{bad_argument, boundary, fail, sat_status, set_error, usage};

/// The process's client, lent to the calls of every thread: while the role
/// runs (its function, the threads it started, its handlers) or while the
/// process is attached to a service.
///
/// `calls` counts the calls using it, with [`OPEN`] set while it may be
/// used. A call counts itself in before it reads `client`, and the lender
/// takes the client back by clearing `OPEN` and waiting for the count to
/// reach zero, so the client never goes while a call is inside it. A counter
/// rather than a lock: a handler runs inside a call of the role's thread and
/// calls the API again.
struct Lent {
    client: AtomicPtr<Client>,
    calls: AtomicU64,
}

const OPEN: u64 = 1 << 63;

/// Set by [`take_back`] while it waits for the calls in progress: new calls
/// are refused then, but RELEASE still goes through ([`client_to_end_scopes`]).
/// Calls waiting for a scope another thread holds end only when that
/// thread releases it, and that thread is not inside a call then: refused,
/// it would leave them, and the end of the role waiting for them, stuck
/// for ever.
const DRAINING: u64 = 1 << 62;

static LENT: Lent = Lent {
    client: AtomicPtr::new(std::ptr::null_mut()),
    calls: AtomicU64::new(0),
};

/// Set in a `fork()` child of a process that had a client: the child holds
/// a copy of its parent's client, whose endpoint it must never drive.
static INHERITED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The calls this thread is inside (a handler's calls nest in its
    /// caller's).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The client, borrowed by one call: it stays alive until this is dropped.
pub(crate) struct ClientRef {
    client: *const Client,
}

impl std::ops::Deref for ClientRef {
    type Target = Client;
    fn deref(&self) -> &Client {
        // SAFETY: counted in `calls` while OPEN was set, so the lender waits
        // for this borrow to end before the client goes.
        unsafe { &*self.client }
    }
}

impl Drop for ClientRef {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
        LENT.calls.fetch_sub(1, Ordering::Release);
    }
}

/// Refuses a fork() child of a process with a client.
pub(crate) fn check_process() -> Result<(), sat_status> {
    if INHERITED.load(Ordering::Relaxed) {
        return Err(usage(
            "this process is a fork() child of a process in a SAT run: the run's client \
             belongs to the parent, and the child must not use its endpoint; call SAT from the \
             parent only, or exec a program in the child that joins a run or attaches to a \
             service of its own",
        ));
    }
    Ok(())
}

/// The client of this process, for one call.
pub(crate) fn client() -> Result<ClientRef, sat_status> {
    check_process()?;
    let before = LENT.calls.fetch_add(1, Ordering::Acquire);
    if before & OPEN == 0 {
        LENT.calls.fetch_sub(1, Ordering::Release);
        set_error(
            "no SAT run is going on in this process: call SAT functions from a role function \
             started by sat_bootstrap (_SAT_BOOTSTRAP), the threads it starts or its handlers, \
             while the role runs, or after sat_connect attached the process to a service \
             (chunk handles of an earlier run or of a detached session are no longer valid)",
        );
        return Err(sat_status::SAT_ERR_USAGE);
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    Ok(ClientRef {
        client: LENT.client.load(Ordering::Acquire),
    })
}

/// The client for a call that ends scopes (RELEASE): as [`client`], and
/// also while the lender waits for the calls in progress ([`DRAINING`]).
pub(crate) fn client_to_end_scopes() -> Result<ClientRef, sat_status> {
    check_process()?;
    let before = LENT.calls.fetch_add(1, Ordering::Acquire);
    if before & (OPEN | DRAINING) == 0 {
        LENT.calls.fetch_sub(1, Ordering::Release);
        return client();
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    Ok(ClientRef {
        client: LENT.client.load(Ordering::Acquire),
    })
}

/// Whether this thread is inside a SAT call (a handler runs inside one).
fn inside_a_call() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// Whether a client is lent (a run or a session is going on, or ending).
fn lending() -> bool {
    LENT.calls.load(Ordering::Acquire) & (OPEN | DRAINING) != 0
}

/// Lends `client` to the calls of every thread, until [`take_back`].
fn lend(client: &Client) {
    watch_forks();
    LENT.client
        .store(client as *const Client as *mut Client, Ordering::Release);
    LENT.calls.fetch_or(OPEN, Ordering::AcqRel);
}

/// Refuses new calls (RELEASE excepted, [`DRAINING`]), waits for those in
/// progress on other threads to return, then forgets the client. The
/// caller is in no call itself. Called twice by a run (the second time
/// finds nothing lent).
fn take_back() {
    take_back_with(false)
}

/// [`take_back`] at the end of a role: also waits until no other thread
/// holds a scope (sat.h, Threads: a scope a thread left open, or holds
/// still, is waited for until some thread ends it), so that a thread's
/// RELEASE or ABORT after the role returned goes through and publishes, or
/// not, as that thread says. A scope of the role's own thread is released
/// by the end of the role, with a warning.
fn take_back_at_role_end() {
    take_back_with(true)
}

fn take_back_with(mut wait_for_scopes: bool) {
    let _ = LENT
        .calls
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            (v & OPEN != 0).then_some((v & !OPEN) | DRAINING)
        });
    let mut waited = 0u32;
    loop {
        let v = LENT.calls.load(Ordering::Acquire);
        if v & DRAINING == 0 {
            break;
        }
        if v == DRAINING && wait_for_scopes {
            // No call is in progress, and none can begin but RELEASE and
            // ABORT: the scopes other threads hold can only end.
            let client = LENT.client.load(Ordering::Acquire);
            // SAFETY: the client stays until this function clears the
            // pointer (below).
            if let Some(client) = unsafe { client.as_ref() } {
                if let Err(e) = client.wait_for_other_threads_scopes() {
                    // The run is ending for another reason: its end
                    // releases them.
                    tracing::warn!(
                        "the end of the role stopped waiting for other threads' scopes: {e}"
                    );
                    wait_for_scopes = false;
                }
            }
        }
        // Drained once no call is counted: the exchange fails if a RELEASE
        // counted itself in meanwhile, and the wait goes on.
        if v == DRAINING
            && LENT
                .calls
                .compare_exchange(DRAINING, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            break;
        }
        // Rare and short (a call another thread is finishing): yield, then
        // sleep so a long one does not spin a core.
        if waited < 100 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        waited = waited.saturating_add(1);
    }
    LENT.client.store(std::ptr::null_mut(), Ordering::Release);
}

/// Marks a fork() child of a process with a client (once per process).
fn watch_forks() {
    static WATCHING: std::sync::Once = std::sync::Once::new();
    extern "C" fn in_child() {
        if LENT.calls.load(Ordering::Relaxed) & (OPEN | DRAINING) != 0 {
            INHERITED.store(true, Ordering::Relaxed);
        }
    }
    WATCHING.call_once(|| {
        // SAFETY: registers a handler that only reads and stores atomics
        // (async-signal-safe, as a child's atfork handler must be).
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            tracing::warn!(
                "pthread_atfork failed ({rc}): a fork() child is not told it has no client"
            );
        }
    });
}

/// Why the role of this process failed, from `sat_role_failed`.
static ROLE_FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// What a role function receives (the report's `_SAT_Bootstrap_t`).
#[repr(C)]
pub struct sat_bootstrap_t {
    /// This process's rank in the run.
    pub rank: u32,
    /// The role it plays (1 and above).
    pub role: u32,
    /// The number of processes in the run, servers included.
    pub size: u32,
}

/// A role function (the report's `_SAT_Roles_t`): NULL for roles this
/// program does not play (entry 0 is the S-DSM server's, always NULL).
pub type sat_role_fn = Option<unsafe extern "C" fn(*mut sat_bootstrap_t)>;

/// Set while a bootstrap runs in this process: a second one is refused.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// The process whose `sat_bootstrap` set `RUNNING`: a fork() child that
/// exits has the flag too, but its exit is not its parent's.
static RUNNING_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// At `exit()`: a process that exits while its `sat_bootstrap` runs (a role
/// that calls `exit`, even `exit(0)`) leaves its run without a word, and
/// the run then names whichever process noticed (the server that lost it):
/// this line, on the process's own stderr (`[rank]` under satrun), says
/// which one went, and satrun is told, to name this rank as the one that
/// failed the run.
extern "C" fn say_exit_during_run() {
    if RUNNING.load(Ordering::Acquire) && RUNNING_PID.load(Ordering::Relaxed) == std::process::id()
    {
        sat_core::launcher::announce_leaving_role();
        const NOTE: &[u8] = b"SAT: this process exited (exit() or a return from main) while \
            sat_bootstrap ran its role: its run goes on without it, or stops if it cannot\n";
        // SAFETY: write(2) of a static buffer to stderr.
        unsafe {
            libc::write(2, NOTE.as_ptr().cast(), NOTE.len());
        }
    }
}

/// Joins the run and plays this process's role (Figure 10): `roles[r]` is
/// the function of role `r`, for `r` < `nroles`. Returns when the run is
/// over for this process (its role, then its subscriptions' handlers, have
/// ended), with `SAT_OK` or an error status. `reserved` must be NULL.
/// `argc`/`argv` are the program's: `--topology FILE` is read from them
/// (`argv` is `char *const *` so that `main`'s `char **argv` passes as is).
///
/// The role's client serves the threads the role starts too. When the role
/// and its handlers are over, new calls fail with `SAT_ERR_USAGE` and
/// `sat_bootstrap` waits for calls still in progress on other threads, and
/// for the scopes other threads hold or left open to end (RELEASE and ABORT
/// still go through, and publish or not as they say; every 10 s a warning
/// names the chunks waited for), before the client goes. A scope the
/// role's own thread left open is then released, with a warning. Chunk
/// handles are invalid once it returns (a call with one returns
/// `SAT_ERR_USAGE`). SAT's threads have ended then; on one host
/// the process keeps its doorbell (the memory its peers ring to wake it: two
/// `memfd` descriptors, close-on-exec) until it exits.
///
/// Returns `SAT_ERR_ROLE` when the role called `sat_role_failed` (its open
/// scopes publish nothing) or failed inside SAT, `SAT_ERR_USAGE` when called
/// again (while a run or a session (`sat_connect`) is going on, or after an
/// earlier call returned: a process bootstraps once), and the
/// statuses of joining the run (`SAT_ERR_BOOTSTRAP`, `SAT_ERR_TOPOLOGY`,
/// `SAT_ERR_TRANSPORT`, `SAT_ERR_ABORTED`). A program should return non-zero
/// from `main` when it is not `SAT_OK`, so that satrun reports the failure.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL roles, reserved not NULL),
/// SAT_ERR_USAGE (called twice, a fork() child, under a service, a
/// `SAT_CHUNK_SIZE` that is not valid, a role of this rank with no function
/// in the table),
/// SAT_ERR_TOPOLOGY, SAT_ERR_BOOTSTRAP (no launcher, peers that never came),
/// SAT_ERR_TIMEOUT (the seed did not answer within `SAT_BOOTSTRAP_TIMEOUT`),
/// SAT_ERR_TRANSPORT, SAT_ERR_ABORTED, SAT_ERR_ROLE (see above).
///
/// # Safety
/// `roles` points at `nroles` entries; `argv` at `argc` C strings (or NULL
/// to use the process's own arguments).
#[no_mangle]
pub unsafe extern "C" fn sat_bootstrap(
    roles: *const sat_role_fn,
    nroles: usize,
    reserved: *mut c_void,
    argc: c_int,
    argv: *const *mut c_char,
) -> sat_status {
    /// Set by the first bootstrap that got as far as joining: a process
    /// takes part in one run (the launcher's environment, such as the
    /// seed's socket, is spent by the first), so a later call is refused
    /// at once instead of failing on that environment, or waiting for a
    /// seed that is gone.
    static CALLED: AtomicBool = AtomicBool::new(false);
    /// Clears `RUNNING` however the bootstrap ends.
    struct Running;
    impl Drop for Running {
        fn drop(&mut self) {
            RUNNING.store(false, Ordering::Release);
        }
    }
    boundary("sat_bootstrap", || {
        if roles.is_null() {
            return bad_argument("sat_bootstrap: roles is NULL; give the table of role functions");
        }
        if !reserved.is_null() {
            return bad_argument("sat_bootstrap: the third argument is reserved: pass NULL");
        }
        if let Err(s) = check_process() {
            return s;
        }
        if lending() || RUNNING.swap(true, Ordering::AcqRel) {
            return usage(
                "sat_bootstrap: this process is already in a run or attached to a service; \
                 call sat_bootstrap once, from main",
            );
        }
        RUNNING_PID.store(std::process::id(), Ordering::Relaxed);
        let _running = Running;
        if CALLED.swap(true, Ordering::AcqRel) {
            return usage(
                "sat_bootstrap: this process called sat_bootstrap before (its run is over, or \
                 it could not join one); a process bootstraps once: start the program again \
                 (under satrun) to join another run",
            );
        }
        // Once per process: only the first bootstrap gets this far.
        // SAFETY: atexit with a function that takes and returns nothing.
        if unsafe { libc::atexit(say_exit_during_run) } != 0 {
            tracing::debug!("could not register the note of an exit during the run");
        }
        let args: Vec<String> = if argv.is_null() || argc <= 0 {
            std::env::args().collect()
        } else {
            (0..argc as usize)
                .map(|i| {
                    // SAFETY: the caller gives argc C strings.
                    let p = unsafe { *argv.add(i) };
                    if p.is_null() {
                        String::new()
                    } else {
                        // SAFETY: a NUL-terminated argument string.
                        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                    }
                })
                .collect()
        };
        // SAFETY: the caller gives nroles entries.
        let table = unsafe { std::slice::from_raw_parts(roles, nroles) };
        *lock(&ROLE_FAILURE) = None;
        let mut r = Roles::new().before_client_ends(take_back_at_role_end);
        for (role, f) in table.iter().enumerate().skip(1) {
            let Some(f) = *f else { continue };
            r = r.role(role as u32, move |c: &Client| {
                lend(c);
                let mut b = sat_bootstrap_t {
                    rank: c.rank(),
                    role: c.role(),
                    size: c.size(),
                };
                // SAFETY: a role function of the caller's table.
                unsafe { f(&mut b) };
                match lock(&ROLE_FAILURE).clone() {
                    Some(why) => Err(why.into()),
                    None => Ok(()),
                }
            });
        }
        let outcome = run(r, args);
        // `take_back` ran before the client went, unless the run ended
        // before the role started.
        take_back();
        crate::chunks::forget_all();
        let failure = lock(&ROLE_FAILURE).take();
        match (outcome, failure) {
            (Ok(()), None) => sat_status::SAT_OK,
            (Ok(()), Some(why)) => crate::status::set_error_status(
                sat_status::SAT_ERR_ROLE,
                &format!("a handler of this process's role failed: {why}"),
            ),
            (Err(e), _) => fail(&e),
        }
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded values are plain data, valid after any panic.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Marks this process's role as failed, for `reason` (a NUL-terminated
/// message, or NULL): C roles return `void`, so this is how one fails. The
/// role goes on until its function returns; then its open scopes end
/// without publishing anything, the run's termination protocol completes,
/// and `sat_bootstrap` returns `SAT_ERR_ROLE` with the reason in
/// `sat_last_error`. Called from a handler that runs after the role
/// function, the same status is returned once the handlers are over.
/// Returns `SAT_ERR_USAGE` outside a run.
///
/// Returns: SAT_OK, or SAT_ERR_USAGE (outside a role's run).
///
/// # Safety
/// `reason` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sat_role_failed(reason: *const c_char) -> sat_status {
    boundary("sat_role_failed", || {
        if let Err(s) = client() {
            return s;
        }
        let why = if reason.is_null() {
            "the role called sat_role_failed".to_string()
        } else {
            // SAFETY: a NUL-terminated string.
            unsafe { CStr::from_ptr(reason) }
                .to_string_lossy()
                .into_owned()
        };
        lock(&ROLE_FAILURE).get_or_insert(why);
        sat_status::SAT_OK
    })
}

/// The session of a process attached to a service (`sat_connect`).
static SESSION: Mutex<Option<sat_core::service::Session>> = Mutex::new(None);

/// Attaches this process to the SAT service at `address`, without satrun
/// and without roles: from the call on, every SAT function works as inside
/// a role, until `sat_detach`. `address` is the service's connection string
/// `"sat://SECRET@host:port"`, the one line of the address file `satrun
/// --serve` writes (surrounding white space is ignored); a plain
/// `"host:port"` takes the secret from `SAT_SECRET`. The process proves it
/// holds the secret without sending it; a service refuses one with no
/// secret or a wrong one, before it gets a slot.
/// Data, symbols and synchronization objects live at the service, so they
/// outlive this process for those that attach later.
///
/// The calling thread plays the role's thread: subscription handlers run
/// on it, during its waits. Returns `SAT_ERR_USAGE` if this process is
/// already in a run or attached (or is a fork() child of one that is), or
/// if `address` is not a service's address, `SAT_ERR_BOOTSTRAP` if the
/// service cannot be reached, refuses the secret or has no free client slot
/// (`sat_last_error` says which), `SAT_ERR_ARGUMENT` if `address` is NULL.
///
/// Returns: SAT_OK, or the statuses above.
///
/// # Safety
/// `address` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sat_connect(address: *const c_char) -> sat_status {
    boundary("sat_connect", || {
        if address.is_null() {
            return bad_argument(
                "sat_connect: address is NULL; give the service's connection string \
                 (\"sat://SECRET@host:port\", from its address file)",
            );
        }
        if let Err(s) = check_process() {
            return s;
        }
        // SAFETY: the caller gives a NUL-terminated string.
        let address = unsafe { CStr::from_ptr(address) }
            .to_string_lossy()
            .into_owned();
        let mut session = lock(&SESSION);
        if session.is_some() || lending() {
            return usage(
                "sat_connect: this process is already attached or in a run; call sat_detach \
                 first",
            );
        }
        match sat_core::service::connect(&address) {
            Ok(s) => {
                lend(s.client());
                *session = Some(s);
                sat_status::SAT_OK
            }
            Err(e) => fail(&e),
        }
    })
}

/// Detaches from the service `sat_connect` attached to: new calls fail with
/// `SAT_ERR_USAGE`, calls in progress on other threads are waited for (RELEASE
/// and ABORT still go through meanwhile: those calls may wait for a scope
/// another thread is ending), open scopes are then released (with a warning), every release is taken in by the
/// servers, the endpoint closes and the slot is given back. Chunk handles
/// obtained while attached are invalid afterwards (a call with one returns
/// `SAT_ERR_USAGE`, also after a new `sat_connect`). Returns `SAT_ERR_USAGE`
/// when the process is not attached, or when called from inside a SAT call
/// (a subscription handler).
///
/// Returns: SAT_OK, or SAT_ERR_USAGE (see above), SAT_ERR_TRANSPORT.
#[no_mangle]
pub extern "C" fn sat_detach() -> sat_status {
    boundary("sat_detach", || {
        if inside_a_call() {
            return usage(
                "sat_detach: called from inside a SAT call (a subscription handler); detach \
                 after the handler returns",
            );
        }
        if let Err(s) = check_process() {
            return s;
        }
        let Some(session) = lock(&SESSION).take() else {
            return usage("sat_detach: this process is not attached (sat_connect)");
        };
        take_back();
        // The chunks' memory goes after the detach: releasing a scope left
        // open still reads it.
        let outcome = session.detach();
        crate::chunks::forget_all();
        match outcome {
            Ok(()) => sat_status::SAT_OK,
            Err(e) => fail(&e),
        }
    })
}
