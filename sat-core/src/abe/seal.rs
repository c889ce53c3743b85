//! Sealed versions: the bytes a protected chunk or symbol holds in the S-DSM.
//!
//! Two kinds of records, both pure data (no S-DSM calls here):
//!
//! - An [`EpochRecord`] per object and key epoch: a fresh random
//!   key-encryption key (KEK) wrapped with CP-ABE under the epoch's read
//!   policy, with the object's read and write policies, signed by a writer
//!   whose certificate satisfies the write policy.
//! - A **sealed version** per write: a fixed [`HEADER`] (epoch, version,
//!   writer, nonce, signature), then the data encrypted with an AEAD under a
//!   data key derived from the KEK (HKDF-SHA256 over the object, epoch and
//!   version), then the AEAD tag. The authenticated data binds the object,
//!   version, epoch, writer and the epoch record's digest (which holds both
//!   policies), so a version cannot be moved to another chunk, epoch or
//!   policy. The signature covers the header fields and the ciphertext: the
//!   AEAD alone would let any reader (who knows the data key) forge a
//!   version, the writer's signature does not.
//!
//! A sealed region of all zeros is "never written", as an unwritten plain
//! chunk reads as zeros; any other content must verify in full.

use hkdf::Hkdf;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::keys::{random, Certificate, TenantKey};
use super::Policy;
use crate::chunk::sealed;

/// Bytes before the ciphertext in a sealed version.
pub const HEADER: usize = sealed::HEADER;
/// One AEAD tag, after the ciphertext, per segment.
pub const TAG: usize = 16;
/// A version is sealed as segments of this many bytes (the last one
/// shorter), each with its own nonce and tag: two threads then seal or open
/// a large version at once, each its half of the segments (an AEAD pass
/// cannot be split otherwise).
pub const SEGMENT: usize = 256 << 10;
/// From this size on, a version's segments are sealed and opened on two
/// threads: below it a thread costs more than it saves.
const PARALLEL: usize = 2 * SEGMENT;

/// The number of segments of `plain` bytes (at least one).
pub fn segments(plain: usize) -> usize {
    plain.div_ceil(SEGMENT).max(1)
}

/// The sealed size of `plain` bytes: header, ciphertext, tags.
pub fn sealed_len(plain: usize) -> usize {
    plain + HEADER + TAG * segments(plain)
}

/// The plaintext size of a sealed region of `sealed` bytes, None when no
/// plaintext size seals to it.
pub fn plain_len(sealed: usize) -> Option<usize> {
    let mut k = 1;
    loop {
        let plain = sealed.checked_sub(HEADER + TAG * k)?;
        match segments(plain) {
            n if n == k => return Some(plain),
            n if n < k => return None,
            _ => k += 1,
        }
    }
}

const MAGIC: [u8; 4] = sealed::MAGIC;
const FORMAT: u8 = sealed::FORMAT;

/// Why a sealed version or record was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The bytes were changed after the writer sealed them.
    #[error("integrity check failed: {0}")]
    Integrity(String),
    /// The writer may not write this object.
    #[error("rejected writer: {0}")]
    Writer(String),
}

/// The AEAD a version is sealed with (recorded in its header, so readers
/// follow whatever each writer chose).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aead {
    Aes256Gcm = 1,
    ChaCha20Poly1305 = 2,
}

impl Aead {
    /// AES-256-GCM where the CPU has AES and carry-less multiply
    /// instructions, ChaCha20-Poly1305 elsewhere (it is faster in software
    /// and constant-time without them). `SAT_ABE_AEAD=aes-256-gcm` or
    /// `chacha20-poly1305` overrides the choice.
    pub fn preferred() -> Aead {
        match std::env::var("SAT_ABE_AEAD").ok().as_deref().map(str::trim) {
            Some("aes-256-gcm") => return Aead::Aes256Gcm,
            Some("chacha20-poly1305") => return Aead::ChaCha20Poly1305,
            _ => {}
        }
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("aes")
                && std::arch::is_x86_feature_detected!("pclmulqdq")
            {
                return Aead::Aes256Gcm;
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if std::arch::is_aarch64_feature_detected!("aes") {
                return Aead::Aes256Gcm;
            }
        }
        Aead::ChaCha20Poly1305
    }

    fn from_byte(b: u8) -> Option<Aead> {
        match b {
            1 => Some(Aead::Aes256Gcm),
            2 => Some(Aead::ChaCha20Poly1305),
            _ => None,
        }
    }

