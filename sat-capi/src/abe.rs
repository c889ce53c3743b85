//! The encryption layer for C (feature `abe`; include/sat.h declares these
//! calls under `#if defined(SAT_ABE)`): protected chains and symbols, read
//! and written as plain ones are, through the process's tenant key.
//!
//! - The key: `sat_abe_load_key(path)`, or else `SAT_ABE_KEY` (with
//!   `{rank}` replaced by the process's rank) read at the first call that
//!   needs it. It holds for the run: `sat_bootstrap`'s return and
//!   `sat_detach` forget it with the chunk handles.
//! - A protected chain's handle points at the vault's plaintext buffer
//!   (`chunk->data`, `chunk->size` its plaintext size), fixed for the run,
//!   and its scopes go through the vault. LOOKUP of labelled chunks gives
//!   such a handle, so a reader written for plain chains works unchanged.
//! - `sat_read_symbol` opens a sealed value; other values come back as
//!   they are.

use std::ffi::{c_char, c_void, CStr};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, MutexGuard};

use sat_core::abe::seal::{label_has_write_policy, Header};
use sat_core::abe::{Policy, Protection, SecureChain, Vault};
use sat_core::chunk::{check_chain_size, ChainLayout};
use sat_core::client::{Chain, Client};
use sat_core::protocol::Access;
use sat_core::{SatError, SatResult};

use crate::chunks::{
    existing, protocol_of, register_protected, sat_chunk_t, sat_consistency_t, ScopeOp,
};
use crate::run::client;
use crate::status::{bad_argument, boundary, fail, sat_status, usage};
use crate::sync::name_of;

/// A protected chain's handle state: the chain and the vault it goes
/// through.
pub(crate) struct Protected {
    chain: SecureChain,
    vault: Arc<Vault>,
}

impl Protected {
    pub(crate) fn chain(&self) -> &SecureChain {
        &self.chain
    }

    /// READ, WRITE, READWRITE, RELEASE, ABORT, PUT or GET through the vault. PUT
    /// seals what the plaintext holds; GET leaves the current plaintext in
    /// it.
    pub(crate) fn scope(&self, c: &Client, op: ScopeOp) -> SatResult<()> {
        let (v, ch) = (&self.vault, &self.chain);
        match op {
            ScopeOp::Read => v.acquire(c, ch, Access::Read),
            ScopeOp::Write => v.acquire(c, ch, Access::Write),
            ScopeOp::ReadWrite => v.acquire(c, ch, Access::ReadWrite),
            ScopeOp::Release => v.release(c, ch),
            ScopeOp::Abort => v.abort(c, ch),
            ScopeOp::Put => {
                v.acquire(c, ch, Access::Write)?;
                v.release(c, ch)
            }
            ScopeOp::Get => {
                v.acquire(c, ch, Access::Read)?;
                v.release(c, ch)
            }
        }
    }
}

/// The process's vault, for the current run.
static VAULT: Mutex<Option<Arc<Vault>>> = Mutex::new(None);

fn slot() -> MutexGuard<'static, Option<Arc<Vault>>> {
    VAULT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Forgets the vault (the run is over).
pub(crate) fn forget() {
    slot().take();
}

/// The text of a key error, without sat-core's usage prefix.
fn reason(e: SatError) -> String {
    match e {
        SatError::Usage(m) => m,
        other => other.to_string(),
    }
}

/// The process's vault, loaded from `SAT_ABE_KEY` at the first need. No
/// key is access denied; a key file that cannot be used is a usage error
/// naming the file. `what` names the call, for the messages.
pub(crate) fn vault(what: &str, c: &Client) -> Result<Arc<Vault>, sat_status> {
    let mut slot = slot();
    if let Some(v) = slot.as_ref() {
        return Ok(v.clone());
    }
    match Vault::from_env(c.rank()) {
        Ok(Some(v)) => {
            let v = Arc::new(v);
            *slot = Some(v.clone());
            Ok(v)
        }
        Ok(None) => Err(fail(&SatError::AccessDenied(format!(
            "{what}: this process has no tenant key: set SAT_ABE_KEY to a tenant key file made \
             by `sat-abe keygen` (`{{rank}}` in the path is replaced by the process's rank), \
             or call sat_abe_load_key"
        )))),
        Err(e) => Err(fail(&SatError::Usage(format!(
            "{what}: SAT_ABE_KEY={} (rank {}): {}",
            std::env::var("SAT_ABE_KEY").unwrap_or_default(),
            c.rank(),
            reason(e)
        )))),
    }
}

