//! Consistency protocols defined in C and registered at run time (DSM-PM2's
//! protocols as tables of routines), chosen per allocation like the
//! built-in ones through the `sat_consistency_t` that registration returns.
//!
//! A protocol is the two sides of sat-core's protocols (`protocol/mod.rs`):
//! a home side, one per chunk in its home server, and a client side, one per
//! chunk in every process that holds it. Each side's state is plain bytes
//! the library allocates (zeroed, 8-byte aligned) and the routines keep;
//! the library copies them as bytes (a snapshot, put back when a request
//! cannot be sent), so they must not point into themselves or own memory.
//! The routines speak a small vocabulary of messages (`sat_protocol_msg`);
//! the library moves the chunk's bytes: a grant sent `SAT_PROTOCOL_WITH_DATA`
//! carries the home's last released version, a `SAT_PROTOCOL_RELEASE`
//! carries the writer's bytes, and the home keeps them once its routine
//! accepts the release (the version must be the next one, the size the
//! chunk's). A routine that refuses a message (a negative return) leaves
//! its state as it was; the message is dropped and logged.

use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::sync::{Arc, Mutex};

use sat_core::protocol::registry;
use sat_core::protocol::{
    Access, Acquire, ClientSide, Consistency, HomeSide, Join, LastRelease, Out, ProtocolId,
    ProtocolViolation, Reaction, ScopeError, State, ToClient, ToHome, Version,
};
use sat_core::Rank;

use crate::chunks::sat_consistency_t;
use crate::status::{bad_argument, boundary, fail, sat_status};

/// A client asks for a READ scope (`have`: the version it holds, if
/// `SAT_PROTOCOL_HAS_VERSION`).
pub const SAT_PROTOCOL_READ_REQ: u32 = 1;
/// A client asks for a WRITE or READWRITE scope (`SAT_PROTOCOL_WITH_DATA`:
/// it needs the data, READWRITE).
pub const SAT_PROTOCOL_WRITE_REQ: u32 = 2;
/// A write scope ends and publishes `version`; the bytes travel with it.
pub const SAT_PROTOCOL_RELEASE: u32 = 3;
/// An invalidation has been applied.
pub const SAT_PROTOCOL_INVAL_ACK: u32 = 4;
/// A read scope ends.
pub const SAT_PROTOCOL_READ_RELEASE: u32 = 5;
/// A write scope ends without publishing.
pub const SAT_PROTOCOL_ABORT: u32 = 6;
/// The home grants a READ scope at `version` (filled in by the library).
pub const SAT_PROTOCOL_READ_GRANT: u32 = 16;
/// The home grants a write scope at `version` (filled in by the library).
pub const SAT_PROTOCOL_WRITE_GRANT: u32 = 17;
/// The home asks a client to drop its copy.
pub const SAT_PROTOCOL_INVAL: u32 = 18;

/// `sat_protocol_msg.flags`: `version` is set (a request's "have").
pub const SAT_PROTOCOL_HAS_VERSION: u32 = 1;
/// `sat_protocol_msg.flags`: the chunk's data goes with a grant, or a write
/// request needs it.
pub const SAT_PROTOCOL_WITH_DATA: u32 = 2;

/// `client_acquire` returns it: the scope opens with no message.
pub const SAT_PROTOCOL_HIT: i32 = 0;
/// `client_acquire` returns it: send `*request` and wait for a grant.
pub const SAT_PROTOCOL_ASK: i32 = 1;
/// `client_on_message` and `client_release` return it (a bit): send
/// `*reply`.
pub const SAT_PROTOCOL_REPLY: i32 = 1;
/// `client_on_message` returns it (a bit): the bytes that came with the
/// message are the chunk's new content.
pub const SAT_PROTOCOL_TAKE_DATA: i32 = 2;

/// The access a client routine is asked for.
pub const SAT_ACCESS_READ: u32 = 0;
/// WRITE: exclusive, the data may be stale.
pub const SAT_ACCESS_WRITE: u32 = 1;
/// READWRITE: exclusive, with the current data.
pub const SAT_ACCESS_READWRITE: u32 = 2;

