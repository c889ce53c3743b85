//! The encryption layer at run time: a tenant's [`Vault`] between the
//! application and the S-DSM.
//!
//! A **protected chain** ([`SecureChain`]) is two things: the chain of
//! sealed chunks the S-DSM keeps (each chunk [`seal::sealed_len`] bytes
//! for its plaintext, labelled at its home with the digest of the
//! write policy), and a plaintext buffer in this process, where the
//! application reads and writes inside scopes as it would in a plain chain.
//!
//! - **Acquire** (READ, READWRITE): the sealed chunks are acquired through
//!   the usual protocol; each version is checked (writer certificate, write
//!   policy, signature, no older version than one already seen) and
//!   decrypted into the plaintext buffer. A version already decrypted here
//!   is not decrypted again, so a read hit costs what a plain read hit does.
//!   WRITE acquires without decrypting (its data may be stale, as in SAT).
//! - **Release** after a write: every chunk is sealed again, as version
//!   n + 1, and released; what travels and what the homes keep is
//!   ciphertext only.
//!
//! Epoch records and certificates travel through the symbol table, under
//! names starting with `sat.abe/`. Both are signed and checked on arrival,
//! so a tenant that overwrites one can make reads fail, never succeed with
//! data it chose.
//!
//! # Semantics where the SAT report is silent
//!
//! - A protected chunk never written reads as zeros, as a plain one does.
//!   MALLOC seals a first version of zeros right away, so this is only seen
//!   by a process that looks the chunk up in the moment between the home's
//!   allocation and that first version.
//! - A process that only looked a chain up and writes it before its creator
//!   sealed the first version waits for that version (it needs the epoch the
//!   creator chose), up to [`Vault::WAIT`].
//! - The read policy given to a MALLOC that joins an existing protected
//!   chain is not used; the write policy must be the chain's own, or the
//!   MALLOC is refused as one of another size is.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::keys::{Certificate, KeyError, RevocationList, TenantKey};
use super::seal::{self, Aead, Cover, EpochRecord, Header, Kek, Object, SealError, SealKey};
use super::{Abe, AbeError, Ac17, Policy};
use crate::chunk::{ChainLayout, ChunkId, Label, NO_LABEL};
use crate::client::{Chain, Client};
use crate::error::{SatError, SatResult};
use crate::protocol::{Access, ProtocolId};

/// The read and write policies of protected data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protection {
    pub read: Policy,
    pub write: Policy,
}

impl Protection {
    /// Parses both policies (`(tenant_a and analyst) or admin`).
    pub fn new(read: &str, write: &str) -> SatResult<Protection> {
        let parse = |which: &str, text: &str| {
            Policy::parse(text)
                .map_err(|e| SatError::Usage(format!("the {which} policy {text:?}: {e}")))
        };
        Ok(Protection {
            read: parse("read", read)?,
            write: parse("write", write)?,
        })
    }
}

fn key_error(e: KeyError) -> SatError {
    SatError::Usage(format!("the tenant key: {e}"))
}

fn abe_error(what: &str, e: AbeError) -> SatError {
    match e {
        AbeError::AccessDenied { .. } => SatError::AccessDenied(format!("{what}: {e}")),
        AbeError::Policy(_) => SatError::Usage(format!("{what}: {e}")),
        _ => SatError::Integrity(format!("{what}: {e}")),
    }
}

/// Whether two policies say the same (one may be as a user wrote it, the
/// other as a record normalized it).
fn same(a: &Policy, b: &Policy) -> bool {
    a.to_pairs() == b.to_pairs()
}

/// The parents of a new epoch over versions with `headers`: each chunk's
/// newest epoch, the one its home takes a new epoch over.
fn parents(headers: &[Option<Header>]) -> Vec<u64> {
    headers.iter().map(|h| h.map_or(0, |h| h.epoch)).collect()
}

/// The most key epochs a reader walks back through to check a chunk's line
/// ([`Vault::check_lineage`]): as many as a home keeps in a chunk's line (a
/// KEK lifetime of an hour makes 8,760 a year).
const MAX_LINEAGE: usize = crate::server::epochs::MAX_EPOCHS;

fn seal_error(what: &str, e: SealError) -> SatError {
    SatError::Integrity(format!("{what}: {e}"))
}

/// A verified epoch record, with its KEK once unwrapped (or made) here.
struct Epoch {
    record: EpochRecord,
    digest: [u8; 32],
    read: Policy,
    write: Policy,
    kek: Option<Kek>,
}

/// What checking an epoch's line of parents found, for one object.
#[derive(Clone)]
struct Lineage {
    /// Who may read versions sealed after this epoch: its read policy, or
    /// the one before it when it was refused; None when the line before
    /// it cannot be verified.
    read_after: Option<Policy>,
    /// Why the epoch may not say who reads, if it may not.
    refused: Option<String>,
}

#[derive(Default)]
struct VaultState {
    /// Verified records, by epoch id.
    epochs: HashMap<u64, Arc<Epoch>>,
    /// Certificates checked against the authority, by id.
    certs: HashMap<[u8; 32], Arc<Certificate>>,
    /// The newest version seen of each chunk: an older one is a replay.
    newest: HashMap<ChunkId, u64>,
    /// (epoch, object) pairs whose line of parents was checked
    /// ([`Vault::check_lineage`]).
    lineage: HashMap<(u64, Object), Lineage>,
    /// The epoch of the newest version of each chunk this process opened
    /// or sealed: where a writer takes the chain's policies from when the
    /// chunk was written over.
    current: HashMap<ChunkId, Arc<Epoch>>,
    /// The epoch this process seals each symbol under.
    symbol_epochs: HashMap<String, u64>,
    /// The symbols this process has marked protected ([`protected_mark`]).
    marked: std::collections::HashSet<String>,
    /// The protected chains of this process, by their chunk ids: the same
    /// chain allocated or looked up again is the same plaintext.
    chains: HashMap<Vec<ChunkId>, SecureChain>,
    published: bool,
    /// The authority's newest revocation list given to this vault.
    revocations: Option<RevocationList>,
}

/// One tenant's keys and caches; one per process is enough.
pub struct Vault {
    /// Unique in the process: a chain's plaintext checked by another vault
    /// (another tenant's key) is checked again by this one.
    id: u64,
    key: TenantKey,
    abe: Ac17,
    aead: Aead,
    kek_lifetime: Option<Duration>,
    state: Mutex<VaultState>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault")
            .field("tenant", &self.key.certificate().tenant)
            .field("aead", &self.aead)
            .field("kek_lifetime", &self.kek_lifetime)
            .finish_non_exhaustive()
    }
}

/// Plaintext memory: zeroed, 64-byte aligned, never moved, so that C and
/// Python can hold its address for the whole run.
struct PlainMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: plain bytes; access is ordered by scopes, as for chain data.
unsafe impl Send for PlainMemory {}
unsafe impl Sync for PlainMemory {}

impl PlainMemory {
    fn new(len: usize) -> SatResult<PlainMemory> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 64)
            .map_err(|e| SatError::Usage(format!("a plaintext buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| {
            SatError::Usage(format!("cannot allocate a plaintext buffer of {len} bytes"))
        })?;
        Ok(PlainMemory { ptr, len })
    }
}

impl Drop for PlainMemory {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len.max(1), 64).expect("valid");
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

type Decrypted = (Option<crate::protocol::mesi::Version>, u64, u64, [u8; 12]);

/// What a scope on a protected chain remembers between acquire and release.
#[derive(Default)]
struct ChainState {
    access: Option<Access>,
    /// The thread whose scope it is (from the start of its acquire): another
    /// thread waits for the scope's end, as with a plain chain.
    holder: Option<std::thread::ThreadId>,
    /// Each chunk's header when the scope opened (None: never written).
    headers: Vec<Option<Header>>,
    /// What each chunk's plaintext was decrypted from: the local copy's
    /// coherence version and the sealed version's (epoch, version, nonce).
    /// A read whose copy still has that coherence version is a hit and is
    /// not checked again; any write in between (even one that kept the
    /// header, as a flipped byte does) gives the copy another version, so
    /// the new bytes are checked in full.
    decrypted: Vec<Option<Decrypted>>,
    /// Who checked those: the vault's id and the revocation list it had. A
    /// hit is one only for the same: another tenant's key must pass the
    /// read policy itself, and a newer list may revoke a version's signer.
    checked_by: (u64, Option<u64>),
}

struct SecureInner {
    sealed: Chain,
    /// The plaintext layout (same ids, sizes less the overhead).
    plain: ChainLayout,
    memory: PlainMemory,
    label: Label,
    /// The policies this process allocated the chain with (None after a
    /// LOOKUP: they then come from the chain's epoch records).
    protection: Option<Protection>,
    state: Mutex<ChainState>,
    /// Signalled when a scope ends.
    scope_ended: std::sync::Condvar,
}

/// A protected chain: its plaintext, in this process.
#[derive(Clone)]
pub struct SecureChain {
    inner: Arc<SecureInner>,
}

impl std::fmt::Debug for SecureChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureChain")
            .field("first", &self.first())
            .field("size", &self.size())
            .finish_non_exhaustive()
    }
}

impl SecureChain {
    pub fn first(&self) -> ChunkId {
        self.inner.plain.chunks()[0].0
    }