    fn algorithm(self) -> &'static ring::aead::Algorithm {
        match self {
            Aead::Aes256Gcm => &AES_256_GCM,
            Aead::ChaCha20Poly1305 => &CHACHA20_POLY1305,
        }
    }

    fn key(self, data_key: &[u8; 32]) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(self.algorithm(), data_key).expect("a 32-byte key"))
    }

    pub fn name(self) -> &'static str {
        match self {
            Aead::Aes256Gcm => "aes-256-gcm",
            Aead::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }
}

/// Which object a record or version belongs to. Part of every digest and
/// of the authenticated data.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Object {
    Chunk(u64),
    Symbol(String),
}

impl Object {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Object::Chunk(id) => [&[1u8][..], &id.to_le_bytes()].concat(),
            Object::Symbol(name) => [&[2u8][..], name.as_bytes()].concat(),
        }
    }
}

/// The label a protected chunk carries at its home: 16 bytes of a digest
/// of its write policy, then 16 of a digest of its **owner**'s tenant name
/// (the tenant that created it; a name, so that the owner's keys can be
/// issued again). Readers take the write policy from an epoch record only
/// when it matches the first half, so a tenant cannot bring a write policy
/// of its own (see [`crate::chunk::Label`]); the second half names the one
/// tenant that may always say who reads the chain (`abe::vault`, lines of
/// epochs). 128 bits each: finding another policy or name with the same
/// half is a second preimage of that size.
pub fn chunk_label(write: &Policy, owner: &str) -> [u8; 32] {
    let mut label = [0u8; 32];
    label[..16].copy_from_slice(&write_digest(write));
    label[16..].copy_from_slice(&owner_digest(owner));
    label
}

/// Whether `label` is that of chunks with write policy `write`.
pub fn label_has_write_policy(label: &[u8; 32], write: &Policy) -> bool {
    label[..16] == write_digest(write)
}

/// Whether `label` names tenant `tenant` as the chunks' owner.
pub fn label_has_owner(label: &[u8; 32], tenant: &str) -> bool {
    label[16..] == owner_digest(tenant)
}

fn write_digest(write: &Policy) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(b"sat-abe write policy 1\0");
    h.update(write.to_pairs().as_bytes());
    h.finalize()[..16].try_into().expect("16 bytes")
}

fn owner_digest(tenant: &str) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(b"sat-abe owner 1\0");
    h.update(tenant.as_bytes());
    h.finalize()[..16].try_into().expect("16 bytes")
}

/// What one epoch's KEK protects: the chunks of a chain (one CP-ABE wrap
/// for the whole chain, not one per chunk: a 64 MiB chain of 64 KiB chunks
/// would otherwise cost 1,024 wraps, about 40 s) or one symbol. Each
/// chunk's data keys still differ, as the chunk id goes into the HKDF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cover {
    Chunks(Vec<u64>),
    Symbol(String),
}

impl Cover {
    pub fn covers(&self, object: &Object) -> bool {
        match (self, object) {
            (Cover::Chunks(ids), Object::Chunk(id)) => ids.contains(id),
            (Cover::Symbol(a), Object::Symbol(b)) => a == b,
            _ => false,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            Cover::Chunks(ids) => {
                let mut b = vec![1u8];
                for id in ids {
                    b.extend_from_slice(&id.to_le_bytes());
                }
                b
            }
            Cover::Symbol(name) => [&[2u8][..], name.as_bytes()].concat(),
        }
    }
}

/// One key epoch. An epoch is named by the first 8 bytes of a digest of
/// its record ([`EpochRecord::derived_id`]): nobody can make another record
/// under the name of one a home has taken (that would take a second
/// preimage of 64 bits), and two writers that start epochs at once (each
/// with its own random KEK) never give two records one name.
///
/// Epochs are ordered: each names, for every object it covers, its
/// **parent**, the object's newest epoch when it was started (0 for a first
/// epoch). Homes take a chunk's versions only under its newest epoch or a
/// child of it (`server/epochs.rs`), and readers accept an epoch that
/// changes who reads only from an author that could read under its parent
/// (`abe::vault`): so neither sealing under an old epoch nor starting a
/// new one gives a revoked tenant back what it lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochRecord {
    pub cover: Cover,
    pub epoch: u64,
    /// Read and write policies, normalized ([`Policy::to_pairs`]).
    pub read_policy: String,
    pub write_policy: String,
    /// The KEK, wrapped with CP-ABE under the read policy.
    pub wrapped_kek: Vec<u8>,
    /// When the epoch began (seconds since 1970): what a KEK lifetime is
    /// measured from.
    pub created: u64,
    /// The certificate id of the writer that made the epoch.
    pub author: [u8; 32],
    /// Each covered object's parent epoch, in the cover's order (one for a
    /// symbol); 0 for none.
    pub parents: Vec<u64>,
    #[serde(with = "serde_sig")]
    pub signature: [u8; 64],
}