/// `sat_protocol_status.state`: no valid copy.
pub const SAT_PROTOCOL_INVALID: u32 = 0;
/// A valid copy that others may share.
pub const SAT_PROTOCOL_SHARED: u32 = 1;
/// The only copy, unchanged.
pub const SAT_PROTOCOL_EXCLUSIVE: u32 = 2;
/// The only copy, written.
pub const SAT_PROTOCOL_MODIFIED: u32 = 3;

/// `sat_protocol_status.flags`: a scope is open.
pub const SAT_PROTOCOL_IN_SCOPE: u32 = 1;
/// A write scope is open.
pub const SAT_PROTOCOL_WRITING: u32 = 2;
/// An acquire waits for the home.
pub const SAT_PROTOCOL_WAITING: u32 = 4;
/// `version` is the version of the bytes held.
pub const SAT_PROTOCOL_VERSIONED: u32 = 8;

/// One coherence message, as a protocol's routines see it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct sat_protocol_msg {
    /// One of `SAT_PROTOCOL_READ_REQ` ... `SAT_PROTOCOL_INVAL`.
    pub kind: u32,
    /// `SAT_PROTOCOL_HAS_VERSION`, `SAT_PROTOCOL_WITH_DATA`.
    pub flags: u32,
    pub version: u64,
}

/// What a client side says of itself.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct sat_protocol_status {
    /// `SAT_PROTOCOL_INVALID` ... `SAT_PROTOCOL_MODIFIED`.
    pub state: u32,
    /// `SAT_PROTOCOL_IN_SCOPE`, `SAT_PROTOCOL_WRITING`,
    /// `SAT_PROTOCOL_WAITING`, `SAT_PROTOCOL_VERSIONED`.
    pub flags: u32,
    /// The version of the bytes held (with `SAT_PROTOCOL_VERSIONED`).
    pub version: u64,
}

/// Where a home routine's messages go (`sat_protocol_send`).
pub struct sat_protocol_out {
    out: *mut Vec<Out<ToClient>>,
    last: *const LastRelease,
}

/// A protocol as a table of routines. Every routine must be set. Home
/// routines run in the chunk's home server, client routines in the process
/// that holds the chunk, each side's calls one at a time, inside SAT: a
/// routine must return without waiting, and call no SAT function but
/// `sat_protocol_send` and `sat_protocol_version`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sat_protocol_ops {
    /// Its name: 1 to 64 letters, digits, '-' or '_', not a built-in's.
    pub name: *const c_char,
    /// Bytes of state per chunk at its home, and in each client.
    pub home_state_size: usize,
    pub client_state_size: usize,
    /// Sets up a new chunk's home state (zeroed before).
    pub home_init: Option<unsafe extern "C" fn(state: *mut c_void, chunk_size: usize)>,
    /// A message from client `from`: 0 when handled (send answers with
    /// `sat_protocol_send`), negative to refuse it.
    pub home_on_message: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            from: u32,
            msg: *const sat_protocol_msg,
            out: *mut sat_protocol_out,
        ) -> i32,
    >,
    /// Client `client` has left the run: forget it, stop waiting for it.
    pub home_client_left:
        Option<unsafe extern "C" fn(state: *mut c_void, client: u32, out: *mut sat_protocol_out)>,
    /// Sets up a process's state for a chunk it has no copy of (zeroed before).
    pub client_init: Option<unsafe extern "C" fn(state: *mut c_void, chunk_size: usize)>,
    /// Opens a scope of `access` (`SAT_ACCESS_*`): `SAT_PROTOCOL_HIT`,
    /// `SAT_PROTOCOL_ASK` with `*request` filled, or negative (misuse).
    pub client_acquire: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            access: u32,
            request: *mut sat_protocol_msg,
        ) -> i32,
    >,
    /// A message from the home: `SAT_PROTOCOL_REPLY` and
    /// `SAT_PROTOCOL_TAKE_DATA` bits, or negative to refuse it.
    pub client_on_message: Option<
        unsafe extern "C" fn(
            state: *mut c_void,
            msg: *const sat_protocol_msg,
            reply: *mut sat_protocol_msg,
        ) -> i32,
    >,
    /// Ends a scope (`abort` non-zero: publishing nothing):
    /// `SAT_PROTOCOL_REPLY` with `*msg` to send, 0, or negative (no scope).
    pub client_release: Option<
        unsafe extern "C" fn(state: *mut c_void, abort: i32, msg: *mut sat_protocol_msg) -> i32,
    >,
    /// Fills `*status`.
    pub client_status:
        Option<unsafe extern "C" fn(state: *const c_void, status: *mut sat_protocol_status)>,
    /// Drops the copy to make room, if allowed (outside scopes and
    /// requests): non-zero when dropped.
    pub client_evict: Option<unsafe extern "C" fn(state: *mut c_void) -> i32>,
}

