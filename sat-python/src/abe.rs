//! The encryption layer (cargo feature `abe`) as the Python module uses it.
//!
//! One facade for both builds, so the rest of the module has no `cfg`:
//! with the feature, protected chains are the core's [`SecureChain`]s and
//! each client's tenant key is loaded once, from `SAT_ABE_KEY` at its first
//! protected call or by `Client.load_key`; without it, [`Secure`] has no
//! value and every protected call says the module was built without the
//! layer.

#[cfg(feature = "abe")]
pub(crate) use enabled::*;

#[cfg(not(feature = "abe"))]
pub(crate) use disabled::*;

/// Whether the module was built with the encryption layer.
pub(crate) const HAS_ABE: bool = cfg!(feature = "abe");

#[cfg(feature = "abe")]
mod enabled {
    use std::sync::Arc;

    use sat_core::abe::seal::Header;
    use sat_core::abe::{Policy, Protection, SecureChain, Vault};
    use sat_core::client::{Chain, Client};
    use sat_core::protocol::{Access, ProtocolId};
    use sat_core::SatError;

    pub(crate) type Secure = SecureChain;

    /// The client's vault, if it has one yet: each client (`sat.connect`,
    /// or the run's) has its own tenant key and caches, so two clients of
    /// one process may be two tenants, and a later session starts afresh.
    fn vault_of(c: &Client) -> Option<Arc<Vault>> {
        c.layer_state()
            .as_ref()
            .and_then(|state| state.clone().downcast::<Vault>().ok())
    }

    /// Loads the tenant key file `path` for client `c`.
    pub(crate) fn load_key(c: &Client, path: &str) -> Result<(), SatError> {
        let vault = Vault::load(std::path::Path::new(path))?;
        *c.layer_state() = Some(Arc::new(vault));
        Ok(())
    }

    fn vault(c: &Client) -> Result<Arc<Vault>, SatError> {
        if let Some(v) = vault_of(c) {
            return Ok(v);
        }
        match Vault::from_env(c.rank())? {
            Some(vault) => {
                let vault = Arc::new(vault);
                let mut slot = c.layer_state();
                // Another thread of this client may have loaded one first.
                if let Some(v) = slot
                    .as_ref()
                    .and_then(|s| s.clone().downcast::<Vault>().ok())
                {
                    return Ok(v);
                }
                *slot = Some(vault.clone());
                Ok(vault)
            }
            None => Err(SatError::AccessDenied(
                "this data is protected and this process has no tenant key: set SAT_ABE_KEY to \
                 a tenant key file (made by `sat-abe keygen`), or call client.load_key(path)"
                    .into(),
            )),
        }
    }

    fn protection(read: &str, write: &str) -> Result<Protection, SatError> {
        Protection::new(read, write)
    }

    pub(crate) fn malloc(
        c: &Client,
        protocol: ProtocolId,
        base: u64,
        size: usize,
        read: &str,
        write: &str,
    ) -> Result<Secure, SatError> {
        let p = protection(read, write)?;
        vault(c)?.malloc(c, protocol, base, size, &p)
    }

    pub(crate) fn malloc_lst(
        c: &Client,
        protocol: ProtocolId,
        ids: &[u64],
        sizes: &[usize],
        read: &str,
        write: &str,
    ) -> Result<Secure, SatError> {
        let p = protection(read, write)?;
        vault(c)?.malloc_lst(c, protocol, ids, sizes, &p)
    }

    /// The protected chain a looked-up chain is, None when it is plain. A
    /// chain with any protected chunk is protected (the layer refuses one
    /// that mixes them): otherwise a LOOKUP_LST that puts a plain chunk
    /// first would give the plain API over sealed bytes.
    pub(crate) fn adopt(c: &Client, chain: &Chain) -> Result<Option<Secure>, SatError> {
        if !c.any_labelled(chain) {
            return Ok(None);
        }
        vault(c)?.adopt(c, chain.clone()).map(Some)
    }

    pub(crate) fn acquire(c: &Client, s: &Secure, access: Access) -> Result<(), SatError> {
        vault(c)?.acquire(c, s, access)
    }

    pub(crate) fn release(c: &Client, s: &Secure) -> Result<(), SatError> {
        vault(c)?.release(c, s)
    }

    pub(crate) fn abort(c: &Client, s: &Secure) -> Result<(), SatError> {
        vault(c)?.abort(c, s)
    }