    /// The chain's plaintext size.
    pub fn size(&self) -> usize {
        self.inner.plain.total_size()
    }

    pub fn len(&self) -> usize {
        self.inner.plain.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.plain.is_empty()
    }

    pub fn ids(&self) -> impl Iterator<Item = ChunkId> + '_ {
        self.inner.sealed.ids()
    }

    /// Plaintext sizes of the chunks, in chain order.
    pub fn sizes(&self) -> Vec<usize> {
        self.inner.plain.chunks().iter().map(|&(_, s)| s).collect()
    }

    /// The chain of sealed chunks in the S-DSM.
    pub fn sealed(&self) -> &Chain {
        &self.inner.sealed
    }

    /// The plaintext's address, fixed for the chain's life: what C's
    /// `chunk->data` and Python's buffers point to. Its bytes are the
    /// chain's data inside a scope only.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.memory.ptr.as_ptr()
    }

    fn scope_access(&self) -> Option<Access> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .access
    }

    /// Runs `f` on the plaintext inside a scope.
    pub fn with_data<R>(&self, f: impl FnOnce(&[u8]) -> R) -> SatResult<R> {
        if self.scope_access().is_none() {
            return Err(SatError::Usage(format!(
                "the protected chain at chunk {} is read outside a scope: acquire it first",
                self.first()
            )));
        }
        // SAFETY: the buffer holds `len` bytes for the chain's life; the
        // scope orders this access with the layer's own.
        Ok(f(unsafe {
            std::slice::from_raw_parts(self.as_ptr(), self.inner.memory.len)
        }))
    }

    /// Runs `f` on the plaintext inside a WRITE or READWRITE scope.
    pub fn with_data_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> SatResult<R> {
        match self.scope_access() {
            Some(a) if a.exclusive() => {}
            _ => {
                return Err(SatError::Usage(format!(
                    "the protected chain at chunk {} is written outside a WRITE or READWRITE \
                     scope: acquire it for writing first",
                    self.first()
                )))
            }
        }
        // SAFETY: as in `with_data`, and the scope is exclusive.
        Ok(f(unsafe {
            std::slice::from_raw_parts_mut(self.as_ptr(), self.inner.memory.len)
        }))
    }

    // The plaintext is shared memory in the S-DSM's sense: its accesses
    // are ordered by scopes, not by Rust borrows (C and Python hold its
    // address for the whole run).
    #[allow(clippy::mut_from_ref)]
    fn plain_mut(&self, i: usize) -> &mut [u8] {
        let r = self.inner.plain.range(i);
        // SAFETY: inside the buffer; called by the layer inside a scope it
        // holds, one chunk at a time.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr().add(r.start), r.len()) }
    }
}

/// Symbol-table names of the layer's own records.
/// The symbol whose presence says that symbol `name` has been written
/// protected: from then on a value under `name` that is not a sealed
/// version was written over it through the plain API ([`plain_symbol`]).
/// Named by a digest, so that any legal name has a legal mark.
fn protected_mark(name: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(name.as_bytes());
    format!("sat.abe/protected/{}", super::keys::hex(&digest[..16]))
}

/// What a reader of symbol `name` gets for `value`, a value that is not a
/// sealed version: the value itself, unless the symbol has ever been
/// written protected, which makes it an integrity error (plain bytes over
/// a protected symbol are someone's forgery, not the writer's data). The C
/// and Python reads of symbols go through it; it needs no tenant key.
pub fn plain_symbol(client: &Client, name: &str, value: Vec<u8>) -> SatResult<Vec<u8>> {
    match client.read_symbol(&protected_mark(name), Duration::ZERO) {
        Ok(_) => Err(SatError::Integrity(format!(
            "symbol {name:?} is protected, but its value is not a sealed version: it was \
             written over through the plain API"
        ))),
        Err(SatError::Timeout(_)) => Ok(value),
        Err(e) => Err(e),
    }
}

/// The anchor of protected symbol `name`: an 8-byte chunk in the range the
/// symbol table reserves for it, picked by a digest of the name. Every
/// protected write of the name publishes it once, holding it while the
/// value is written, and seals the value with the number of that release;
/// a reader takes a value only if it bears the anchor's number (or, read
/// again, a newer one). Chunk versions are the homes' to advance, so no
/// write through the plain API turns an anchor back: an older sealed value
/// put back bears an older number than its anchor.
fn symbol_anchor(name: &str) -> ChunkId {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(name.as_bytes());
    let pick = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
    crate::client::ANCHORS_BASE + pick % crate::client::ANCHORS
}

/// An anchor's size: it holds the number of its last release.
const ANCHOR_SIZE: usize = 8;

fn epoch_name(epoch: u64) -> String {
    format!("sat.abe/epoch/{epoch:016x}")
}

fn cert_name(id: &[u8; 32]) -> String {
    format!("sat.abe/cert/{}", super::keys::hex(id))
}

impl Vault {
    /// How long the layer waits for a record or certificate that a version
    /// names (they are written before the version, so this is a bound for
    /// the lost, not a delay of the living), and for a creator's first
    /// version.
    pub const WAIT: Duration = Duration::from_secs(10);