/// What registration checked: every routine is set.
#[derive(Clone, Copy)]
struct Routines {
    home_init: unsafe extern "C" fn(*mut c_void, usize),
    home_on_message: unsafe extern "C" fn(
        *mut c_void,
        u32,
        *const sat_protocol_msg,
        *mut sat_protocol_out,
    ) -> i32,
    home_client_left: unsafe extern "C" fn(*mut c_void, u32, *mut sat_protocol_out),
    client_init: unsafe extern "C" fn(*mut c_void, usize),
    client_acquire: unsafe extern "C" fn(*mut c_void, u32, *mut sat_protocol_msg) -> i32,
    client_on_message:
        unsafe extern "C" fn(*mut c_void, *const sat_protocol_msg, *mut sat_protocol_msg) -> i32,
    client_release: unsafe extern "C" fn(*mut c_void, i32, *mut sat_protocol_msg) -> i32,
    client_status: unsafe extern "C" fn(*const c_void, *mut sat_protocol_status),
    client_evict: unsafe extern "C" fn(*mut c_void) -> i32,
}

/// A protocol registered from C: sat-core's handlers over its routines.
struct CProtocol {
    id: ProtocolId,
    name: &'static str,
    home_words: usize,
    client_words: usize,
    routines: Routines,
}

/// Plain bytes of state, 8-byte aligned.
fn state(bytes: usize) -> Vec<u64> {
    vec![0u64; bytes.div_ceil(8)]
}

impl Consistency for CProtocol {
    fn id(&self) -> ProtocolId {
        self.id
    }
    fn new_home(&self, size: usize) -> Box<dyn HomeSide> {
        let mut home = CHome {
            protocol: self.name,
            state: state(self.home_words * 8),
            last: LastRelease::new(size),
            routines: self.routines,
        };
        // SAFETY: the state is the size the protocol asked for, zeroed.
        unsafe { (self.routines.home_init)(home.state.as_mut_ptr().cast(), size) };
        Box::new(home)
    }
    fn new_client(&self, size: usize) -> Box<dyn ClientSide> {
        let mut client = CClient {
            protocol: self.name,
            state: state(self.client_words * 8),
            routines: self.routines,
        };
        // SAFETY: as for the home.
        unsafe { (self.routines.client_init)(client.state.as_mut_ptr().cast(), size) };
        Box::new(client)
    }
}

struct CHome {
    protocol: &'static str,
    state: Vec<u64>,
    last: LastRelease,
    routines: Routines,
}

impl fmt::Debug for CHome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} home at version {}", self.protocol, self.last.version)
    }
}