mod serde_sig {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(v: &[u8; 64], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 64], D::Error> {
        let v: Vec<u8> = Deserialize::deserialize(d)?;
        v.try_into()
            .map_err(|_| serde::de::Error::custom("a signature has 64 bytes"))
    }
}

impl EpochRecord {
    /// A new epoch: a fresh KEK wrapped under `read`, signed by `author`.
    /// Returns the record and the KEK.
    pub fn create(
        abe: &dyn super::Abe,
        author: &TenantKey,
        cover: Cover,
        parents: Vec<u64>,
        read: &Policy,
        write: &Policy,
    ) -> Result<(EpochRecord, Kek), super::AbeError> {
        let kek = Kek::new(random::<32>());
        let wrapped_kek = abe.wrap(&author.authority().abe_public, read, kek.as_slice())?;
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut record = EpochRecord {
            cover,
            epoch: 0,
            read_policy: read.to_pairs(),
            write_policy: write.to_pairs(),
            wrapped_kek,
            created,
            author: author.certificate().id(),
            parents,
            signature: [0; 64],
        };
        record.epoch = record.derived_id();
        record.signature = author.sign(&record.signed_bytes());
        Ok((record, kek))
    }

    /// The id a record's content names it by: the first 8 bytes of a
    /// SHA-256 digest of everything it signs but the id itself.
    pub fn derived_id(&self) -> u64 {
        let mut h = Sha256::new();
        h.update(b"sat-abe epoch id 2\0");
        h.update(self.signed_fields());
        u64::from_le_bytes(h.finalize()[..8].try_into().expect("8 bytes"))
    }

    /// The parent epoch this record names for `object`, None when it does
    /// not cover it.
    pub fn parent_of(&self, object: &Object) -> Option<u64> {
        let at = match (&self.cover, object) {
            (Cover::Chunks(ids), Object::Chunk(id)) => ids.iter().position(|i| i == id)?,
            (Cover::Symbol(a), Object::Symbol(b)) if a == b => 0,
            _ => return None,
        };
        self.parents.get(at).copied()
    }

    fn signed_bytes(&self) -> Vec<u8> {
        let mut b = b"sat-abe epoch 2\0".to_vec();
        b.extend_from_slice(&self.epoch.to_le_bytes());
        b.extend_from_slice(&self.signed_fields());
        b
    }

    fn signed_fields(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let mut field = |f: &[u8]| {
            b.extend_from_slice(&(f.len() as u64).to_le_bytes());
            b.extend_from_slice(f);
        };
        field(&self.cover.bytes());
        field(self.read_policy.as_bytes());
        field(self.write_policy.as_bytes());
        field(&self.wrapped_kek);
        field(&self.created.to_le_bytes());
        field(&self.author);
        let parents: Vec<u8> = self.parents.iter().flat_map(|p| p.to_le_bytes()).collect();
        field(&parents);
        b
    }

    /// What versions bind in their authenticated data.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.signed_bytes());
        h.update(self.signature);
        h.finalize().into()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record serializes")
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<EpochRecord, SealError> {
        serde_json::from_slice(bytes)
            .map_err(|e| SealError::Integrity(format!("an epoch record is damaged: {e}")))
    }

    /// The record's policies, parsed.
    pub fn policies(&self) -> Result<(Policy, Policy), SealError> {
        let p = |t: &str| {
            Policy::parse(&t.replace('"', ""))
                .map_err(|e| SealError::Integrity(format!("an epoch record's policy: {e}")))
        };
        Ok((p(&self.read_policy)?, p(&self.write_policy)?))
    }