/// Loads the tenant key file `path` for this process (a file `sat-abe
/// keygen` made): the key every protected call of this run uses, instead
/// of `SAT_ABE_KEY`'s. Call it inside the run (from the role function),
/// before the first protected call; the key is forgotten when the run ends
/// (`sat_bootstrap` returns, `sat_detach`). `SAT_ERR_ARGUMENT` for a NULL
/// path; `SAT_ERR_USAGE` for a file that cannot be read, is another kind
/// of key (the authority's) or is damaged (`sat_last_error` names the file
/// and why), and when this process already has its key for the run (a
/// process acts for one tenant).
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT, SAT_ERR_USAGE (see above).
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sat_abe_load_key(path: *const c_char) -> sat_status {
    boundary("sat_abe_load_key", || {
        if path.is_null() {
            return bad_argument(
                "sat_abe_load_key: path is NULL; give a tenant key file made by `sat-abe keygen`",
            );
        }
        // SAFETY: the caller gives a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(bytes));
        if let Err(s) = client() {
            return s;
        }
        let mut slot = slot();
        if let Some(v) = slot.as_ref() {
            return usage(&format!(
                "sat_abe_load_key: this process already has the key of tenant {:?} for this run \
                 (from an earlier sat_abe_load_key, or SAT_ABE_KEY at its first protected call); \
                 a process acts for one tenant: load the key once, before any protected call",
                v.tenant().certificate().tenant
            ));
        }
        match Vault::load(path) {
            Ok(v) => {
                *slot = Some(Arc::new(v));
                sat_status::SAT_OK
            }
            Err(e) => fail(&SatError::Usage(format!("sat_abe_load_key: {}", reason(e)))),
        }
    })
}

/// Takes the authority's revocation list at `path` (`sat-abe revoke`) for
/// this process, which runs on: from now on a version or a key epoch signed
/// under a certificate the list revokes is refused (`SAT_ERR_INTEGRITY`),
/// what this process decrypted before included, at its next read. A process
/// otherwise takes the list only with its key (`SAT_ABE_CRL`). A list
/// older than one this process took is refused (`SAT_ERR_INTEGRITY`):
/// revocations are never undone. `SAT_ERR_ARGUMENT` for a NULL path;
/// `SAT_ERR_USAGE` for a file that cannot be read or is not a list of this
/// authority, and without a key (load it first).
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT, SAT_ERR_USAGE,
/// SAT_ERR_ACCESS_DENIED (no key), SAT_ERR_INTEGRITY (see above).
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sat_abe_load_revocations(path: *const c_char) -> sat_status {
    const NAME: &str = "sat_abe_load_revocations";
    boundary(NAME, || {
        if path.is_null() {
            return bad_argument(&format!(
                "{NAME}: path is NULL; give the revocation list `sat-abe revoke` wrote"
            ));
        }
        // SAFETY: the caller gives a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(bytes));
        let c = match client() {
            Ok(c) => c,
            Err(s) => return s,
        };
        let v = match vault(NAME, &c) {
            Ok(v) => v,
            Err(s) => return s,
        };
        match v.load_revocations(path) {
            Ok(()) => sat_status::SAT_OK,
            Err(e) => fail(&e),
        }
    })
}

/// A policy argument: a C string, NULL and non-UTF-8 refused.
fn policy_text(call: &str, which: &str, p: *const c_char) -> Result<String, sat_status> {
    if p.is_null() {
        return Err(bad_argument(&format!(
            "{call}: the {which} policy is NULL; give one, such as \"tenant_a and writer\""
        )));
    }
    // SAFETY: a NUL-terminated C string from the caller.
    match unsafe { CStr::from_ptr(p) }.to_str() {
        Ok(s) => Ok(s.to_owned()),
        Err(_) => Err(bad_argument(&format!(
            "{call}: the {which} policy is not UTF-8"
        ))),
    }
}

/// Both policies, parsed (a malformed one is a usage error with the
/// parser's message).
fn protection(
    call: &str,
    read: *const c_char,
    write: *const c_char,
) -> Result<Protection, sat_status> {
    let read = policy_text(call, "read", read)?;
    let write = policy_text(call, "write", write)?;
    Protection::new(&read, &write)
        .map_err(|e| fail(&SatError::Usage(format!("{call}: {}", reason(e)))))
}