    pub(crate) fn with_data_mut<R>(
        s: &Secure,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, SatError> {
        s.with_data_mut(f)
    }

    pub(crate) fn with_data<R>(s: &Secure, f: impl FnOnce(&[u8]) -> R) -> Result<R, SatError> {
        s.with_data(f)
    }

    pub(crate) fn new_epoch(c: &Client, s: &Secure, read: Option<&str>) -> Result<(), SatError> {
        let read = read
            .map(|t| {
                Policy::parse(t).map_err(|e| SatError::Usage(format!("the read policy {t:?}: {e}")))
            })
            .transpose()?;
        vault(c)?.new_epoch(c, s, read.as_ref())
    }

    pub(crate) fn write_symbol(
        c: &Client,
        name: &str,
        data: &[u8],
        read: &str,
        write: &str,
    ) -> Result<(), SatError> {
        let p = protection(read, write)?;
        vault(c)?.write_symbol(c, name, data, &p)
    }

    /// A symbol's value as read: opened when it is a sealed version (see
    /// `Client.read_symbol`), else as it is, unless the symbol was ever
    /// written protected (an integrity error: plain bytes over it).
    pub(crate) fn open_symbol(c: &Client, name: &str, raw: Vec<u8>) -> Result<Vec<u8>, SatError> {
        if !matches!(Header::parse(&raw), Ok(Some(_))) {
            return sat_core::abe::vault::plain_symbol(c, name, raw);
        }
        vault(c)?.open_symbol(c, name, &raw)
    }

    pub(crate) fn ptr(s: &Secure) -> *mut u8 {
        s.as_ptr()
    }

    pub(crate) fn sealed(s: &Secure) -> Chain {
        s.sealed().clone()
    }

    pub(crate) fn size(s: &Secure) -> usize {
        s.size()
    }

    pub(crate) fn sizes(s: &Secure) -> Vec<usize> {
        s.sizes()
    }
}

#[cfg(not(feature = "abe"))]
mod disabled {

    use sat_core::client::{Chain, Client};
    use sat_core::protocol::{Access, ProtocolId};
    use sat_core::SatError;

    /// No protected chain exists in this build: nothing makes one (its
    /// field is private and never set), so the functions taking one are
    /// never called.
    #[derive(Clone)]
    pub(crate) struct Secure(());

    fn never(_: &Secure) -> ! {
        unreachable!("no protected chain exists without the feature `abe`")
    }

    fn absent() -> SatError {
        SatError::Usage(
            "this sat module was built without the encryption layer: rebuild it with the cargo \
             feature `abe` (maturin develop --features abe)"
                .into(),
        )
    }

    pub(crate) fn load_key(_c: &Client, _path: &str) -> Result<(), SatError> {
        Err(absent())
    }

    pub(crate) fn malloc(
        _c: &Client,
        _protocol: ProtocolId,
        _base: u64,
        _size: usize,
        _read: &str,
        _write: &str,
    ) -> Result<Secure, SatError> {
        Err(absent())
    }

    pub(crate) fn malloc_lst(
        _c: &Client,
        _protocol: ProtocolId,
        _ids: &[u64],
        _sizes: &[usize],
        _read: &str,
        _write: &str,
    ) -> Result<Secure, SatError> {
        Err(absent())
    }

    pub(crate) fn adopt(c: &Client, chain: &Chain) -> Result<Option<Secure>, SatError> {
        if !c.any_labelled(chain) {
            return Ok(None);
        }
        Err(absent())
    }

    pub(crate) fn acquire(_c: &Client, s: &Secure, _access: Access) -> Result<(), SatError> {
        never(s)
    }

    pub(crate) fn release(_c: &Client, s: &Secure) -> Result<(), SatError> {
        never(s)
    }

    pub(crate) fn abort(_c: &Client, s: &Secure) -> Result<(), SatError> {
        never(s)
    }

    pub(crate) fn with_data_mut<R>(
        s: &Secure,
        _f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, SatError> {
        never(s)
    }

    pub(crate) fn with_data<R>(s: &Secure, _f: impl FnOnce(&[u8]) -> R) -> Result<R, SatError> {
        never(s)
    }

    pub(crate) fn new_epoch(_c: &Client, s: &Secure, _read: Option<&str>) -> Result<(), SatError> {
        never(s)
    }

    pub(crate) fn write_symbol(
        _c: &Client,
        _name: &str,
        _data: &[u8],
        _read: &str,
        _write: &str,
    ) -> Result<(), SatError> {
        Err(absent())
    }

    pub(crate) fn open_symbol(_c: &Client, _name: &str, raw: Vec<u8>) -> Result<Vec<u8>, SatError> {
        Ok(raw)
    }

    pub(crate) fn ptr(s: &Secure) -> *mut u8 {
        never(s)
    }

    pub(crate) fn sealed(s: &Secure) -> Chain {
        never(s)
    }

    pub(crate) fn size(s: &Secure) -> usize {
        never(s)
    }

    pub(crate) fn sizes(s: &Secure) -> Vec<usize> {
        never(s)
    }
}