    /// Accepts the record for `object` and `epoch` when its author (whose
    /// certificate the caller found by [`EpochRecord::author`] and checked
    /// against the authority) satisfies its write policy and signed it,
    /// and, for chunks, its write policy is the one the home's `label`
    /// names.
    pub fn verify(
        &self,
        object: &Object,
        epoch: u64,
        label: Option<&[u8; 32]>,
        author: &Certificate,
    ) -> Result<(), SealError> {
        if !self.cover.covers(object) || self.epoch != epoch {
            return Err(SealError::Integrity(format!(
                "the record found for epoch {epoch:016x} of {object:?} is for {:?}, epoch {:016x}",
                self.cover, self.epoch
            )));
        }
        let covered = match &self.cover {
            Cover::Chunks(ids) => ids.len(),
            Cover::Symbol(_) => 1,
        };
        if self.epoch != self.derived_id() || self.parents.len() != covered {
            return Err(SealError::Integrity(format!(
                "the record found for epoch {epoch:016x} is not the one that name was made for"
            )));
        }
        // The signature before anything is parsed: unsigned text never
        // reaches the policy parser.
        if author.id() != self.author
            || !author.verify_signature(&self.signed_bytes(), &self.signature)
        {
            return Err(SealError::Integrity(format!(
                "epoch {epoch:016x}'s record is not signed by its author"
            )));
        }
        let (_, write) = self.policies()?;
        if let Some(label) = label {
            if !label_has_write_policy(label, &write) {
                return Err(SealError::Writer(format!(
                    "epoch {epoch:016x} names the write policy {write}, which is not the one \
                     the chunk was created with"
                )));
            }
        }
        if !author.satisfies(&write) {
            return Err(SealError::Writer(format!(
                "epoch {epoch:016x} was made by tenant {:?} with attributes {:?}, which do \
                 not satisfy the write policy {write}",
                author.tenant, author.attributes
            )));
        }
        Ok(())
    }
}

/// The fixed fields of a sealed version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub aead: Aead,
    pub epoch: u64,
    pub version: u64,
    /// The writer's certificate id.
    pub writer: [u8; 32],
    pub nonce: [u8; 12],
    pub signature: [u8; 64],
    /// The epoch's parent for this object (as its record names it): what
    /// the home checks the order of epochs by, without the record.
    pub parent: u64,
}

// Header layout: magic 0..4, format 4, aead 5, reserved 6..8, epoch 8..16,
// version 16..24, writer 24..56, nonce 56..68, reserved 68..72,
// signature 72..136, parent epoch 136..144 (`crate::chunk::sealed`).

impl Header {
    /// The header of `sealed`, None when the region was never written.
    pub fn parse(sealed: &[u8]) -> Result<Option<Header>, SealError> {
        if plain_len(sealed.len()).is_none() {
            return Err(SealError::Integrity(format!(
                "{} bytes cannot hold a sealed version",
                sealed.len()
            )));
        }
        if sealed[..4] == [0; 4] && sealed.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if sealed[..4] != MAGIC || sealed[4] != FORMAT {
            return Err(SealError::Integrity(
                "the bytes are not a sealed version of this format".into(),
            ));
        }
        // The reserved bytes are outside the signature: a version whose
        // reserved bytes are not zero is not one a writer sealed (one
        // version, one encoding).
        if sealed[6..8] != [0; 2] || sealed[68..72] != [0; 4] {
            return Err(SealError::Integrity(
                "a sealed version's reserved bytes are not zero: it was altered".into(),
            ));
        }
        let aead = Aead::from_byte(sealed[5])
            .ok_or_else(|| SealError::Integrity(format!("unknown AEAD {}", sealed[5])))?;
        let u64_at = |at: usize| u64::from_le_bytes(sealed[at..at + 8].try_into().expect("8"));
        Ok(Some(Header {
            aead,
            epoch: u64_at(8),
            version: u64_at(16),
            writer: sealed[24..56].try_into().expect("32"),
            nonce: sealed[56..68].try_into().expect("12"),
            signature: sealed[72..136].try_into().expect("64"),
            parent: u64_at(sealed::PARENT.start),
        }))
    }

    fn write(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&MAGIC);
        out[4] = FORMAT;
        out[5] = self.aead as u8;
        out[6..8].fill(0);
        out[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        out[16..24].copy_from_slice(&self.version.to_le_bytes());
        out[24..56].copy_from_slice(&self.writer);
        out[56..68].copy_from_slice(&self.nonce);
        out[68..72].fill(0);
        out[72..136].copy_from_slice(&self.signature);
        out[sealed::PARENT].copy_from_slice(&self.parent.to_le_bytes());
    }

    /// The authenticated data: everything the version is bound to.
    fn aad(&self, object: &Object, record: &[u8; 32]) -> Vec<u8> {
        let mut a = b"sat-abe version 2\0".to_vec();
        a.push(self.aead as u8);
        a.extend_from_slice(&self.epoch.to_le_bytes());
        a.extend_from_slice(&self.parent.to_le_bytes());
        a.extend_from_slice(&self.version.to_le_bytes());
        a.extend_from_slice(&self.writer);
        a.extend_from_slice(record);
        a.extend_from_slice(&object.bytes());
        a
    }