/// MALLOC of a protected chain: `size` plaintext bytes from chunk `baseid`
/// on, split as `sat_malloc` splits, readable by tenant keys whose
/// attributes satisfy `read_policy` and writable by those that satisfy
/// `write_policy` (`"(tenant_a and analyst) or admin"`: attributes, `and`,
/// `or`, parentheses). `chunk->data` is this process's plaintext and
/// `chunk->size` its size: read and write it inside scopes as for a plain
/// chain; the S-DSM only ever holds sealed versions. NULL `consistency`
/// means home-based MESI. Allocating the same chain again returns the same
/// handle; joining a chain another process created needs its write policy
/// (the read policy is the creator's). NULL on error: `SAT_ERR_ARGUMENT`
/// for a NULL policy, `SAT_ERR_USAGE` for a malformed one (the message
/// says where) or a chain that exists otherwise, `SAT_ERR_ACCESS_DENIED`
/// with no tenant key (`SAT_ABE_KEY`, `sat_abe_load_key`) or when this
/// tenant may not write under `write_policy`. A protected chain is in at
/// most one scope per process at a time: a thread that acquires it while
/// another thread of this process holds it waits for that scope's end.
///
/// Returns: NULL on error, with sat_last_status(): the statuses above, and
/// those of sat_malloc.
///
/// # Safety
/// The policies are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn sat_malloc_protected(
    consistency: *const sat_consistency_t,
    baseid: u64,
    size: usize,
    read_policy: *const c_char,
    write_policy: *const c_char,
) -> *mut sat_chunk_t {
    const CALL: &str = "MALLOC_PROTECTED";
    boundary("sat_malloc_protected", || {
        let Ok(protection) = protection(CALL, read_policy, write_policy) else {
            return std::ptr::null_mut();
        };
        let Ok(c) = client() else {
            return std::ptr::null_mut();
        };
        if let Err(e) = check_chain_size(size as u64) {
            fail(&e.into());
            return std::ptr::null_mut();
        }
        let layout = match ChainLayout::malloc(baseid, size, c.chunk_size()) {
            Ok(l) => l,
            Err(e) => {
                fail(&e.into());
                return std::ptr::null_mut();
            }
        };
        let ids: Vec<u64> = layout.chunks().iter().map(|&(id, _)| id).collect();
        let sizes: Vec<usize> = layout.chunks().iter().map(|&(_, s)| s).collect();
        let Ok(protocol) = protocol_of(CALL, consistency) else {
            return std::ptr::null_mut();
        };
        if let Some((h, inner)) = existing(&ids) {
            let has = match inner.protected() {
                None => Some("as a plain chain".to_string()),
                Some(_)
                    if !c
                        .label_of(ids[0])
                        .is_some_and(|l| label_has_write_policy(&l, &protection.write)) =>
                {
                    Some("protected under another write policy".to_string())
                }
                Some(_)
                    if inner.sizes() != sizes
                        || !inner.protocol().is_none_or(|p| p == protocol) =>
                {
                    Some(format!(
                        "protected, with {} bytes{}",
                        inner.sizes().iter().sum::<usize>(),
                        inner
                            .protocol()
                            .map_or(String::new(), |p| format!(" [{}]", p.name()))
                    ))
                }
                Some(_) => None,
            };
            let Some(has) = has else { return h };
            fail(&SatError::Usage(format!(
                "{CALL} of chunk {baseid} with {size} bytes [{}]: this process already has that \
                 chain {has}; allocate it with the same size, protocol and write policy, or \
                 LOOKUP it",
                protocol.name()
            )));
            return std::ptr::null_mut();
        }
        let Ok(v) = vault(&format!("{CALL} of chunk {baseid}"), &c) else {
            return std::ptr::null_mut();
        };
        match v.malloc(&c, protocol, baseid, size, &protection) {
            Ok(chain) => register_protected(Protected { chain, vault: v }, Some(protocol)),
            Err(e) => {
                fail(&e);
                std::ptr::null_mut()
            }
        }
    })
}

/// The handle of a protected chain this process looked up (`sealed`, in
/// memory of the C ABI); on failure the chain is given back, so that a
/// LOOKUP tried again (after `sat_abe_load_key`) starts afresh.
pub(crate) fn adopt(name: &str, c: &Client, sealed: Chain) -> *mut sat_chunk_t {
    let what = format!("{name} of protected chunk {}", sealed.first());
    let adopted = match vault(&what, c) {
        Ok(v) => v
            .adopt(c, sealed.clone())
            .map_err(|e| fail(&e))
            .map(|ch| (ch, v)),
        Err(s) => Err(s),
    };
    match adopted {
        Ok((chain, vault)) => register_protected(Protected { chain, vault }, None),
        Err(_) => {
            // The error is recorded; the memory goes back to the C ABI's
            // allocator (its Drop) once the store hands it back.
            if let Err(e) = c.unmap(&sealed) {
                tracing::debug!("{what}: the looked-up chain stays in the store: {e}");
            }
            std::ptr::null_mut()
        }
    }
}

