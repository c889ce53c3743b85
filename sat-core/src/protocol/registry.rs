//! Protocols defined by the program at run time (DSM-PM2's idea: a protocol
//! is a set of routines, registered and then chosen per allocation like the
//! built-in ones).
//!
//! A registered protocol gets the next [`ProtocolId::User`] number, which
//! travels in MALLOC and in allocation answers like a built-in id. Every
//! process of a run must therefore register the same protocols in the same
//! order before it allocates or looks up a chunk of one: the homes (server
//! processes) build their side from it, the clients theirs. A process that
//! meets a number it has not registered refuses the chunk with an error
//! naming it (a home answers the MALLOC as refused); a service's servers,
//! which run `satrun` and no program code, know only the built-in
//! protocols.
//!
//! The registry only grows: an id, once given, names its protocol for the
//! life of the process, so a handler reached through an id never dangles.

use std::sync::{Mutex, OnceLock};

use super::{Consistency, ProtocolId};
use crate::error::{SatError, SatResult};

/// Protocols one process may register.
pub const MAX_USER_PROTOCOLS: usize = 64;

struct Registered {
    name: &'static str,
    handlers: &'static dyn Consistency,
}

fn registry() -> &'static Mutex<Vec<Registered>> {
    static REGISTRY: OnceLock<Mutex<Vec<Registered>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(Vec::new()))
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Registered>> {
    registry().lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers a protocol under `name` (its short name: what the debug stream,
/// the statistics and Python's `protocol=` use); `make` builds its handlers
/// given the id it gets. Errors: an empty or taken name (built-in ones
/// included), or more than [`MAX_USER_PROTOCOLS`].
pub fn register(
    name: &str,
    make: impl FnOnce(ProtocolId) -> Box<dyn Consistency>,
) -> SatResult<ProtocolId> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return Err(SatError::Usage(format!(
            "protocol name {name:?}: give 1 to 64 letters, digits, '-' or '_'"
        )));
    }
    if ProtocolId::ALL.iter().any(|p| p.short_name() == name) {
        return Err(SatError::Usage(format!(
            "protocol name {name:?} is a built-in protocol's: choose another"
        )));
    }
    let mut r = lock();
    if r.iter().any(|p| p.name == name) {
        return Err(SatError::Usage(format!(
            "protocol {name:?} is registered already in this process"
        )));
    }
    if r.len() >= MAX_USER_PROTOCOLS {
        return Err(SatError::Usage(format!(
            "protocol {name:?}: a process may register at most {MAX_USER_PROTOCOLS} protocols"
        )));
    }
    let id = ProtocolId::User(r.len() as u16);
    // Leaked on purpose: ids are handed out for the life of the process.
    let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
    let handlers: &'static dyn Consistency = Box::leak(make(id));
    r.push(Registered { name, handlers });
    tracing::debug!("protocol {name:?} registered as {id:?}");
    Ok(id)
}

/// The handlers of user protocol `n`, if this process registered it.
pub(super) fn handlers(n: u16) -> Option<&'static dyn Consistency> {
    lock().get(n as usize).map(|p| p.handlers)
}

/// The name user protocol `n` was registered with.
pub(super) fn name(n: u16) -> Option<&'static str> {
    lock().get(n as usize).map(|p| p.name)
}

/// The id of the user protocol registered as `name`.
pub(super) fn find(name: &str) -> Option<ProtocolId> {
    lock()
        .iter()
        .position(|p| p.name == name)
        .map(|n| ProtocolId::User(n as u16))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::home_only::HomeOnly;

    struct AsHomeOnly(ProtocolId);

    impl Consistency for AsHomeOnly {
        fn id(&self) -> ProtocolId {
            self.0
        }
        fn new_home(&self, size: usize) -> Box<dyn crate::protocol::HomeSide> {
            HomeOnly.new_home(size)
        }
        fn new_client(&self, size: usize) -> Box<dyn crate::protocol::ClientSide> {
            HomeOnly.new_client(size)
        }
    }

    #[test]
    fn a_registered_protocol_is_found_by_id_and_name_and_names_are_checked() {
        let id = register("registry-test", |id| Box::new(AsHomeOnly(id))).unwrap();
        assert!(matches!(id, ProtocolId::User(_)));
        assert!(id.known());
        assert_eq!(id.short_name(), "registry-test");
        assert_eq!(id.name(), "registry-test");
        assert_eq!(ProtocolId::from_short_name("registry-test"), Some(id));
        assert_eq!(id.consistency().id(), id);
        let refused = |name: &str, says: &str| {
            let e = register(name, |id| Box::new(AsHomeOnly(id)))
                .expect_err(name)
                .to_string();
            assert!(e.contains(says), "{name:?}: {e}");
        };
        refused("registry-test", "registered already");
        refused("mesi", "built-in");
        refused("", "letters");
        refused("a b", "letters");
        refused(&"x".repeat(65), "letters");
        // An id no process registered is unknown, and says what to do.
        let stranger = ProtocolId::User(MAX_USER_PROTOCOLS as u16);
        assert!(!stranger.known());
        assert!(stranger
            .unknown_error("MALLOC of chunk 5")
            .to_string()
            .contains("register the same protocols, in the same order"));
    }
}