    /// What the writer signs: a BLAKE3 digest of the authenticated data,
    /// the nonce and each segment's digest (of its ciphertext and tag), in
    /// order. BLAKE3 rather than SHA-256 because this pass runs over every
    /// byte of every version on both sides: measured here on 1 MiB, SHA-256
    /// took about as long as the AEAD itself, BLAKE3 a fraction of it.
    fn signed_digest(&self, aad: &[u8], segments: &[[u8; 32]]) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(aad);
        h.update(&self.nonce);
        h.update(&(segments.len() as u64).to_le_bytes());
        for d in segments {
            h.update(d);
        }
        h.finalize().into()
    }

    /// Segment `i` of `count`: its nonce (the version's, with the index
    /// folded into the last 4 bytes; each data key seals one version, so
    /// no (key, nonce) pair repeats) and authenticated data (the index
    /// and count, so segments cannot be reordered, dropped or added).
    fn segment(&self, aad: &[u8], i: usize, count: usize) -> (Nonce, Vec<u8>) {
        let mut nonce = self.nonce;
        for (b, x) in nonce[8..].iter_mut().zip((i as u32).to_be_bytes()) {
            *b ^= x;
        }
        let mut a = aad.to_vec();
        a.extend_from_slice(&(i as u64).to_le_bytes());
        a.extend_from_slice(&(count as u64).to_le_bytes());
        (Nonce::assume_unique_for_key(nonce), a)
    }
}

/// The data key of one version: HKDF-SHA256 of the KEK over the object,
/// epoch and version. A version's key is used for that version only.
fn data_key(kek: &[u8; 32], object: &Object, epoch: u64, version: u64) -> Zeroizing<[u8; 32]> {
    let mut info = b"sat-abe data key 1\0".to_vec();
    info.extend_from_slice(&object.bytes());
    info.extend_from_slice(&epoch.to_le_bytes());
    info.extend_from_slice(&version.to_le_bytes());
    let mut key = Zeroizing::new([0u8; 32]);
    Hkdf::<Sha256>::new(None, kek)
        .expand(&info, key.as_mut_slice())
        .expect("32 bytes is a valid HKDF-SHA256 length");
    key
}

/// A key-encryption key: an epoch's secret, from which each version's data
/// key is derived. Wiped when dropped.
pub type Kek = Zeroizing<[u8; 32]>;

/// What a version is sealed under: its object, the epoch's record digest
/// and KEK.
pub struct SealKey<'a> {
    pub object: &'a Object,
    pub epoch: u64,
    /// The epoch's parent for `object` ([`EpochRecord::parent_of`]).
    pub parent: u64,
    pub record: [u8; 32],
    pub kek: &'a [u8; 32],
}

fn segment_digest(ciphertext: &[u8], tag: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(ciphertext);
    h.update(tag);
    h.finalize().into()
}

/// Splits `bytes` into its segments (one, empty, when it is empty).
fn split_segments(bytes: &mut [u8]) -> Vec<&mut [u8]> {
    if bytes.is_empty() {
        return vec![bytes];
    }
    bytes.chunks_mut(SEGMENT).collect()
}

/// `f` over `items` in order, on two threads when `parallel` (each its
/// half of the items), else on this one.
fn in_order<T: Send, R: Send>(
    mut items: Vec<T>,
    parallel: bool,
    f: &(impl Fn(T) -> R + Sync),
) -> Vec<R> {
    if !parallel || items.len() < 2 {
        return items.into_iter().map(f).collect();
    }
    // A thread started per version (27 us here) rather than a pool's:
    // rayon's pool, tried in alternated runs of the benchmark, did no
    // better within this machine's noise, so no dependency for it.
    let second = items.split_off(items.len() / 2);
    std::thread::scope(|s| {
        let first = s.spawn(|| items.into_iter().map(f).collect::<Vec<R>>());
        let second: Vec<R> = second.into_iter().map(f).collect();
        let mut all = first.join().expect("a sealing thread does not panic");
        all.extend(second);
        all
    })
}