fn to_c(msg: ToHome) -> Option<sat_protocol_msg> {
    let have = |v: Option<Version>| (v.map_or(0, |_| SAT_PROTOCOL_HAS_VERSION), v.unwrap_or(0));
    Some(match msg {
        ToHome::ReadReq { have: h } => {
            let (flags, version) = have(h);
            sat_protocol_msg {
                kind: SAT_PROTOCOL_READ_REQ,
                flags,
                version,
            }
        }
        ToHome::WriteReq { have: h, need_data } => {
            let (flags, version) = have(h);
            let data = if need_data { SAT_PROTOCOL_WITH_DATA } else { 0 };
            sat_protocol_msg {
                kind: SAT_PROTOCOL_WRITE_REQ,
                flags: flags | data,
                version,
            }
        }
        ToHome::Release { version } => sat_protocol_msg {
            kind: SAT_PROTOCOL_RELEASE,
            flags: 0,
            version,
        },
        ToHome::InvalAck => plain(SAT_PROTOCOL_INVAL_ACK),
        ToHome::ReadRelease => plain(SAT_PROTOCOL_READ_RELEASE),
        ToHome::Abort => plain(SAT_PROTOCOL_ABORT),
        _ => return None,
    })
}

fn plain(kind: u32) -> sat_protocol_msg {
    sat_protocol_msg {
        kind,
        flags: 0,
        version: 0,
    }
}

/// A client routine's message to the home, if it is one.
fn to_home(m: &sat_protocol_msg) -> Option<ToHome> {
    let have = (m.flags & SAT_PROTOCOL_HAS_VERSION != 0).then_some(m.version);
    Some(match m.kind {
        SAT_PROTOCOL_READ_REQ => ToHome::ReadReq { have },
        SAT_PROTOCOL_WRITE_REQ => ToHome::WriteReq {
            have,
            need_data: m.flags & SAT_PROTOCOL_WITH_DATA != 0,
        },
        SAT_PROTOCOL_RELEASE => ToHome::Release { version: m.version },
        SAT_PROTOCOL_INVAL_ACK => ToHome::InvalAck,
        SAT_PROTOCOL_READ_RELEASE => ToHome::ReadRelease,
        SAT_PROTOCOL_ABORT => ToHome::Abort,
        _ => return None,
    })
}

impl HomeSide for CHome {
    fn on_message(
        &mut self,
        from: Rank,
        msg: ToHome,
        data: Option<&[u8]>,
        out: &mut Vec<Out<ToClient>>,
    ) -> Result<(), ProtocolViolation> {
        let c = to_c(msg).ok_or(ProtocolViolation::Foreign(msg.name()))?;
        // A release is checked before the routine sees it: the routine
        // accepts it, and its bytes become the version, or nothing changes.
        let release = matches!(msg, ToHome::Release { .. });
        let mut next = None;
        if let ToHome::Release { version } = msg {
            let mut check = LastRelease {
                version: self.last.version,
                data: self.last.data.clone(),
            };
            check.apply(Some(from), from, version, data)?;
            next = Some(check);
        }
        let before = out.len();
        let mut handle = sat_protocol_out {
            out,
            last: next.as_ref().unwrap_or(&self.last),
        };
        // SAFETY: the state is the protocol's, `c` and `handle` live for the
        // call; `handle` is valid only inside it (documented).
        let r = unsafe {
            (self.routines.home_on_message)(self.state.as_mut_ptr().cast(), from, &c, &mut handle)
        };
        if r < 0 {
            out.truncate(before);
            return Err(ProtocolViolation::Refused {
                protocol: self.protocol,
                message: msg.name(),
            });
        }
        if release {
            self.last = next.expect("a release");
        }
        Ok(())
    }

    fn client_left(&mut self, client: Rank, out: &mut Vec<Out<ToClient>>) {
        let mut handle = sat_protocol_out {
            out,
            last: &self.last,
        };
        // SAFETY: as in on_message.
        unsafe {
            (self.routines.home_client_left)(self.state.as_mut_ptr().cast(), client, &mut handle)
        };
    }

    fn version(&self) -> Version {
        self.last.version
    }

    fn data(&self) -> &Arc<[u8]> {
        &self.last.data
    }

    fn owner(&self) -> Option<Rank> {
        None
    }
}

