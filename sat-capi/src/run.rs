//! The bootstrap (Figure 10) and the process's client.
//!
//! The paper's API has no client argument (`MALLOC(consistency, id, size)`):
//! a process plays one role, so its client is process-wide state, installed
//! while `sat_bootstrap` runs and removed when it returns.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use sat_core::bootstrap::{run, Roles};
use sat_core::client::Client;

use crate::status::{bad_argument, boundary, fail, sat_status, set_error};

static CLIENT: AtomicPtr<Client> = AtomicPtr::new(std::ptr::null_mut());

/// The client of this process, while its role runs.
pub(crate) fn client() -> Result<&'static Client, sat_status> {
    let p = CLIENT.load(Ordering::Acquire);
    if p.is_null() {
        set_error(
            "no SAT run is going on in this process: call SAT functions from a role function \
             started by sat_bootstrap (_SAT_BOOTSTRAP) or its handlers, or after sat_connect \
             attached the process to a service",
        );
        return Err(sat_status::SAT_ERR_USAGE);
    }
    // SAFETY: the pointer is set to the client `run` lends the role, and
    // cleared once `run` returns, after the role and its handlers ended.
    Ok(unsafe { &*p })
}

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

/// Joins the run and plays this process's role (Figure 10): `roles[r]` is
/// the function of role `r`, for `r` < `nroles`. Returns when the run is
/// over for this process (its role, then its subscriptions' handlers, have
/// ended), with `SAT_OK` or an error status. `reserved` must be NULL.
/// `argc`/`argv` are the program's: `--topology FILE` is read from them
/// (`argv` is `char *const *` so that `main`'s `char **argv` passes as is).
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
) -> i32 {
    boundary("sat_bootstrap", || {
        if roles.is_null() {
            return bad_argument("sat_bootstrap: roles is NULL; give the table of role functions")
                as i32;
        }
        if !CLIENT.load(Ordering::Acquire).is_null() {
            return crate::status::usage(
                "sat_bootstrap: this process is already in a run; call sat_bootstrap once, \
                 from main",
            ) as i32;
        }
        if !reserved.is_null() {
            return bad_argument("sat_bootstrap: the third argument is reserved: pass NULL") as i32;
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
        let mut r = Roles::new();
        for (role, f) in table.iter().enumerate().skip(1) {
            let Some(f) = *f else { continue };
            r = r.role(role as u32, move |c: &Client| {
                CLIENT.store(c as *const Client as *mut Client, Ordering::Release);
                let mut b = sat_bootstrap_t {
                    rank: c.rank(),
                    role: c.role(),
                    size: c.size(),
                };
                // SAFETY: a role function of the caller's table.
                unsafe { f(&mut b) };
                Ok(())
            });
        }
        let outcome = run(r, args);
        CLIENT.store(std::ptr::null_mut(), Ordering::Release);
        crate::chunks::forget_all();
        match outcome {
            Ok(()) => 0,
            Err(e) => fail(&e) as i32,
        }
    })
}

/// The session of a process attached to a service (`sat_connect`).
static SESSION: std::sync::Mutex<Option<sat_core::service::Session>> = std::sync::Mutex::new(None);

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
/// already in a run or attached, or if `address` is not a service's
/// address, `SAT_ERR_BOOTSTRAP` if the service cannot be reached, refuses
/// the secret or has no free client slot (`sat_last_error` says which).
///
/// # Safety
/// `address` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sat_connect(address: *const c_char) -> i32 {
    boundary("sat_connect", || {
        if address.is_null() {
            return bad_argument(
                "sat_connect: address is NULL; give the service's connection string \
                 (\"sat://SECRET@host:port\", from its address file)",
            ) as i32;
        }
        // SAFETY: the caller gives a NUL-terminated string.
        let address = unsafe { CStr::from_ptr(address) }
            .to_string_lossy()
            .into_owned();
        let mut session = SESSION.lock().unwrap_or_else(|p| p.into_inner());
        if session.is_some() || !CLIENT.load(Ordering::Acquire).is_null() {
            return crate::status::usage(
                "sat_connect: this process is already attached or in a run; call sat_detach \
                 first",
            ) as i32;
        }
        match sat_core::service::connect(&address) {
            Ok(s) => {
                let client: *const Client = &**s.client();
                CLIENT.store(client.cast_mut(), Ordering::Release);
                *session = Some(s);
                0
            }
            Err(e) => fail(&e) as i32,
        }
    })
}

/// Detaches from the service `sat_connect` attached to: open scopes are
/// released (with a warning), every release is taken in by the servers,
/// the endpoint closes and the slot is given back. Chunk handles obtained
/// while attached are invalid afterwards. No other thread may be inside a
/// SAT call meanwhile.
#[no_mangle]
pub extern "C" fn sat_detach() -> i32 {
    boundary("sat_detach", || {
        let Some(session) = SESSION.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return crate::status::usage("sat_detach: this process is not attached (sat_connect)")
                as i32;
        };
        CLIENT.store(std::ptr::null_mut(), Ordering::Release);
        // The chunks' memory goes after the detach: releasing a scope left
        // open still reads it.
        let outcome = session.detach();
        crate::chunks::forget_all();
        match outcome {
            Ok(()) => 0,
            Err(e) => fail(&e) as i32,
        }
    })
}