/// Seals `plain` as `version` into `out` (exactly [`sealed_len`] bytes),
/// signed by `writer`.
pub fn seal(
    key: &SealKey<'_>,
    version: u64,
    aead: Aead,
    writer: &TenantKey,
    plain: &[u8],
    out: &mut [u8],
) {
    assert_eq!(out.len(), sealed_len(plain.len()), "sealed size");
    let mut header = Header {
        aead,
        epoch: key.epoch,
        version,
        writer: writer.certificate().id(),
        nonce: random::<12>(),
        signature: [0; 64],
        parent: key.parent,
    };
    let aad = header.aad(key.object, &key.record);
    let lsk = aead.key(&data_key(key.kek, key.object, key.epoch, version));
    let count = segments(plain.len());
    let (body, tags) = out[HEADER..].split_at_mut(plain.len());
    let items: Vec<_> = split_segments(body)
        .into_iter()
        .zip(tags.chunks_mut(TAG))
        .enumerate()
        .collect();
    let digests = in_order(items, plain.len() >= PARALLEL, &|(i, (b, t))| {
        let from = i * SEGMENT;
        b.copy_from_slice(&plain[from..from + b.len()]);
        let (nonce, a) = header.segment(&aad, i, count);
        let tag = lsk
            .seal_in_place_separate_tag(nonce, Aad::from(&a), b)
            .expect("in-memory sealing does not fail");
        t.copy_from_slice(tag.as_ref());
        segment_digest(b, t)
    });
    header.signature = writer.sign(&header.signed_digest(&aad, &digests));
    header.write(out);
}

/// The checks that need no pass over the bytes: the certificate is the
/// one the version names, it satisfies the write policy, the epoch is the
/// key's.
fn check_writer(
    header: &Header,
    key: &SealKey<'_>,
    write: &Policy,
    writer: &Certificate,
) -> Result<(), SealError> {
    if writer.id() != header.writer {
        return Err(SealError::Integrity(
            "the certificate given is not the one the version names".into(),
        ));
    }
    if !writer.satisfies(write) {
        return Err(SealError::Writer(format!(
            "version {} was written by tenant {:?} with attributes {:?}, which do not satisfy \
             the write policy {write}",
            header.version, writer.tenant, writer.attributes
        )));
    }
    if header.epoch != key.epoch {
        return Err(SealError::Integrity("opened under another epoch".into()));
    }
    if header.parent != key.parent {
        return Err(SealError::Integrity(format!(
            "the version names {:016x} as its epoch's parent, but the epoch's record names \
             {:016x}",
            header.parent, key.parent
        )));
    }
    Ok(())
}