/// Sends `msg` to client `to` from a home routine: `SAT_PROTOCOL_READ_GRANT`
/// or `SAT_PROTOCOL_WRITE_GRANT` (the library sets its version to the last
/// release, which it carries with `SAT_PROTOCOL_WITH_DATA`) or
/// `SAT_PROTOCOL_INVAL`. `out` is the one the routine was given, valid
/// during its call only.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (a NULL argument, or a kind a home
/// does not send).
///
/// # Safety
/// `out` is the one a home routine was given, during that routine's call;
/// `msg` points to a message.
#[no_mangle]
pub unsafe extern "C" fn sat_protocol_send(
    out: *mut sat_protocol_out,
    to: u32,
    msg: *const sat_protocol_msg,
) -> sat_status {
    boundary("sat_protocol_send", || {
        if out.is_null() || msg.is_null() {
            return bad_argument("sat_protocol_send: NULL argument");
        }
        // SAFETY: non-NULL, given to the routine by the library (documented).
        let (out, m) = unsafe { (&mut *out, *msg) };
        let (list, last) = unsafe { (&mut *out.out, &*out.last) };
        let with_data = m.flags & SAT_PROTOCOL_WITH_DATA != 0;
        let version = last.version;
        let msg = match m.kind {
            SAT_PROTOCOL_READ_GRANT => ToClient::ReadGrant { version, with_data },
            SAT_PROTOCOL_WRITE_GRANT => ToClient::WriteGrant { version, with_data },
            SAT_PROTOCOL_INVAL => ToClient::Inval,
            other => {
                return bad_argument(&format!(
                    "sat_protocol_send: a home sends SAT_PROTOCOL_READ_GRANT, \
                     SAT_PROTOCOL_WRITE_GRANT or SAT_PROTOCOL_INVAL, not kind {other}"
                ))
            }
        };
        let data = (with_data && m.kind != SAT_PROTOCOL_INVAL).then(|| last.data.clone());
        list.push(Out { to, msg, data });
        sat_status::SAT_OK
    })
}

/// The version a home's chunk holds (its last release; 0: never written),
/// for a home routine deciding whether a grant needs the data.
///
/// Returns: the version; 0 for a NULL `out`.
///
/// # Safety
/// `out` is NULL or the one a home routine was given, during its call.
#[no_mangle]
pub unsafe extern "C" fn sat_protocol_version(out: *const sat_protocol_out) -> u64 {
    if out.is_null() {
        return 0;
    }
    // SAFETY: non-NULL, given to the routine by the library (documented).
    unsafe { (*(*out).last).version }
}

struct CClient {
    protocol: &'static str,
    state: Vec<u64>,
    routines: Routines,
}

impl fmt::Debug for CClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} client {:?}", self.protocol, self.status())
    }
}

impl CClient {
    fn status(&self) -> sat_protocol_status {
        let mut s = sat_protocol_status::default();
        // SAFETY: the state is the protocol's; `s` lives for the call.
        unsafe { (self.routines.client_status)(self.state.as_ptr().cast(), &mut s) };
        s
    }

    fn flag(&self, f: u32) -> bool {
        self.status().flags & f != 0
    }

    /// A client routine's message to the home, refused when it is not one.
    fn message(&self, m: &sat_protocol_msg, call: &'static str) -> Result<ToHome, ScopeError> {
        to_home(m).ok_or(ScopeError::Refused(self.protocol, call))
    }

    fn end(&mut self, abort: bool) -> Result<Option<ToHome>, ScopeError> {
        let mut m = sat_protocol_msg::default();
        // SAFETY: the state is the protocol's; `m` lives for the call.
        let r = unsafe {
            (self.routines.client_release)(self.state.as_mut_ptr().cast(), i32::from(abort), &mut m)
        };
        match r {
            r if r < 0 => Err(ScopeError::NotAcquired),
            0 => Ok(None),
            _ => self.message(&m, "release").map(Some),
        }
    }
}