/// Writes `size` bytes at `data` as the value of symbol `name`, sealed:
/// `sat_read_symbol` gives the bytes back to tenant keys whose attributes
/// satisfy `read_policy`, and `SAT_ERR_ACCESS_DENIED` to the others. The
/// value names its writer, checked against `write_policy` by readers; the
/// symbol table keeps no policy per name, so a tenant that may read the
/// symbol could replace it by a value under a write policy of its own (use
/// a protected chain where writers must be held to a fixed policy). Errors
/// as `sat_malloc_protected`'s. An empty value (`size` 0) may be given with
/// `data` NULL.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (NULL name or policy, NULL data
/// with a `size` above 0),
/// SAT_ERR_USAGE (a malformed policy, no tenant key, no run),
/// SAT_ERR_ACCESS_DENIED, SAT_ERR_INTEGRITY, SAT_ERR_TRANSPORT,
/// SAT_ERR_ABORTED.
///
/// # Safety
/// `name` and the policies are NUL-terminated strings; `data` holds
/// `size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn sat_write_symbol_protected(
    name: *const c_char,
    data: *const c_void,
    size: usize,
    read_policy: *const c_char,
    write_policy: *const c_char,
) -> sat_status {
    const CALL: &str = "writeSymbol (protected)";
    boundary("sat_write_symbol_protected", || {
        let name = match name_of(CALL, name) {
            Ok(n) => n,
            Err(s) => return s,
        };
        if data.is_null() && size > 0 {
            return bad_argument(&format!("{CALL}: data is NULL; give the bytes to write"));
        }
        let protection = match protection(CALL, read_policy, write_policy) {
            Ok(p) => p,
            Err(s) => return s,
        };
        let c = match client() {
            Ok(c) => c,
            Err(s) => return s,
        };
        let bytes = if size == 0 {
            &[][..]
        } else {
            // SAFETY: the caller gives `size` readable bytes at `data`.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }
        };
        let v = match vault(&format!("{CALL} of symbol {name:?}"), &c) {
            Ok(v) => v,
            Err(s) => return s,
        };
        match v.write_symbol(&c, &name, bytes, &protection) {
            Ok(()) => sat_status::SAT_OK,
            Err(e) => fail(&e),
        }
    })
}

/// What `sat_read_symbol` returns for the value it read: a sealed version
/// (its header parses) opened for this tenant; any other value as it is,
/// unless the symbol was ever written protected (then `SAT_ERR_INTEGRITY`:
/// plain bytes were written over it).
pub(crate) fn open_symbol(c: &Client, name: &str, value: Vec<u8>) -> Result<Vec<u8>, sat_status> {
    if !matches!(Header::parse(&value), Ok(Some(_))) {
        return sat_core::abe::vault::plain_symbol(c, name, value).map_err(|e| fail(&e));
    }
    let v = vault(&format!("readSymbol of protected symbol {name:?}"), c)?;
    v.open_symbol(c, name, &value).map_err(|e| fail(&e))
}

/// Starts a new key epoch for the protected chain `chunk`: its current
/// data is read (this tenant must be allowed to read it) and sealed again
/// as its next version under a fresh key, wrapped under `read_policy`
/// (NULL keeps the current read policy). Keys that do not satisfy the new
/// policy get `SAT_ERR_ACCESS_DENIED` on every version written from then
/// on: this is how a tenant's attribute is revoked. The chunk must not be
/// inside a scope of this process. `SAT_ERR_ARGUMENT` for a NULL chunk,
/// `SAT_ERR_USAGE` for a plain chunk or a malformed policy.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT, SAT_ERR_USAGE (see above),
/// SAT_ERR_ACCESS_DENIED, SAT_ERR_TRANSPORT.
///
/// # Safety
/// `chunk` comes from this library; `read_policy` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sat_abe_new_epoch(
    chunk: *mut sat_chunk_t,
    read_policy: *const c_char,
) -> sat_status {
    const CALL: &str = "sat_abe_new_epoch";
    boundary(CALL, || {
        // SAFETY: NULL-checked; handles come from this library.
        let inner = match crate::chunks::live(CALL, chunk) {
            Ok(i) => i,
            Err(s) => return s,
        };
        let read = if read_policy.is_null() {
            None
        } else {
            let text = match policy_text(CALL, "read", read_policy) {
                Ok(t) => t,
                Err(s) => return s,
            };
            match Policy::parse(&text) {
                Ok(p) => Some(p),
                Err(e) => return usage(&format!("{CALL}: the read policy {text:?}: {e}")),
            }
        };
        let Some(p) = inner.protected() else {
            let id = inner.first();
            return usage(&format!(
                "{CALL}: chunk {id} is not protected: only chains from sat_malloc_protected \
                 (or LOOKUPs of them) have key epochs"
            ));
        };
        let c = match client() {
            Ok(c) => c,
            Err(s) => return s,
        };
        match p.vault.new_epoch(&c, &p.chain, read.as_ref()) {
            Ok(()) => sat_status::SAT_OK,
            Err(e) => fail(&e),
        }
    })
}