    /// A vault for `key`. The AEAD is [`Aead::preferred`]; KEKs live until
    /// an explicit new epoch unless `SAT_ABE_KEK_LIFETIME` (seconds) is set.
    pub fn new(key: TenantKey) -> Vault {
        let kek_lifetime = std::env::var("SAT_ABE_KEK_LIFETIME")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| *s >= 0.0)
            .map(Duration::from_secs_f64);
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Vault {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            key,
            abe: Ac17,
            aead: Aead::preferred(),
            kek_lifetime,
            state: Mutex::new(VaultState::default()),
        }
    }

    /// A vault for the tenant key file `path`, with the revocation list
    /// `SAT_ABE_CRL` names, if set.
    pub fn load(path: &std::path::Path) -> SatResult<Vault> {
        let vault = TenantKey::load(path).map(Vault::new).map_err(key_error)?;
        // Empty is unset, as for every variable (README, "Environment").
        if let Some(crl) = std::env::var("SAT_ABE_CRL")
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            // Said as the list's error, not the key's: the key was fine.
            vault
                .load_revocations(std::path::Path::new(&crl))
                .map_err(|e| match e {
                    SatError::Usage(why) => SatError::Usage(format!(
                        "the revocation list SAT_ABE_CRL names ({crl}): {why}; give the list \
                         `sat-abe revoke` wrote, or unset SAT_ABE_CRL"
                    )),
                    other => other,
                })?;
        }
        Ok(vault)
    }

    /// Takes the authority's revocation list at `path` (`sat-abe revoke`):
    /// from now on a version or an epoch signed under a revoked
    /// certificate is refused as an integrity error. A list older than one
    /// this vault has is refused: revocations are never undone.
    pub fn load_revocations(&self, path: &std::path::Path) -> SatResult<()> {
        let list = RevocationList::load(path, self.key.authority())
            .map_err(|e| SatError::Usage(format!("the revocation list: {e}")))?;
        // The newest list of this authority the process took, whichever
        // vault (client) took it: "a process refuses a list older than one
        // it took" (docs/ENCRYPTION.md), so a second client of the same
        // process cannot bring back a revoked tenant with an old list.
        static NEWEST: Mutex<Vec<([u8; 32], u64)>> = Mutex::new(Vec::new());
        let authority = self.key.authority().verifying;
        let mut newest = NEWEST.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = self.lock();
        let have = newest
            .iter()
            .find(|(a, _)| *a == authority)
            .map(|&(_, s)| s)
            .into_iter()
            .chain(st.revocations.as_ref().map(|l| l.sequence))
            .max();
        if let Some(have) = have {
            if list.sequence < have {
                return Err(SatError::Integrity(format!(
                    "{}: revocation list {} is older than list {} this process already took: an \
                     old list cannot undo a revocation",
                    path.display(),
                    list.sequence,
                    have
                )));
            }
        }
        match newest.iter_mut().find(|(a, _)| *a == authority) {
            Some(entry) => entry.1 = entry.1.max(list.sequence),
            None => newest.push((authority, list.sequence)),
        }
        st.revocations = Some(list);
        Ok(())
    }

    /// A vault for the key file named by `SAT_ABE_KEY`, None when unset.
    /// `{rank}` in the path is replaced by `rank`, so that one launch can
    /// give each process of a run its own tenant's key.
    pub fn from_env(rank: u32) -> SatResult<Option<Vault>> {
        match std::env::var("SAT_ABE_KEY")
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            None => Ok(None),
            Some(p) => {
                let p = p.replace("{rank}", &rank.to_string());
                Vault::load(std::path::Path::new(&p)).map(Some)
            }
        }
    }

    /// Chooses the AEAD of the versions this process seals (the trade-off
    /// knob: see docs/ENCRYPTION.md).
    pub fn set_aead(&mut self, aead: Aead) {
        self.aead = aead;
    }

    /// Sets how long a KEK is used for new versions before a writer starts
    /// a new epoch (None: until an explicit [`Vault::new_epoch`]).
    pub fn set_kek_lifetime(&mut self, lifetime: Option<Duration>) {
        self.kek_lifetime = lifetime;
    }

    pub fn tenant(&self) -> &TenantKey {
        &self.key
    }

    fn lock(&self) -> MutexGuard<'_, VaultState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ---- allocation ----

    /// MALLOC of a protected chain: `size` plaintext bytes from chunk
    /// `base` on, split by the client's chunk size, readable by keys that
    /// satisfy `protection.read` and writable by certificates that satisfy
    /// `protection.write`.
    pub fn malloc(
        &self,
        client: &Client,
        protocol: ProtocolId,
        base: ChunkId,
        size: usize,
        protection: &Protection,
    ) -> SatResult<SecureChain> {
        crate::chunk::check_chain_size(size as u64)?;
        let plain = ChainLayout::malloc(base, size, client.chunk_size())?;
        self.allocate(client, protocol, plain, protection)
    }

    /// MALLOC_LST of a protected chain (sizes are plaintext sizes).
    pub fn malloc_lst(
        &self,
        client: &Client,
        protocol: ProtocolId,
        ids: &[ChunkId],
        sizes: &[usize],
        protection: &Protection,
    ) -> SatResult<SecureChain> {
        let plain = ChainLayout::malloc_lst(ids, sizes)?;
        self.allocate(client, protocol, plain, protection)
    }

    fn allocate(
        &self,
        client: &Client,
        protocol: ProtocolId,
        plain: ChainLayout,
        protection: &Protection,
    ) -> SatResult<SecureChain> {
        let ids: Vec<ChunkId> = plain.chunks().iter().map(|&(id, _)| id).collect();
        let sealed_sizes: Vec<usize> = plain
            .chunks()
            .iter()
            .map(|&(_, s)| seal::sealed_len(s))
            .collect();
        // Refused before anything is allocated: chunks allocated by a
        // tenant that cannot seal their first version would be left with
        // none, and every writer after it would wait for one.
        if !self.key.certificate().satisfies(&protection.write) {
            return Err(SatError::AccessDenied(format!(
                "MALLOC of protected chunk {}: tenant {:?} with attributes {:?} may not write \
                 data whose write policy is {}",
                ids[0],
                self.key.certificate().tenant,
                self.key.attributes(),
                protection.write
            )));
        }
        let label = self.label_to_join(client, &ids, protection)?;
        let sealed = client.malloc_lst_labelled(protocol, &ids, &sealed_sizes, label)?;
        // Allocated or looked up here before: the same chain, one plaintext.
        // (A chain looked up was allocated by another process, which seals
        // its first versions.)
        if let Some(known) = self.known(&ids) {
            return Ok(known);
        }
        let chain = SecureChain::new(sealed, plain, label, Some(protection.clone()))?;
        self.seal_first_versions(client, &chain)?;
        self.lock().chains.insert(ids, chain.clone());
        Ok(chain)
    }

    /// The label a MALLOC of chain `ids` gives: the existing chain's when
    /// another tenant created it with the same write policy (it is that
    /// chain's owner), else one naming this tenant as the owner.
    fn label_to_join(
        &self,
        client: &Client,
        ids: &[ChunkId],
        protection: &Protection,
    ) -> SatResult<Label> {
        let mine = seal::chunk_label(&protection.write, &self.key.certificate().tenant);
        let existing = match client.label_of(ids[0]) {
            Some(l) => Some(l),
            // Not known here: a LOOKUP that does not wait says whether the
            // chain exists (a MALLOC elsewhere at the same time is then
            // told apart by its home: the label differs).
            None => match client.lookup_lst(ids, Duration::ZERO) {
                Ok(_) => client.label_of(ids[0]),
                Err(SatError::Timeout(_)) => None,
                Err(e) => return Err(e),
            },
        };
        Ok(match existing {
            Some(l)
                if l != crate::chunk::NO_LABEL
                    && seal::label_has_write_policy(&l, &protection.write) =>
            {
                // Another tenant's chain: its owner's read policy decides
                // who reads what this process writes, not this MALLOC's. A
                // tenant that took the ids first would read it: say so.
                if l != mine {
                    tracing::warn!(
                        "MALLOC of protected chunk {}: the chain exists, created by another \
                         tenant with the same write policy; this process joins it, and the \
                         chain's read policy decides who reads what it writes, not this MALLOC's \
                         ({}); if the chain should be this tenant's own, choose other chunk ids",
                        ids[0],
                        protection.read
                    );
                }
                l
            }
            _ => mine,
        })
    }

    /// The chain with exactly these ids, if this process has it.
    fn known(&self, ids: &[ChunkId]) -> Option<SecureChain> {
        self.lock().chains.get(ids).cloned()
    }

    /// LOOKUP of a protected chain: chunks `ids`, waiting at most `timeout`
    /// for them to be allocated.
    pub fn lookup_lst(
        &self,
        client: &Client,
        ids: &[ChunkId],
        timeout: Duration,
    ) -> SatResult<SecureChain> {
        let sealed = client.lookup_lst(ids, timeout)?;
        self.adopt(client, sealed)
    }

    /// The protected chain whose sealed chunks are `sealed` (a chain the
    /// client allocated or looked up, each chunk with a label). Plain
    /// chunks are refused.
    pub fn adopt(&self, client: &Client, sealed: Chain) -> SatResult<SecureChain> {
        let ids: Vec<ChunkId> = sealed.ids().collect();
        if let Some(known) = self.known(&ids) {
            return Ok(known);
        }
        let mut label = None;
        let mut chunks = Vec::with_capacity(sealed.len());
        for &(id, size) in sealed.layout().chunks() {
            let l = client.label_of(id).unwrap_or(NO_LABEL);
            if l == NO_LABEL {
                return Err(SatError::Usage(format!(
                    "chunk {id} is not protected: use the plain API for it"
                )));
            }
            if *label.get_or_insert(l) != l {
                return Err(SatError::Usage(format!(
                    "chunk {id} has another write policy than the chain's first chunk: \
                     a protected chain has one write policy"
                )));
            }
            match seal::plain_len(size) {
                Some(plain) if plain > 0 => chunks.push((id, plain)),
                _ => {
                    return Err(SatError::Integrity(format!(
                        "chunk {id} has {size} bytes, which is not the size of a sealed version"
                    )))
                }
            }
        }
        let ids: Vec<ChunkId> = chunks.iter().map(|&(id, _)| id).collect();
        let sizes: Vec<usize> = chunks.iter().map(|&(_, s)| s).collect();
        let plain = ChainLayout::malloc_lst(&ids, &sizes)?;
        let chain = SecureChain::new(sealed, plain, label.expect("a chain has a chunk"), None)?;
        self.lock().chains.insert(ids, chain.clone());
        Ok(chain)
    }

    /// Seals version 1 (zeros) in every chunk that has no version yet, in
    /// a new epoch under the creator's policies.
    fn seal_first_versions(&self, client: &Client, chain: &SecureChain) -> SatResult<()> {
        client.acquire_chain(chain.sealed(), Access::ReadWrite)?;
        let r = self.first_versions_in_scope(client, chain);
        // Published only when sealed: a release of unchanged bytes would
        // give them a number that is not their sealed one.
        let released = match r {
            Ok(true) => client.release_chain(chain.sealed()),
            _ => client.abort_chain(chain.sealed()),
        };
        r.map(drop).and(released)
    }

    /// Seals version 1 of a chain none of whose chunks has a version yet;
    /// Ok(false) when some have one (another process sealed them): then
    /// nothing is sealed, as a chain's chunks are released together.
    fn first_versions_in_scope(&self, client: &Client, chain: &SecureChain) -> SatResult<bool> {
        let headers = self.headers(client, chain)?;
        if headers.iter().any(Option::is_some) {
            return Ok(false);
        }
        let protection = chain.inner.protection.as_ref().expect("allocated here");
        // A first epoch: it has no parent.
        let parents = vec![0; headers.len()];
        let epoch =
            self.create_epoch(client, chain, parents, &protection.read, &protection.write)?;
        let kek = epoch.kek.clone().expect("made here");
        let layout = chain.inner.sealed.layout();
        let plain_sizes = chain.sizes();
        // Numbered as the release that publishes them (see `seal_chunks`).
        let versions: Vec<u64> = chain
            .ids()
            .map(|id| client.local_version(id).map_or(1, |v| v + 1))
            .collect();
        client.with_chain_mut(chain.sealed(), |sealed| {
            for (i, h) in headers.iter().enumerate() {
                if h.is_some() {
                    continue;
                }
                let id = chain.inner.plain.chunks()[i].0;
                let object = Object::Chunk(id);
                let key = SealKey {
                    object: &object,
                    epoch: epoch.record.epoch,
                    parent: 0,
                    record: epoch.digest,
                    kek: &kek,
                };
                let zeros = vec![0u8; plain_sizes[i]];
                seal::seal(
                    &key,
                    versions[i],
                    self.aead,
                    &self.key,
                    &zeros,
                    &mut sealed[layout.range(i)],
                );
            }
        })?;
        let mut st = self.lock();
        for (i, h) in headers.iter().enumerate() {
            if h.is_none() {
                st.newest
                    .insert(chain.inner.plain.chunks()[i].0, versions[i]);
            }
        }
        Ok(true)
    }

    // ---- scopes ----

    /// READ, WRITE or READWRITE on a protected chain: see the module docs.
    /// On an error nothing stays acquired and the plaintext of the chunks
    /// that failed holds zeros, never unverified bytes.
    pub fn acquire(&self, client: &Client, chain: &SecureChain, access: Access) -> SatResult<()> {
        chain.claim()?;
        let r = self.acquire_claimed(client, chain, access);
        if r.is_err() {
            chain.unclaim();
        }
        r
    }

    fn acquire_claimed(
        &self,
        client: &Client,
        chain: &SecureChain,
        access: Access,
    ) -> SatResult<()> {
        // A write needs the current header (epoch and version) even when
        // its data may be stale, so the sealed chunks are always acquired
        // up to date.
        let under = if access == Access::Read {
            Access::Read
        } else {
            Access::ReadWrite
        };
        let deadline = Instant::now() + Vault::WAIT;
        loop {
            client.acquire_chain(chain.sealed(), under)?;
            match self.open_scope(client, chain, access) {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    // A write of a chain whose creator has not sealed its
                    // first version yet: wait for that version.
                    let first = chain.first();
                    let seen = client.local_version(first);
                    client.abort_chain(chain.sealed())?;
                    if Instant::now() >= deadline {
                        return Err(SatError::Timeout(format!(
                            "protected chain at chunk {first}: its creator sealed no first \
                             version within {:?}",
                            Vault::WAIT
                        )));
                    }
                    client.wait_for_bucket_change(first, seen, Some(deadline))?;
                }
                Err(e) => {
                    let _ = client.abort_chain(chain.sealed());
                    return Err(e);
                }
            }
        }
    }

    /// Checks and decrypts inside the sealed scope. Ok(false): a write
    /// found a chunk with no version and no policies to start one with.
    fn open_scope(&self, client: &Client, chain: &SecureChain, access: Access) -> SatResult<bool> {
        let headers = self.headers(client, chain)?;
        if access != Access::Read
            && chain.inner.protection.is_none()
            && headers.iter().any(Option::is_none)
        {
            return Ok(false);
        }
        let checker = (
            self.id,
            self.lock().revocations.as_ref().map(|l| l.sequence),
        );
        let mut decrypted = {
            let mut st = chain.inner.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.checked_by != checker {
                // Checked by another key, or before a newer revocation
                // list: nothing is a hit, every chunk is checked again.
                st.decrypted.iter_mut().for_each(|d| *d = None);
                st.checked_by = checker;
            }
            st.decrypted.clone()
        };
        if access != Access::Write {
            let layout = chain.inner.sealed.layout();
            // A refusal leaves the whole plaintext zeros, never a part of
            // the refused version nor of an earlier one beside it.
            let refuse = |decrypted: &mut Vec<_>, e: SatError| {
                for (j, d) in decrypted.iter_mut().enumerate() {
                    chain.plain_mut(j).fill(0);
                    *d = None;
                }
                let mut st = chain.inner.state.lock().unwrap_or_else(|p| p.into_inner());
                st.decrypted = std::mem::take(decrypted);
                Err(e)
            };
            for (i, h) in headers.iter().enumerate() {
                let id = chain.inner.plain.chunks()[i].0;
                // A sealed version carries the S-DSM's own version number
                // of the release that published it (`seal_chunks`), which
                // the homes alone advance: bytes written over a protected
                // chunk through the plain API (a replay of an older version,
                // a rollback, zeros) bear another number than the one the
                // S-DSM gives them, in every process, however fresh.
                let coherent = client.local_version(id);
                let Some(h) = h else {
                    chain.plain_mut(i).fill(0);
                    decrypted[i] = None;
                    // "Never written", say the bytes; the S-DSM has a
                    // version of it, or this process saw one: zeroed over.
                    let seen = self.lock().newest.get(&id).copied();
                    if let Some(v) = coherent.filter(|&v| v > 0).or(seen) {
                        return refuse(
                            &mut decrypted,
                            SatError::Integrity(format!(
                                "protected chunk {id}: its bytes are zeros, the mark of a chunk \
                                 never written, but it has version {v}: it was zeroed over"
                            )),
                        );
                    }
                    continue;
                };
                if let Some(v) = coherent.filter(|&v| v != h.version) {
                    return refuse(
                        &mut decrypted,
                        SatError::Integrity(format!(
                            "protected chunk {id}: the sealed version says it is version {}, but \
                             the S-DSM holds it as version {v}: these bytes were written over it \
                             through the plain API (a replayed or rolled-back version)",
                            h.version
                        )),
                    );
                }
                let now = (coherent, h.epoch, h.version, h.nonce);
                if now.0.is_some() && decrypted[i] == Some(now) {
                    continue;
                }
                decrypted[i] = None;
                if let Err(e) = self.open_chunk(client, chain, i, id, h, layout.range(i)) {
                    return refuse(&mut decrypted, e);
                }
                decrypted[i] = Some(now);
            }
        }
        let mut st = chain.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        st.access = Some(access);
        st.headers = headers;
        st.decrypted = decrypted;
        Ok(true)
    }

    fn open_chunk(
        &self,
        client: &Client,
        chain: &SecureChain,
        i: usize,
        id: ChunkId,
        h: &Header,
        range: std::ops::Range<usize>,
    ) -> SatResult<()> {
        let what = format!("protected chunk {id}");
        if let Some(&newest) = self.lock().newest.get(&id) {
            if h.version < newest {
                return Err(SatError::Integrity(format!(
                    "{what}: version {} came back after version {newest} was seen: an older \
                     version was put back in place",
                    h.version
                )));
            }
        }
        let object = Object::Chunk(id);
        let (epoch, writer, kek) =
            self.opening(client, h, &object, Some(&chain.inner.label), &what)?;
        let key = SealKey {
            object: &object,
            epoch: h.epoch,
            parent: epoch.record.parent_of(&object).unwrap_or(0),
            record: epoch.digest,
            kek: &kek,
        };
        let plain = chain.plain_mut(i);
        client
            .with_chain(chain.sealed(), |sealed| {
                seal::open(h, &key, &epoch.write, &writer, &sealed[range], plain)
            })?
            .map_err(|e| seal_error(&what, e))?;
        let known = self.line_known(&epoch, &object);
        let mut st = self.lock();
        let n = st.newest.entry(id).or_insert(0);
        *n = (*n).max(h.version);
        // Where writers of this process take the chain's policies from
        // (`seal_scope`): only an epoch whose line says who reads.
        if known {
            st.current.insert(id, epoch);
        }
        Ok(())
    }

    /// RELEASE of a protected chain: after WRITE or READWRITE, the
    /// plaintext is sealed as each chunk's next version first.
    pub fn release(&self, client: &Client, chain: &SecureChain) -> SatResult<()> {
        let (access, headers) = chain.scope_to_end("RELEASE")?;
        let sealed = if access.exclusive() {
            self.seal_scope(client, chain, &headers)
        } else {
            Ok(())
        };
        // A write that sealed nothing (refused, or failed) publishes
        // nothing: the homes keep their versions, whose numbers still match
        // their sealed ones (`open_scope`).
        let released = if sealed.is_ok() {
            client.release_chain(chain.sealed())
        } else {
            client.abort_chain(chain.sealed())
        };
        if access.exclusive() {
            self.note_own_versions(client, chain);
        }
        chain.unclaim();
        sealed.and(released)
    }

    /// ABORT of a protected chain: the scope ends with nothing sealed and
    /// nothing published; the homes keep their versions. What this process
    /// wrote into the plaintext meanwhile is not the chain's data: the next
    /// scope decrypts the chain's version again rather than take the
    /// plaintext as the version it was decrypted from.
    pub fn abort(&self, client: &Client, chain: &SecureChain) -> SatResult<()> {
        chain.scope_to_end("ABORT")?;
        {
            let mut st = chain.inner.state.lock().unwrap_or_else(|p| p.into_inner());
            st.decrypted.iter_mut().for_each(|d| *d = None);
        }
        let aborted = client.abort_chain(chain.sealed());
        chain.unclaim();
        aborted
    }

    /// After this process's write: its plaintext is the version it sealed,
    /// at whatever coherence version the release gave the local copy.
    fn note_own_versions(&self, client: &Client, chain: &SecureChain) {
        let mut cs = chain.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        for (i, id) in chain.inner.sealed.ids().enumerate() {
            if let Some(Some(d)) = cs.decrypted.get_mut(i) {
                d.0 = client.local_version(id);
            }
        }
    }

    fn seal_scope(
        &self,
        client: &Client,
        chain: &SecureChain,
        headers: &[Option<Header>],
    ) -> SatResult<()> {
        // A tenant whose certificate this process's revocation list revokes
        // publishes nothing: readers who hold the list refuse what it signs,
        // and the version it would replace is left readable.
        if let Some(list) = self.lock().revocations.as_ref() {
            let me = self.key.certificate();
            if list.is_revoked(me) {
                return Err(SatError::AccessDenied(format!(
                    "tenant {:?}: its certificate (serial {:016x}) is revoked by the authority's \
                     revocation list {}: it may not write the protected chain at chunk {}; \
                     nothing was published",
                    me.tenant,
                    me.serial,
                    list.sequence,
                    chain.first()
                )));
            }
        }
        // The epoch to seal under: the chunks' own while this process holds
        // its KEK and its lifetime lasts, else a new one for the chain.
        let mut epochs: Vec<Option<Arc<Epoch>>> = Vec::with_capacity(headers.len());
        let mut policies = None;
        let mut overwritten = None;
        // A chunk whose newest epoch, or the line of epochs before it, does
        // not verify: who may read the chain now is unknown.
        let mut unverified = None;
        let known = self.newest_known(chain);
        let owner = seal::label_has_owner(&chain.inner.label, &self.key.certificate().tenant);
        for (i, h) in headers.iter().enumerate() {
            let id = chain.inner.plain.chunks()[i].0;
            let object = Object::Chunk(id);
            // A version under an epoch that does not verify (damaged, or
            // forged) is replaced under a new epoch, by a writer that knows
            // the chain's current policies from another chunk, or by the
            // chain's owner (below).
            let current = match h {
                Some(h) => {
                    match self.epoch(client, h.epoch, &object, Some(&chain.inner.label)) {
                        Ok(e) => Some(e),
                        Err(SatError::Integrity(why)) => {
                            tracing::warn!("protected chunk {id}: a version whose epoch does not verify: {why}");
                            unverified.get_or_insert(id);
                            None
                        }
                        Err(e) => return Err(e),
                    }
                }
                None => None,
            };
            // Its policies say who reads the chain only when its line of
            // epochs was verified. Not when they merely match what this
            // process knows: what a process knows may be older than a
            // revocation whose record was since damaged, or that a made-up
            // epoch hides, and a revoked tenant could name those very
            // policies in an epoch of its own for this process to continue.
            let current = current.filter(|e| {
                let line = self.line_known(e, &object);
                if !line {
                    unverified.get_or_insert(id);
                }
                line
            });
            if let Some(e) = &current {
                policies.get_or_insert((e.read.clone(), e.write.clone()));
            }
            // Bytes written over the chunk through the plain API (their
            // sealed number is not the S-DSM's): their epoch is never
            // continued. It is still the chunk's newest (the home takes no
            // other, `server/epochs.rs`), so its policies, taken above, are
            // the chain's: a writer that knows only older ones must not
            // bring back who read under them.
            if let (Some(h), Some(v)) = (h, client.local_version(id)) {
                if h.version != v {
                    overwritten.get_or_insert(id);
                    epochs.push(None);
                    continue;
                }
            }
            // A header that names another parent than its epoch's record
            // does (readers refuse it) is not continued either.
            let current = current
                .filter(|e| h.is_some_and(|h| Some(h.parent) == e.record.parent_of(&object)));
            // An epoch whose author may not read it (a write-only tenant's)
            // is never continued by another writer: its author knows the
            // KEK, and would read what others seal under it.
            let current = match current {
                Some(e) if e.record.author != self.key.certificate().id() => {
                    let author = self.certificate(client, &e.record.author)?;
                    author.satisfies(&e.read).then_some(e)
                }
                other => other,
            };
            let current = current.map(|e| self.unwrapped_if_readable(e));
            epochs.push(current.filter(|e| self.usable(e)));
        }
        if epochs.iter().any(Option::is_none) {
            // The policies of the chunks' newest epoch first: a new epoch
            // keeps who reads as it was (only `new_epoch` changes it, and
            // readers accept that only from a tenant that can read). Else
            // those of the newest epoch this process knows of the chain
            // (its MALLOC's may have been replaced by a new epoch), unless
            // a chunk's newest epoch did not verify: the chain may have
            // moved past what this process knows (a revocation), so only
            // its owner, who may always say who reads, writes it then.
            let policies = match (policies, known) {
                (Some(p), _) => Some(p),
                (None, Some(e)) if unverified.is_none() || owner => {
                    Some((e.read.clone(), e.write.clone()))
                }
                (None, _) => None,
            };
            if let (Some(id), None, false) = (unverified, &policies, owner) {
                return Err(SatError::Integrity(format!(
                    "protected chunk {id}: its newest key epoch, or the line of epochs before it, \
                     does not verify (its record is missing or damaged, written through the plain \
                     API, or its author's certificate is revoked), so who may read the chain now \
                     is unknown; nothing was published: have the chain's owner write it, from a \
                     MALLOC that names the chain's read and write policies, which seals it under \
                     a new epoch"
                )));
            }
            if let (Some(id), None, None) = (overwritten, &policies, &chain.inner.protection) {
                return Err(SatError::Integrity(format!(
                    "protected chunk {id} was written over through the plain API, and this \
                     process knows no current policies of its chain to seal it again under: \
                     write it from the process that allocated it, or one that has read it"
                )));
            }
            // A MALLOC's read policy counts only for the chain's owner (its
            // creator, who may always say who reads it): a joiner's MALLOC
            // may name a policy the chain has since left.
            let (read, write) = match (&chain.inner.protection, policies) {
                (_, Some(p)) => p,
                (Some(p), None) if owner => (p.read.clone(), p.write.clone()),
                (Some(_), None) => {
                    return Err(SatError::Integrity(format!(
                    "the protected chain at chunk {}: this process knows no current read policy \
                         of it (its newest key epoch does not verify, or its line of epochs cannot \
                         be checked), and a MALLOC's read policy counts only for the chain's \
                         owner: write it from a process that has read it, or have its owner \
                         write it",
                    chain.first()
                )))
                }
                (None, None) => {
                    return Err(SatError::Usage(format!(
                        "the protected chain at chunk {} has no version to take its policies \
                         from (none yet, or its newest does not verify): MALLOC it with its read \
                         and write policies in this process (its owner may always say who reads \
                         it), or write it from a process that has read it",
                        chain.first()
                    )))
                }
            };
            let fresh = self.create_epoch(client, chain, parents(headers), &read, &write)?;
            for e in epochs.iter_mut().filter(|e| e.is_none()) {
                *e = Some(fresh.clone());
            }
        }
        // Continuing an epoch needs its KEK, which every reader holds: the
        // write policy is checked here too, or a tenant that may read but
        // not write would publish versions every reader refuses (a new
        // epoch checks it as it is made, `make_epoch`).
        for e in epochs.iter().flatten() {
            if !self.key.certificate().satisfies(&e.write) {
                return Err(SatError::AccessDenied(format!(
                    "tenant {:?} with attributes {:?} may not write the protected chain at chunk \
                     {}: its write policy is {}; nothing was published",
                    self.key.certificate().tenant,
                    self.key.attributes(),
                    chain.first(),
                    e.write
                )));
            }
        }
        self.seal_chunks(client, chain, headers, &epochs)
    }

    /// The newest epoch of `chain` this process knows to say who reads it
    /// (one it read with its line verified, or sealed under).
    fn newest_known(&self, chain: &SecureChain) -> Option<Arc<Epoch>> {
        let st = self.lock();
        chain
            .ids()
            .filter_map(|id| st.current.get(&id).cloned())
            .max_by_key(|e| e.record.created)
    }

    fn seal_chunks(
        &self,
        client: &Client,
        chain: &SecureChain,
        headers: &[Option<Header>],
        epochs: &[Option<Arc<Epoch>>],
    ) -> SatResult<()> {
        self.publish(client)?;
        let layout = chain.inner.sealed.layout();
        let mut decrypted = Vec::with_capacity(headers.len());
        // Past the newest version this process has seen, too: a chunk
        // repaired after it was zeroed or damaged must not look older.
        let seen: Vec<u64> = {
            let st = self.lock();
            chain
                .inner
                .plain
                .chunks()
                .iter()
                .map(|&(id, _)| st.newest.get(&id).copied().unwrap_or(0))
                .collect()
        };
        // The number of the release each version becomes (the home takes
        // only the next one), which readers check it by (`open_scope`).
        let coherent: Vec<Option<u64>> = chain
            .inner
            .plain
            .chunks()
            .iter()
            .map(|&(id, _)| client.local_version(id))
            .collect();
        client.with_chain_mut(chain.sealed(), |sealed| {
            for (i, h) in headers.iter().enumerate() {
                let id = chain.inner.plain.chunks()[i].0;
                let epoch = epochs[i].as_ref().expect("chosen");
                let kek = epoch.kek.clone().expect("usable epochs have their KEK");
                let version = match coherent[i] {
                    Some(v) => v + 1,
                    None => h
                        .map_or(1, |h| h.version.saturating_add(1))
                        .max(seen[i].saturating_add(1)),
                };
                let object = Object::Chunk(id);
                let key = SealKey {
                    object: &object,
                    epoch: epoch.record.epoch,
                    parent: epoch.record.parent_of(&object).unwrap_or(0),
                    record: epoch.digest,
                    kek: &kek,
                };
                let plain = chain.plain_mut(i);
                let out = &mut sealed[layout.range(i)];
                seal::seal(&key, version, self.aead, &self.key, plain, out);
                let h = Header::parse(out).ok().flatten().expect("just sealed");
                decrypted.push((id, Some((None, h.epoch, h.version, h.nonce))));
            }
        })?;
        let mut st = self.lock();
        for (i, &(id, d)) in decrypted.iter().enumerate() {
            if let Some((_, _, v, _)) = d {
                st.newest.insert(id, v);
            }
            if let Some(e) = &epochs[i] {
                st.current.insert(id, e.clone());
            }
        }
        let checker = (self.id, st.revocations.as_ref().map(|l| l.sequence));
        drop(st);
        let mut cs = chain.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        // The plaintext is what this vault sealed: a hit for the next scope,
        // but only where this tenant may read the epoch. A writer that may
        // not read is refused its own version as any other (a read is
        // checked against the read policy even with the bytes at hand).
        let me = self.key.certificate();
        cs.decrypted = decrypted
            .into_iter()
            .zip(epochs)
            .map(|((_, d), e)| d.filter(|_| e.as_ref().is_some_and(|e| me.satisfies(&e.read))))
            .collect();
        cs.checked_by = checker;
        Ok(())
    }

    /// `epoch` with its KEK when this tenant may read it (unwrapping it
    /// once), else as it is: a writer that can read continues the current
    /// epoch rather than start one of its own.
    fn unwrapped_if_readable(&self, epoch: Arc<Epoch>) -> Arc<Epoch> {
        let attrs: Vec<&str> = self.key.attributes().iter().map(String::as_str).collect();
        if epoch.kek.is_some() || !epoch.read.satisfied_by(&attrs) {
            return epoch;
        }
        match self.kek(&epoch, "the current epoch") {
            Ok(_) => self
                .lock()
                .epochs
                .get(&epoch.record.epoch)
                .cloned()
                .unwrap_or(epoch),
            Err(_) => epoch,
        }
    }

    /// Whether new versions may be sealed under `epoch` by this process.
    fn usable(&self, epoch: &Epoch) -> bool {
        if epoch.kek.is_none() {
            return false;
        }
        match self.kek_lifetime {
            None => true,
            Some(life) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0);
                now - (epoch.record.created as f64) < life.as_secs_f64()
            }
        }
    }

    /// A new key epoch for `chain`: every chunk's current version is read
    /// (which needs read access) and sealed again, as its next version,
    /// under a fresh KEK wrapped under `read` (the current read policy when
    /// None). Keys that do not satisfy the new policy cannot read any
    /// version written from now on: this is how an attribute is revoked.
    pub fn new_epoch(
        &self,
        client: &Client,
        chain: &SecureChain,
        read: Option<&Policy>,
    ) -> SatResult<()> {
        self.acquire(client, chain, Access::ReadWrite)?;
        let r = (|| {
            let headers = {
                let st = chain.inner.state.lock().unwrap_or_else(|p| p.into_inner());
                st.headers.clone()
            };
            let current = match headers.iter().flatten().next() {
                Some(h) => {
                    let id = chain.first();
                    Some(self.epoch(
                        client,
                        h.epoch,
                        &Object::Chunk(id),
                        Some(&chain.inner.label),
                    ))
                    .transpose()?
                }
                None => None,
            };
            // The read policy kept when none is given: the newest epoch's
            // when its line says who reads, else the one this process knows.
            let object = Object::Chunk(chain.first());
            let known = self.newest_known(chain);
            let current = current.filter(|e| self.line_known(e, &object)).or(known);
            let (cur_read, write) = match (&current, &chain.inner.protection) {
                (Some(e), _) => (e.read.clone(), e.write.clone()),
                (None, Some(p)) => (p.read.clone(), p.write.clone()),
                (None, None) => {
                    return Err(SatError::Usage(
                        "a new epoch of a chain with no version: write it first".into(),
                    ))
                }
            };
            let read = read.cloned().unwrap_or(cur_read);
            let fresh = self.create_epoch(client, chain, parents(&headers), &read, &write)?;
            let epochs = vec![Some(fresh); headers.len()];
            self.seal_chunks(client, chain, &headers, &epochs)
        })();
        // The scope is closed without sealing again.
        chain
            .inner
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .headers
            .clear();
        let released = if r.is_ok() {
            client.release_chain(chain.sealed())
        } else {
            client.abort_chain(chain.sealed())
        };
        self.note_own_versions(client, chain);
        chain.unclaim();
        r.and(released)
    }

    /// PUT: a write scope that replaces the chain's plaintext with `data`.
    pub fn put(&self, client: &Client, chain: &SecureChain, data: &[u8]) -> SatResult<()> {
        if data.len() != chain.size() {
            return Err(SatError::Usage(format!(
                "PUT of {} bytes into the protected chain at chunk {}, which has {}",
                data.len(),
                chain.first(),
                chain.size()
            )));
        }
        self.acquire(client, chain, Access::Write)?;
        chain.with_data_mut(|d| d.copy_from_slice(data))?;
        self.release(client, chain)
    }

    /// GET: a read scope that copies the chain's plaintext out.
    pub fn get(&self, client: &Client, chain: &SecureChain) -> SatResult<Vec<u8>> {
        self.acquire(client, chain, Access::Read)?;
        let data = chain.with_data(|d| d.to_vec());
        let released = self.release(client, chain);
        let data = data?;
        released.map(|()| data)
    }

    // ---- symbols ----

    /// Stores `data` under `name` in the symbol table, sealed: readable by
    /// keys that satisfy `protection.read`. The value carries its epoch and
    /// writer. A symbol's write policy travels with its value (the table
    /// has no home label per name): readers check the writer against it,
    /// but a tenant that may read the symbol could replace it by a value
    /// under a write policy of its own. Use a protected chain where writers
    /// must be held to a fixed policy.
    pub fn write_symbol(
        &self,
        client: &Client,
        name: &str,
        data: &[u8],
        protection: &Protection,
    ) -> SatResult<()> {
        self.publish(client)?;
        let object = Object::Symbol(name.to_string());
        let mine = self.lock().symbol_epochs.get(name).copied();
        let epoch = match mine.and_then(|e| self.lock().epochs.get(&e).cloned()) {
            Some(e)
                if same(&e.read, &protection.read)
                    && same(&e.write, &protection.write)
                    && self.usable(&e) =>
            {
                e
            }
            _ => {
                // A symbol has no home to keep its epochs in order: each
                // of its epochs is a first one.
                let e = self.make_epoch(
                    client,
                    Cover::Symbol(name.to_string()),
                    vec![0],
                    &protection.read,
                    &protection.write,
                )?;
                self.lock()
                    .symbol_epochs
                    .insert(name.to_string(), e.record.epoch);
                e
            }
        };
        let kek = epoch.kek.clone().expect("made here");
        let key = SealKey {
            object: &object,
            epoch: epoch.record.epoch,
            parent: 0,
            record: epoch.digest,
            kek: &kek,
        };
        // The mark first: a reader that finds this value or any later one
        // finds the mark too.
        if !self.lock().marked.contains(name) {
            client.write_symbol(&protected_mark(name), b"protected")?;
            self.lock().marked.insert(name.to_string());
        }
        // The value is numbered as the anchor's release, and written while
        // the anchor is held: writers of the name take turns, and the
        // anchor moves on only once the value it numbers is in place. The
        // anchor is taken before the bucket, whose id is lower; that cannot
        // deadlock because nothing takes an anchor while it holds a bucket
        // or a value (readers take it after theirs are released).
        let anchor = self.open_anchor(client, name)?;
        client.acquire_reserved(anchor, Access::Write)?;
        let written = (|| {
            let version = client
                .local_version(anchor)
                .map_or(1, |v| v.saturating_add(1));
            let mut sealed = vec![0u8; seal::sealed_len(data.len())];
            seal::seal(&key, version, self.aead, &self.key, data, &mut sealed);
            client.write_symbol(name, &sealed)?;
            client.with_data_mut(anchor, |d| d.copy_from_slice(&version.to_le_bytes()))
        })();
        match written {
            Ok(()) => client.release(anchor),
            Err(e) => {
                // The value is not in place: the anchor must not move on,
                // or the value before would look rolled back.
                let _ = client.abort(anchor);
                Err(e)
            }
        }
    }

    /// Joins (or allocates) the anchor of protected symbol `name`.
    fn open_anchor(&self, client: &Client, name: &str) -> SatResult<ChunkId> {
        let id = symbol_anchor(name);
        client.malloc_lst_reserved(ProtocolId::HomeMesi, &[id], &[ANCHOR_SIZE])?;
        Ok(id)
    }

    /// The number of the last release of the anchor of `name` (0: never
    /// written).
    fn anchor_version(&self, client: &Client, name: &str) -> SatResult<u64> {
        let anchor = self.open_anchor(client, name)?;
        client.acquire_reserved(anchor, Access::Read)?;
        let version = client.local_version(anchor).unwrap_or(0);
        client.release(anchor)?;
        Ok(version)
    }

    /// Reads a protected symbol, waiting at most `timeout` for it to be
    /// written.
    pub fn read_symbol(
        &self,
        client: &Client,
        name: &str,
        timeout: Duration,
    ) -> SatResult<Vec<u8>> {
        let sealed = client.read_symbol(name, timeout)?;
        self.open_symbol(client, name, &sealed)
    }

    /// Opens the value of symbol `name` already read (`sealed`, which must
    /// be a sealed version), and checks it is the name's latest: it must
    /// bear the number of the anchor's last release (`symbol_anchor`).
    /// One that bears an older number may have met a writer that finished
    /// meanwhile, so the value is read again, once: then it must bear that
    /// number or a newer one, or it was put back over a newer value (a
    /// replay, a rollback), which is an integrity error.
    pub fn open_symbol(&self, client: &Client, name: &str, sealed: &[u8]) -> SatResult<Vec<u8>> {
        let (plain, version) = self.open_symbol_version(client, name, sealed)?;
        let anchor = self.anchor_version(client, name)?;
        if version == anchor {
            return Ok(plain);
        }
        let what = format!("protected symbol {name:?}");
        if version > anchor {
            return Err(SatError::Integrity(format!(
                "{what}: its value is numbered {version}, past the {anchor} writes the name has \
                 had: it was not written by the encryption layer's write of the name"
            )));
        }
        let again = client.read_symbol(name, Duration::ZERO)?;
        let (plain, newer) = self.open_symbol_version(client, name, &again)?;
        if newer >= anchor {
            return Ok(plain);
        }
        Err(SatError::Integrity(format!(
            "{what}: its value is write {newer} of the name, which has had {anchor}: an older \
             value was put back over the newer one through the plain API (a replay or a rollback)"
        )))
    }

    /// Opens a sealed value of symbol `name`; with the number it was
    /// sealed under.
    fn open_symbol_version(
        &self,
        client: &Client,
        name: &str,
        sealed: &[u8],
    ) -> SatResult<(Vec<u8>, u64)> {
        let what = format!("protected symbol {name:?}");
        let h = Header::parse(sealed)
            .map_err(|e| seal_error(&what, e))?
            .ok_or_else(|| SatError::Integrity(format!("{what}: holds no sealed version")))?;
        let object = Object::Symbol(name.to_string());
        let (epoch, writer, kek) = self.opening(client, &h, &object, None, &what)?;
        let key = SealKey {
            object: &object,
            epoch: h.epoch,
            parent: epoch.record.parent_of(&object).unwrap_or(0),
            record: epoch.digest,
            kek: &kek,
        };
        let size = seal::plain_len(sealed.len()).expect("a parsed header has a valid size");
        let mut plain = vec![0u8; size];
        seal::open(&h, &key, &epoch.write, &writer, sealed, &mut plain)
            .map_err(|e| seal_error(&what, e))?;
        Ok((plain, h.version))
    }

    // ---- epochs, certificates ----

    /// What opening version `h` of `object` needs: its verified epoch, its
    /// writer's certificate and the epoch's KEK (access denied when this
    /// tenant may not read it).
    fn opening(
        &self,
        client: &Client,
        h: &Header,
        object: &Object,
        label: Option<&Label>,
        what: &str,
    ) -> SatResult<(Arc<Epoch>, Arc<Certificate>, Kek)> {
        let epoch = self.epoch(client, h.epoch, object, label)?;
        let writer = self.certificate(client, &h.writer)?;
        let kek = self.kek(&epoch, what)?;
        Ok((epoch, writer, kek))
    }

    /// Makes, publishes and caches a new epoch covering `chain`.
    /// `parents`: each chunk's newest epoch, from its header (0 where it
    /// has none), which the homes take a new epoch over.
    fn create_epoch(
        &self,
        client: &Client,
        chain: &SecureChain,
        parents: Vec<u64>,
        read: &Policy,
        write: &Policy,
    ) -> SatResult<Arc<Epoch>> {
        let ids: Vec<ChunkId> = chain.ids().collect();
        self.make_epoch(client, Cover::Chunks(ids), parents, read, write)
    }

    fn make_epoch(
        &self,
        client: &Client,
        cover: Cover,
        parents: Vec<u64>,
        read: &Policy,
        write: &Policy,
    ) -> SatResult<Arc<Epoch>> {
        if !self.key.certificate().satisfies(write) {
            return Err(SatError::AccessDenied(format!(
                "tenant {:?} with attributes {:?} may not write data whose write policy is {write}",
                self.key.certificate().tenant,
                self.key.attributes()
            )));
        }
        self.publish(client)?;
        let (record, kek) = EpochRecord::create(&self.abe, &self.key, cover, parents, read, write)
            .map_err(|e| abe_error("a new key epoch", e))?;
        client.write_symbol(&epoch_name(record.epoch), &record.to_bytes())?;
        let epoch = Arc::new(Epoch {
            digest: record.digest(),
            read: read.clone(),
            write: write.clone(),
            kek: Some(kek),
            record,
        });
        self.lock().epochs.insert(epoch.record.epoch, epoch.clone());
        Ok(epoch)
    }

    /// The record of `epoch` for `object`, checked for use now: the
    /// record itself ([`Vault::record`]), its author's certificate valid
    /// today (not expired, not revoked), and its line of parents
    /// ([`Vault::check_lineage`]).
    fn epoch(
        &self,
        client: &Client,
        epoch: u64,
        object: &Object,
        label: Option<&Label>,
    ) -> SatResult<Arc<Epoch>> {
        let e = self.record(client, epoch, object, label)?;
        self.certificate(client, &e.record.author)?;
        self.check_lineage(client, &e, object, label)?;
        Ok(e)
    }

    /// The record of `epoch` for `object`: cached, or read from the symbol
    /// table and checked (its name, its author's signature and write
    /// rights, its write policy against the chunk's `label`). Its author's
    /// certificate is only checked to be the authority's here, whatever its
    /// expiry or revocation: a past epoch stays what it was.
    fn record(
        &self,
        client: &Client,
        epoch: u64,
        object: &Object,
        label: Option<&Label>,
    ) -> SatResult<Arc<Epoch>> {
        let what = format!("{object:?}, epoch {epoch:016x}");
        let cached = self.lock().epochs.get(&epoch).cloned();
        let e = match cached {
            Some(e) => e,
            None => {
                let bytes = client
                    .read_symbol(&epoch_name(epoch), Vault::WAIT)
                    .map_err(|e| match e {
                        SatError::Timeout(_) => SatError::Integrity(format!(
                            "{what}: the data names an epoch whose record was never written"
                        )),
                        other => other,
                    })?;
                let record = EpochRecord::from_bytes(&bytes).map_err(|e| seal_error(&what, e))?;
                // The signature first: a record's policies are parsed only
                // once its author is known to have written them.
                let author = self.issued_certificate(client, &record.author)?;
                record
                    .verify(object, epoch, label, &author)
                    .map_err(|e| seal_error(&what, e))?;
                let (read, write) = record.policies().map_err(|e| seal_error(&what, e))?;
                let e = Arc::new(Epoch {
                    digest: record.digest(),
                    read,
                    write,
                    kek: None,
                    record,
                });
                self.lock().epochs.insert(epoch, e.clone());
                e
            }
        };
        // The signatures were checked on arrival; what depends on the user
        // is checked on every use: one record covers several chunks, and
        // each must be covered and carry the record's write policy label.
        if !e.record.cover.covers(object)
            || label.is_some_and(|l| !seal::label_has_write_policy(l, &e.write))
        {
            return Err(SatError::Integrity(format!(
                "{what}: the epoch's record does not cover this data or names another write policy"
            )));
        }
        Ok(e)
    }

    /// Checks `epoch`'s line of parents for `object` back to a first epoch
    /// (or to one already checked): an epoch may change who reads only if
    /// its author could read under its parent. Homes keep a chunk's epochs
    /// in one line (`server/epochs.rs`), so a tenant whose read access a
    /// new epoch took away cannot give it back to itself, neither by
    /// sealing under an old epoch (the home refuses) nor by starting an
    /// epoch of its own (every reader refuses it here).
    ///
    /// An epoch the chain's owner made ([`Vault::by_owner`]) needs no line:
    /// the owner may always say who reads.
    ///
    /// An ancestor refused this way is passed over: who may read after it
    /// is who could read before it. An ancestor whose record is missing or
    /// does not verify (bytes written through the plain API under a made-up
    /// epoch: the home cannot tell) leaves the line before it unknown: the
    /// epochs after it are read (their records verify: a writer wrote
    /// them), but no writer takes their policies or continues them unless
    /// it knows the chain's policies itself ([`Vault::line_known`]).
    fn check_lineage(
        &self,
        client: &Client,
        epoch: &Arc<Epoch>,
        object: &Object,
        label: Option<&Label>,
    ) -> SatResult<()> {
        let checked = |e: &Arc<Epoch>| {
            self.lock()
                .lineage
                .get(&(e.record.epoch, object.clone()))
                .cloned()
        };
        // Youngest first, back to a first epoch, a checked one, or one
        // whose parent cannot be verified.
        let mut line = vec![epoch.clone()];
        let mut broken = None;
        loop {
            let last = line.last().expect("one at least");
            if checked(last).is_some() || self.by_owner(client, last, label)? {
                break;
            }
            let parent = last.record.parent_of(object).unwrap_or(0);
            if parent == 0 {
                break;
            }
            if line.len() > MAX_LINEAGE {
                broken = Some(format!("more than {MAX_LINEAGE} epochs back"));
                break;
            }
            match self.record(client, parent, object, label) {
                Ok(p) => line.push(p),
                Err(SatError::Integrity(why)) => {
                    broken = Some(why);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        // Oldest first: each epoch against who could read before it (None:
        // unknown).
        let mut before: Option<Option<Policy>> = match broken {
            Some(why) => {
                tracing::warn!(
                    "{object:?}: the line of key epochs before epoch {:016x} cannot be \
                     verified: {why}",
                    line.last().expect("one").record.epoch
                );
                Some(None)
            }
            None => None,
        };
        let mut verdict = None;
        for e in line.iter().rev() {
            if let Some(lineage) = checked(e) {
                before = Some(lineage.read_after.clone());
                verdict = Some(lineage);
                continue;
            }
            let owner = self.by_owner(client, e, label)?;
            if owner {
                before = None;
            }
            let refused = match &before {
                Some(Some(read)) if !same(read, &e.read) => {
                    let author = self.issued_certificate(client, &e.record.author)?;
                    (!author.satisfies(read)).then(|| {
                        format!(
                            "{object:?}: epoch {:016x} changes the read policy from {read} to \
                             {}, but its author, tenant {:?} with attributes {:?}, could not \
                             read under the first: only a tenant that can read the data may \
                             change who reads it",
                            e.record.epoch, e.read, author.tenant, author.attributes
                        )
                    })
                }
                _ => None,
            };
            let lineage = Lineage {
                read_after: match (&refused, &before) {
                    (_, Some(None)) => None,
                    (Some(_), Some(Some(read))) => Some(read.clone()),
                    _ => Some(e.read.clone()),
                },
                refused,
            };
            before = Some(lineage.read_after.clone());
            self.lock()
                .lineage
                .insert((e.record.epoch, object.clone()), lineage.clone());
            verdict = Some(lineage);
        }
        match verdict.and_then(|l| l.refused) {
            Some(why) => Err(SatError::Integrity(why)),
            None => Ok(()),
        }
    }

    /// Whether `epoch` was made by the owner its chunks' `label` names
    /// ([`seal::chunk_label`]): the owner may always say who reads them,
    /// so the line needs no checking before such an epoch.
    fn by_owner(&self, client: &Client, epoch: &Epoch, label: Option<&Label>) -> SatResult<bool> {
        let Some(label) = label else {
            return Ok(false);
        };
        let author = self.issued_certificate(client, &epoch.record.author)?;
        Ok(seal::label_has_owner(label, &author.tenant))
    }

    /// Whether `epoch`'s line for `object` was checked back to a first
    /// epoch ([`Vault::check_lineage`], which must have run): only then
    /// does its read policy say who may read the chain now.
    fn line_known(&self, epoch: &Epoch, object: &Object) -> bool {
        self.lock()
            .lineage
            .get(&(epoch.record.epoch, object.clone()))
            .is_some_and(|l| l.refused.is_none() && l.read_after.is_some())
    }

    /// The KEK of `epoch`, unwrapped with this tenant's attribute key once
    /// and cached; access denied when the attributes do not satisfy the
    /// epoch's read policy.
    fn kek(&self, epoch: &Arc<Epoch>, what: &str) -> SatResult<Kek> {
        // The read policy first, even for a KEK this process holds: a
        // write-only tenant holds the KEK of the epochs it made, and may
        // still not read under them.
        let attrs: Vec<&str> = self.key.attributes().iter().map(String::as_str).collect();
        if let (Some(k), true) = (&epoch.kek, epoch.read.satisfied_by(&attrs)) {
            return Ok(k.clone());
        }
        if !epoch.read.satisfied_by(&attrs) {
            return Err(SatError::AccessDenied(format!(
                "{what}: tenant {:?} with attributes {:?} may not read it (read policy {})",
                self.key.certificate().tenant,
                self.key.attributes(),
                epoch.read
            )));
        }
        let unwrapped = self
            .abe
            .unwrap(self.key.abe_key(), &epoch.record.wrapped_kek)
            .map_err(|e| abe_error(what, e))?;
        let mut kek = Kek::default();
        if unwrapped.len() != kek.len() {
            return Err(SatError::Integrity(format!(
                "{what}: the KEK has the wrong size"
            )));
        }
        kek.copy_from_slice(&unwrapped);
        let with_kek = Arc::new(Epoch {
            record: epoch.record.clone(),
            digest: epoch.digest,
            read: epoch.read.clone(),
            write: epoch.write.clone(),
            kek: Some(kek.clone()),
        });
        self.lock().epochs.insert(epoch.record.epoch, with_kek);
        Ok(kek)
    }

    /// The certificate `id`, valid now: issued by the authority, not
    /// expired, not on its revocation list.
    fn certificate(&self, client: &Client, id: &[u8; 32]) -> SatResult<Arc<Certificate>> {
        let cert = self.issued_certificate(client, id)?;
        cert.check_unexpired()
            .map_err(|e| SatError::Integrity(e.to_string()))?;
        if let Some(list) = self.lock().revocations.as_ref() {
            if list.is_revoked(&cert) {
                return Err(SatError::Integrity(format!(
                    "signed by tenant {:?} under certificate serial {:016x}, which the \
                     authority revoked (revocation list {})",
                    cert.tenant, cert.serial, list.sequence
                )));
            }
        }
        Ok(cert)
    }

    /// The certificate `id` as the authority issued it, whatever its expiry
    /// or revocation (cached).
    fn issued_certificate(&self, client: &Client, id: &[u8; 32]) -> SatResult<Arc<Certificate>> {
        if id == &self.key.certificate().id() {
            return Ok(Arc::new(self.key.certificate().clone()));
        }
        if let Some(c) = self.lock().certs.get(id) {
            return Ok(c.clone());
        }
        let bytes = client
            .read_symbol(&cert_name(id), Vault::WAIT)
            .map_err(|e| match e {
                SatError::Timeout(_) => SatError::Integrity(
                    "the data names a writer whose certificate was never published".into(),
                ),
                other => other,
            })?;
        let cert = Certificate::from_bytes(&bytes)
            .map_err(|e| SatError::Integrity(format!("a writer's certificate is damaged: {e}")))?;
        if &cert.id() != id {
            return Err(SatError::Integrity(
                "the certificate published under a writer's id is another one".into(),
            ));
        }
        cert.verify_issued(self.key.authority())
            .map_err(|e| SatError::Integrity(e.to_string()))?;
        let cert = Arc::new(cert);
        self.lock().certs.insert(*id, cert.clone());
        Ok(cert)
    }

    /// Publishes this tenant's certificate, once per process.
    fn publish(&self, client: &Client) -> SatResult<()> {
        if self.lock().published {
            return Ok(());
        }
        let cert = self.key.certificate();
        client.write_symbol(&cert_name(&cert.id()), &cert.to_bytes())?;
        self.lock().published = true;
        Ok(())
    }

    /// Every chunk's header, inside a sealed scope.
    fn headers(&self, client: &Client, chain: &SecureChain) -> SatResult<Vec<Option<Header>>> {
        let layout = chain.inner.sealed.layout();
        client.with_chain(chain.sealed(), |bytes| {
            layout
                .chunks()
                .iter()
                .enumerate()
                .map(|(i, &(id, _))| {
                    Header::parse(&bytes[layout.range(i)])
                        .map_err(|e| seal_error(&format!("protected chunk {id}"), e))
                })
                .collect()
        })?
    }
}

impl SecureChain {
    /// Takes the chain's scope for this thread, waiting while another
    /// thread of the process holds it; this thread's own is misuse.
    fn claim(&self) -> SatResult<()> {
        let me = std::thread::current().id();
        let mut st = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(holder) = st.holder {
            if holder == me {
                return Err(SatError::Usage(format!(
                    "the protected chain at chunk {} is already inside a scope of this thread: \
                     release it first",
                    self.first()
                )));
            }
            st = self
                .inner
                .scope_ended
                .wait(st)
                .unwrap_or_else(|p| p.into_inner());
        }
        st.holder = Some(me);
        st.access = None;
        Ok(())
    }

    /// Ends this thread's hold on the chain's scope.
    /// The scope `call` (RELEASE or ABORT) ends: its access and the headers
    /// its acquire read, taken; refused unless this thread opened it.
    fn scope_to_end(&self, call: &str) -> SatResult<(Access, Vec<Option<Header>>)> {
        let mut st = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let mine = st.holder == Some(std::thread::current().id());
        let Some(access) = st.access.filter(|_| mine) else {
            return Err(SatError::Usage(format!(
                "{call} of the protected chain at chunk {} without an acquire in this thread",
                self.first()
            )));
        };
        Ok((access, std::mem::take(&mut st.headers)))
    }

    fn unclaim(&self) {
        let mut st = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        st.holder = None;
        st.access = None;
        drop(st);
        self.inner.scope_ended.notify_all();
    }

    fn new(
        sealed: Chain,
        plain: ChainLayout,
        label: Label,
        protection: Option<Protection>,
    ) -> SatResult<SecureChain> {
        let memory = PlainMemory::new(plain.total_size())?;
        let n = plain.len();
        Ok(SecureChain {
            inner: Arc::new(SecureInner {
                sealed,
                plain,
                memory,
                label,
                protection,
                state: Mutex::new(ChainState {
                    access: None,
                    holder: None,
                    headers: Vec::new(),
                    decrypted: vec![None; n],
                    checked_by: (0, None),
                }),
                scope_ended: std::sync::Condvar::new(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abe::keys::AuthorityKeys;

    /// "A process refuses a list older than one it took": whichever of its
    /// vaults (a client each) took the newer one.
    #[test]
    fn a_second_vault_of_the_process_refuses_an_older_revocation_list() {
        let dir = std::env::temp_dir().join(format!("sat-vault-crl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let auth = AuthorityKeys::setup().unwrap();
        let first = auth.revoke(None, &[]);
        let second = auth.revoke(Some(&first), &[7]);
        first.save(&dir.join("1.crl")).unwrap();
        second.save(&dir.join("2.crl")).unwrap();
        let a = Vault::new(auth.issue("alice", &["tenant_a"]).unwrap());
        let b = Vault::new(auth.issue("bob", &["tenant_a"]).unwrap());
        a.load_revocations(&dir.join("2.crl")).unwrap();
        let e = b.load_revocations(&dir.join("1.crl")).unwrap_err();
        assert!(
            matches!(&e, SatError::Integrity(m) if m.contains("older than list 2")),
            "{e}"
        );
        b.load_revocations(&dir.join("2.crl")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