impl ClientSide for CClient {
    fn acquire(&mut self, access: Access) -> Result<Acquire, ScopeError> {
        let a = match access {
            Access::Read => SAT_ACCESS_READ,
            Access::Write => SAT_ACCESS_WRITE,
            Access::ReadWrite => SAT_ACCESS_READWRITE,
        };
        let mut request = sat_protocol_msg::default();
        // SAFETY: the state is the protocol's; `request` lives for the call.
        let r = unsafe {
            (self.routines.client_acquire)(self.state.as_mut_ptr().cast(), a, &mut request)
        };
        match r {
            SAT_PROTOCOL_HIT => Ok(Acquire::Hit),
            SAT_PROTOCOL_ASK => self.message(&request, "acquire").map(Acquire::Request),
            _ => Err(ScopeError::Refused(self.protocol, "acquire")),
        }
    }

    fn on_message(
        &mut self,
        msg: ToClient,
        data: Option<&[u8]>,
    ) -> Result<Reaction, ProtocolViolation> {
        let c = match msg {
            ToClient::ReadGrant { version, with_data }
            | ToClient::WriteGrant { version, with_data } => sat_protocol_msg {
                kind: if matches!(msg, ToClient::ReadGrant { .. }) {
                    SAT_PROTOCOL_READ_GRANT
                } else {
                    SAT_PROTOCOL_WRITE_GRANT
                },
                flags: if with_data { SAT_PROTOCOL_WITH_DATA } else { 0 }
                    | SAT_PROTOCOL_HAS_VERSION,
                version,
            },
            ToClient::Inval => plain(SAT_PROTOCOL_INVAL),
            other => return Err(ProtocolViolation::Foreign(other.name())),
        };
        let mut reply = sat_protocol_msg::default();
        // SAFETY: the state is the protocol's; `c` and `reply` live for the call.
        let r = unsafe {
            (self.routines.client_on_message)(self.state.as_mut_ptr().cast(), &c, &mut reply)
        };
        let refused = ProtocolViolation::Refused {
            protocol: self.protocol,
            message: msg.name(),
        };
        if r < 0 {
            return Err(refused);
        }
        let take_data = r & SAT_PROTOCOL_TAKE_DATA != 0;
        if take_data && data.is_none() {
            return Err(ProtocolViolation::MissingData);
        }
        let reply = if r & SAT_PROTOCOL_REPLY != 0 {
            Some(to_home(&reply).ok_or(refused)?)
        } else {
            None
        };
        Ok(Reaction { reply, take_data })
    }

    fn release(&mut self) -> Result<Option<ToHome>, ScopeError> {
        self.end(false)
    }

    fn abort(&mut self) -> Result<Option<ToHome>, ScopeError> {
        self.end(true)
    }

    /// Other threads' readers wait: the routines see one scope at a time
    /// per process, as they were written to.
    fn join(&self) -> Join {
        Join::Wait
    }

    fn snapshot(&self) -> Box<dyn ClientSide> {
        Box::new(CClient {
            protocol: self.protocol,
            state: self.state.clone(),
            routines: self.routines,
        })
    }

    fn evict(&mut self) -> bool {
        // SAFETY: the state is the protocol's.
        unsafe { (self.routines.client_evict)(self.state.as_mut_ptr().cast()) != 0 }
    }

    fn state(&self) -> State {
        match self.status().state {
            SAT_PROTOCOL_SHARED => State::Shared,
            SAT_PROTOCOL_EXCLUSIVE => State::Exclusive,
            SAT_PROTOCOL_MODIFIED => State::Modified,
            _ => State::Invalid,
        }
    }

    fn version(&self) -> Option<Version> {
        let s = self.status();
        (s.flags & SAT_PROTOCOL_VERSIONED != 0).then_some(s.version)
    }

    fn in_scope(&self) -> bool {
        self.flag(SAT_PROTOCOL_IN_SCOPE)
    }

    fn writing(&self) -> bool {
        self.flag(SAT_PROTOCOL_WRITING)
    }