/// Checks and opens `sealed` into `plain` (exactly
/// `plain_len(sealed.len())` bytes): the writer (the certificate the header
/// names, checked against the authority by the caller) must satisfy
/// `write` and have signed these bytes, and every segment must decrypt.
/// On any failure `plain` holds zeros, never a part of the data.
pub fn open(
    header: &Header,
    key: &SealKey<'_>,
    write: &Policy,
    writer: &Certificate,
    sealed: &[u8],
    plain: &mut [u8],
) -> Result<(), SealError> {
    assert_eq!(sealed.len(), sealed_len(plain.len()), "sealed size");
    let checked = check_writer(header, key, write, writer);
    if checked.is_err() {
        plain.fill(0);
        return checked;
    }
    let aad = header.aad(key.object, &key.record);
    let lsk = header
        .aead
        .key(&data_key(key.kek, key.object, key.epoch, header.version));
    let count = segments(plain.len());
    let n = plain.len();
    let (body, tags) = sealed[HEADER..].split_at(n);
    let large = n >= PARALLEL;
    let items: Vec<_> = split_segments(plain)
        .into_iter()
        .zip(tags.chunks(TAG))
        .enumerate()
        .collect();
    // Each segment: its digest, then its decryption (the ciphertext copied
    // into the plaintext and opened there), on two threads when large.
    let results = in_order(items, large, &|(i, (p, t))| {
        let from = i * SEGMENT;
        let b = &body[from..from + p.len()];
        let digest = segment_digest(b, t);
        p.copy_from_slice(b);
        let (nonce, a) = header.segment(&aad, i, count);
        let tag: [u8; TAG] = t.try_into().expect("16-byte tag");
        let ok = lsk
            .open_in_place_separate_tag(nonce, Aad::from(&a), Tag::from(tag), p, 0..)
            .is_ok();
        (digest, ok)
    });
    let digests: Vec<[u8; 32]> = results.iter().map(|&(d, _)| d).collect();
    let signed = writer.verify_signature(&header.signed_digest(&aad, &digests), &header.signature);
    let decrypted = results.iter().all(|&(_, ok)| ok);
    if signed && decrypted {
        return Ok(());
    }
    plain.fill(0);
    Err(SealError::Integrity(if signed {
        format!(
            "version {} does not decrypt: its bytes, epoch or binding were changed",
            header.version
        )
    } else {
        format!(
            "version {}'s signature does not match its bytes",
            header.version
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abe::keys::AuthorityKeys;
    use crate::abe::{Abe, Ac17};

    struct World {
        auth: AuthorityKeys,
        alice: TenantKey,
        reader: TenantKey,
    }

    fn world() -> World {
        let auth = AuthorityKeys::setup().unwrap();
        let alice = auth.issue("alice", &["tenant_a", "writer"]).unwrap();
        let reader = auth.issue("rita", &["tenant_a"]).unwrap();
        World {
            auth,
            alice,
            reader,
        }
    }

    fn record(w: &World) -> (EpochRecord, Kek, Policy) {
        let read = Policy::parse("tenant_a").unwrap();
        let write = Policy::parse("tenant_a and writer").unwrap();
        let (r, kek) = EpochRecord::create(
            &Ac17,
            &w.alice,
            Cover::Chunks(vec![7, 9]),
            vec![0, 0],
            &read,
            &write,
        )
        .unwrap();
        (r, kek, write)
    }

    #[test]
    fn a_sealed_version_opens_only_as_it_was_sealed() {
        let w = world();
        let (rec, kek, write) = record(&w);
        let label = chunk_label(&write, "alice");
        rec.verify(
            &Object::Chunk(7),
            rec.epoch,
            Some(&label),
            w.alice.certificate(),
        )
        .unwrap();
        assert!(rec
            .verify(
                &Object::Chunk(8),
                rec.epoch,
                Some(&label),
                w.alice.certificate()
            )
            .is_err());
        // The reader unwraps the KEK with its own key.
        let unwrapped = Ac17.unwrap(w.reader.abe_key(), &rec.wrapped_kek).unwrap();
        assert_eq!(unwrapped.as_slice(), kek.as_slice());
        let object = Object::Chunk(7);
        let key = SealKey {
            object: &object,
            epoch: rec.epoch,
            parent: 0,
            record: rec.digest(),
            kek: &kek,
        };
        let alice = w.alice.certificate();
        // One segment, several, and several on two threads (the last short).
        for (aead, size) in [
            (Aead::Aes256Gcm, 1000),
            (Aead::ChaCha20Poly1305, SEGMENT + 10),
            (Aead::Aes256Gcm, 3 * SEGMENT + 5),
        ] {
            let plain: Vec<u8> = (0..size as u32).map(|i| (i * 7) as u8).collect();
            let mut sealed = vec![0u8; sealed_len(plain.len())];
            assert_eq!(plain_len(sealed.len()), Some(size));
            seal(&key, 5, aead, &w.alice, &plain, &mut sealed);
            assert!(
                !sealed.windows(64).any(|win| win == &plain[100..164]),
                "plaintext visible"
            );
            let h = Header::parse(&sealed).unwrap().unwrap();
            assert_eq!((h.aead, h.epoch, h.version), (aead, rec.epoch, 5));
            let mut out = vec![0u8; plain.len()];
            open(&h, &key, &write, alice, &sealed, &mut out).unwrap();
            assert_eq!(out, plain);

            // Every byte of the version is covered: flip bytes all over it,
            // every tag included.
            let tags = HEADER + size..sealed.len();
            let mut at_list: Vec<usize> =
                (0..sealed.len()).step_by(sealed.len() / 97 + 1).collect();
            at_list.extend(tags.step_by(5));
            for at in at_list {
                let mut bad = sealed.clone();
                bad[at] ^= 0x20;
                let refused = match Header::parse(&bad) {
                    Err(_) => true,
                    Ok(None) => false,
                    Ok(Some(h)) => {
                        let r = open(&h, &key, &write, alice, &bad, &mut out);
                        if r.is_err() {
                            assert!(
                                out.iter().all(|&x| x == 0),
                                "plaintext left after a failure"
                            );
                        }
                        r.is_err()
                    }
                };
                assert!(refused, "a flip at byte {at} of {size} went unnoticed");
            }
            // Two segments swapped: refused.
            if size >= 2 * SEGMENT {
                let mut bad = sealed.clone();
                let (a, b) = bad[HEADER..HEADER + 2 * SEGMENT].split_at_mut(SEGMENT);
                a.swap_with_slice(&mut b[..SEGMENT]);
                assert!(open(&h, &key, &write, alice, &bad, &mut out).is_err());
            }
            // Moved to another chunk: refused.
            let other = Object::Chunk(8);
            let moved = SealKey {
                object: &other,
                ..key
            };
            assert!(open(&h, &moved, &write, alice, &sealed, &mut out).is_err());
        }
        assert_eq!(plain_len(HEADER + TAG + 7), Some(7));
        assert_eq!(plain_len(HEADER + TAG - 1), None);
    }

    #[test]
    fn an_epoch_is_named_by_its_content_and_a_version_by_its_parent() {
        let w = world();
        let (rec, kek, write) = record(&w);
        let label = chunk_label(&write, "alice");
        let alice = w.alice.certificate();
        rec.verify(&Object::Chunk(7), rec.epoch, Some(&label), alice)
            .unwrap();
        // Another record under this one's name (its parent changed, then
        // signed again by a writer): refused, whoever signed it.
        let mut other = rec.clone();
        other.parents = vec![0x1234, 0];
        other.signature = w.alice.sign(&other.signed_bytes());
        let e = other
            .verify(&Object::Chunk(7), rec.epoch, Some(&label), alice)
            .unwrap_err();
        assert!(e.to_string().contains("not the one that name"), "{e}");
        // One parent per covered chunk.
        let mut short = rec.clone();
        short.parents = vec![0];
        short.epoch = short.derived_id();
        short.signature = w.alice.sign(&short.signed_bytes());
        assert!(short
            .verify(&Object::Chunk(7), short.epoch, Some(&label), alice)
            .is_err());
        // A version that names another parent than its record does.
        let object = Object::Chunk(9);
        assert_eq!(rec.parent_of(&object), Some(0));
        assert_eq!(rec.parent_of(&Object::Chunk(8)), None);
        let lying = SealKey {
            object: &object,
            epoch: rec.epoch,
            parent: 77,
            record: rec.digest(),
            kek: &kek,
        };
        let mut sealed = vec![0u8; sealed_len(10)];
        seal(
            &lying,
            2,
            Aead::Aes256Gcm,
            &w.alice,
            b"0123456789",
            &mut sealed,
        );
        let h = Header::parse(&sealed).unwrap().unwrap();
        assert_eq!(h.parent, 77);
        assert_eq!(
            crate::chunk::sealed::epoch_link(&sealed),
            Some((rec.epoch, 77)),
            "the home reads what the header says"
        );
        let truthful = SealKey { parent: 0, ..lying };
        let mut out = [0u8; 10];
        let e = open(&h, &truthful, &write, alice, &sealed, &mut out).unwrap_err();
        assert!(e.to_string().contains("as its epoch's parent"), "{e}");
        assert_eq!(out, [0u8; 10]);
    }

    #[test]
    fn a_reader_that_may_not_write_cannot_sign_a_version_readers_accept() {
        let w = world();
        let (rec, kek, write) = record(&w);
        let object = Object::Chunk(7);
        let key = SealKey {
            object: &object,
            epoch: rec.epoch,
            parent: 0,
            record: rec.digest(),
            kek: &kek,
        };
        let mut sealed = vec![0u8; sealed_len(10)];
        seal(
            &key,
            6,
            Aead::Aes256Gcm,
            &w.reader,
            b"forged!!!!",
            &mut sealed,
        );
        let h = Header::parse(&sealed).unwrap().unwrap();
        let mut out = [0u8; 10];
        let e = open(&h, &key, &write, w.reader.certificate(), &sealed, &mut out).unwrap_err();
        assert!(matches!(e, SealError::Writer(_)), "{e}");
        // Nor can it pass alice's certificate off as its own.
        assert!(open(&h, &key, &write, w.alice.certificate(), &sealed, &mut out).is_err());
        assert_eq!(out, [0u8; 10]);
        // Nor make an epoch of its own with a write policy it satisfies.
        let mine = Policy::parse("tenant_a").unwrap();
        let (rogue, _) = EpochRecord::create(
            &Ac17,
            &w.reader,
            Cover::Chunks(vec![7]),
            vec![0],
            &mine,
            &mine,
        )
        .unwrap();
        let e = rogue
            .verify(
                &object,
                rogue.epoch,
                Some(&chunk_label(&write, "alice")),
                w.reader.certificate(),
            )
            .unwrap_err();
        assert!(matches!(e, SealError::Writer(_)), "{e}");
        let _ = &w.auth;
    }

    #[test]
    fn never_written_is_all_zeros_and_nothing_else() {
        assert_eq!(Header::parse(&vec![0u8; sealed_len(10)]).unwrap(), None);
        let mut b = vec![0u8; sealed_len(10)];
        b[HEADER + 3] = 1;
        assert!(Header::parse(&b).is_err());
        assert!(Header::parse(&[0u8; 5]).is_err());
    }
}