    fn waiting(&self) -> bool {
        self.flag(SAT_PROTOCOL_WAITING)
    }
}

/// The consistencies registered from C, handed out for the life of the
/// process (`protocol_of` in chunks.rs accepts them).
fn registered() -> &'static Mutex<Vec<&'static sat_consistency_t>> {
    static REGISTERED: Mutex<Vec<&'static sat_consistency_t>> = Mutex::new(Vec::new());
    &REGISTERED
}

/// Whether `consistency` is one that registration handed out; its protocol.
pub(crate) fn registered_protocol(consistency: *const sat_consistency_t) -> Option<ProtocolId> {
    let r = registered().lock().unwrap_or_else(|p| p.into_inner());
    r.iter()
        .find(|&&known| std::ptr::eq(known, consistency))
        .map(|known| known.protocol())
}

/// Registers the protocol `ops` describes (the table is copied) and writes
/// the `sat_consistency_t` to allocate chunks with it to `*consistency`
/// (static: never free it). Every process of the run must register the
/// same protocols in the same order, before `sat_bootstrap` (server
/// processes build the homes from them); a process that meets a chunk of
/// a protocol it has not registered refuses it, and a service's servers
/// (which run `satrun`) know only the built-in protocols. When every
/// process of a run shares one host, the homes keep versions in host slots,
/// which every protocol reaches the same way: the routines then run across
/// hosts, or with `SAT_HOST_SEGMENTS=off`.
///
/// Returns: SAT_OK, or SAT_ERR_ARGUMENT (a NULL argument or routine),
/// SAT_ERR_USAGE (a name that is empty, too long, a built-in's or already
/// registered; past 64 protocols).
///
/// # Safety
/// `ops` points to a table whose `name` is a NUL-terminated string and whose
/// routines follow the contract above; `consistency` is writable.
#[no_mangle]
pub unsafe extern "C" fn sat_protocol_register(
    ops: *const sat_protocol_ops,
    consistency: *mut *const sat_consistency_t,
) -> sat_status {
    boundary("sat_protocol_register", || {
        if ops.is_null() || consistency.is_null() {
            return bad_argument("sat_protocol_register: NULL argument");
        }
        // SAFETY: non-NULL; the caller passes a table (documented).
        let ops = unsafe { *ops };
        if ops.name.is_null() {
            return bad_argument("sat_protocol_register: ops->name is NULL");
        }
        // SAFETY: a NUL-terminated string (documented).
        let name = unsafe { CStr::from_ptr(ops.name) }
            .to_string_lossy()
            .into_owned();
        macro_rules! routine {
            ($f:ident) => {
                match ops.$f {
                    Some(f) => f,
                    None => {
                        return bad_argument(&format!(
                            "sat_protocol_register: protocol {name:?}: ops->{} is NULL; every \
                             routine must be set",
                            stringify!($f)
                        ))
                    }
                }
            };
        }
        let routines = Routines {
            home_init: routine!(home_init),
            home_on_message: routine!(home_on_message),
            home_client_left: routine!(home_client_left),
            client_init: routine!(client_init),
            client_acquire: routine!(client_acquire),
            client_on_message: routine!(client_on_message),
            client_release: routine!(client_release),
            client_status: routine!(client_status),
            client_evict: routine!(client_evict),
        };
        let (home_words, client_words) = (
            ops.home_state_size.div_ceil(8),
            ops.client_state_size.div_ceil(8),
        );
        let registered_name = name.clone();
        let id = match registry::register(&name, move |id| {
            Box::new(CProtocol {
                id,
                name: Box::leak(registered_name.into_boxed_str()),
                home_words,
                client_words,
                routines,
            })
        }) {
            Ok(id) => id,
            Err(e) => return fail(&e),
        };
        let handed: &'static sat_consistency_t = Box::leak(Box::new(sat_consistency_t::of(id)));
        registered()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handed);
        // SAFETY: non-NULL (checked).
        unsafe { *consistency = handed };
        sat_status::SAT_OK
    })
}
