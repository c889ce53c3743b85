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

use super::keys::{random, Certificate, TenantKey};
use super::Policy;

/// Bytes before the ciphertext in a sealed version.
pub const HEADER: usize = 136;
/// The AEAD tag after the ciphertext.
pub const TAG: usize = 16;
/// What sealing adds to each chunk's bytes.
pub const OVERHEAD: usize = HEADER + TAG;

const MAGIC: [u8; 4] = *b"SATe";
const FORMAT: u8 = 1;

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
        match std::env::var("SAT_ABE_AEAD").ok().as_deref() {
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

/// The label a protected chunk carries at its home: the digest of its
/// write policy. Readers take the write policy from the epoch record only
/// when it hashes to this label, so a tenant cannot bring a write policy
/// of its own (see [`crate::chunk::Label`]).
pub fn write_policy_label(write: &Policy) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"sat-abe write policy 1\0");
    h.update(write.to_pairs().as_bytes());
    h.finalize().into()
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

/// One key epoch. Epochs are named by a random 64-bit id rather than a
/// counter: two writers that start epochs for the same chunks at once
/// (each inside its own write scope, on chunks of different chains) can
/// then never give two records the same name. The order of versions is
/// kept by their version numbers, not by epochs.
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
        read: &Policy,
        write: &Policy,
    ) -> Result<(EpochRecord, [u8; 32]), super::AbeError> {
        let epoch = u64::from_le_bytes(random::<8>());
        let kek = random::<32>();
        let wrapped_kek = abe.wrap(&author.authority().abe_public, read, &kek)?;
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut record = EpochRecord {
            cover,
            epoch,
            read_policy: read.to_pairs(),
            write_policy: write.to_pairs(),
            wrapped_kek,
            created,
            author: author.certificate().id(),
            signature: [0; 64],
        };
        record.signature = author.sign(&record.signed_bytes());
        Ok((record, kek))
    }

    fn signed_bytes(&self) -> Vec<u8> {
        let mut b = b"sat-abe epoch 1\0".to_vec();
        let mut field = |f: &[u8]| {
            b.extend_from_slice(&(f.len() as u64).to_le_bytes());
            b.extend_from_slice(f);
        };
        field(&self.cover.bytes());
        field(&self.epoch.to_le_bytes());
        field(self.read_policy.as_bytes());
        field(self.write_policy.as_bytes());
        field(&self.wrapped_kek);
        field(&self.created.to_le_bytes());
        field(&self.author);
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
        let (_, write) = self.policies()?;
        if let Some(label) = label {
            if &write_policy_label(&write) != label {
                return Err(SealError::Writer(format!(
                    "epoch {epoch:016x} names the write policy {write}, which is not the one \
                     the chunk was created with"
                )));
            }
        }
        if author.id() != self.author
            || !author.verify_signature(&self.signed_bytes(), &self.signature)
        {
            return Err(SealError::Integrity(format!(
                "epoch {epoch:016x}'s record is not signed by its author"
            )));
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
}

// Header layout: magic 0..4, format 4, aead 5, reserved 6..8, epoch 8..16,
// version 16..24, writer 24..56, nonce 56..68, reserved 68..72,
// signature 72..136.

impl Header {
    /// The header of `sealed`, None when the region was never written.
    pub fn parse(sealed: &[u8]) -> Result<Option<Header>, SealError> {
        if sealed.len() < OVERHEAD {
            return Err(SealError::Integrity(format!(
                "{} bytes cannot hold a sealed version (at least {OVERHEAD})",
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
    }

    /// The authenticated data: everything the version is bound to.
    fn aad(&self, object: &Object, record: &[u8; 32]) -> Vec<u8> {
        let mut a = b"sat-abe version 1\0".to_vec();
        a.push(self.aead as u8);
        a.extend_from_slice(&self.epoch.to_le_bytes());
        a.extend_from_slice(&self.version.to_le_bytes());
        a.extend_from_slice(&self.writer);
        a.extend_from_slice(record);
        a.extend_from_slice(&object.bytes());
        a
    }

    /// What the writer signs: a BLAKE3 digest of the authenticated data,
    /// the nonce, the ciphertext and the tag. BLAKE3 rather than SHA-256
    /// because this pass runs over every byte of every version on both
    /// sides: measured here on 1 MiB, SHA-256 took about as long as the
    /// AEAD itself, BLAKE3 a fraction of it.
    fn signed_digest(&self, object: &Object, record: &[u8; 32], body: &[u8]) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(&self.aad(object, record));
        h.update(&self.nonce);
        h.update(body);
        h.finalize().into()
    }
}

/// The data key of one version: HKDF-SHA256 of the KEK over the object,
/// epoch and version. A version's key is used for that version only.
fn data_key(kek: &[u8; 32], object: &Object, epoch: u64, version: u64) -> [u8; 32] {
    let mut info = b"sat-abe data key 1\0".to_vec();
    info.extend_from_slice(&object.bytes());
    info.extend_from_slice(&epoch.to_le_bytes());
    info.extend_from_slice(&version.to_le_bytes());
    let mut key = [0u8; 32];
    Hkdf::<Sha256>::new(None, kek)
        .expand(&info, &mut key)
        .expect("32 bytes is a valid HKDF-SHA256 length");
    key
}

/// What a version is sealed under: its object, the epoch's record digest
/// and KEK.
pub struct SealKey<'a> {
    pub object: &'a Object,
    pub epoch: u64,
    pub record: [u8; 32],
    pub kek: &'a [u8; 32],
}

/// Seals `plain` as `version` into `out` (exactly `plain.len() + OVERHEAD`
/// bytes), signed by `writer`.
pub fn seal(
    key: &SealKey<'_>,
    version: u64,
    aead: Aead,
    writer: &TenantKey,
    plain: &[u8],
    out: &mut [u8],
) {
    assert_eq!(out.len(), plain.len() + OVERHEAD, "sealed size");
    let mut header = Header {
        aead,
        epoch: key.epoch,
        version,
        writer: writer.certificate().id(),
        nonce: random::<12>(),
        signature: [0; 64],
    };
    let aad = header.aad(key.object, &key.record);
    let dk = data_key(key.kek, key.object, key.epoch, version);
    let (body, tag_out) = out[HEADER..].split_at_mut(plain.len());
    body.copy_from_slice(plain);
    // Each data key seals exactly one version, and the nonce is random on
    // top of that: a writer that crashed and sealed the same version twice
    // still never reuses a (key, nonce) pair.
    let tag = aead
        .key(&dk)
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(header.nonce),
            Aad::from(&aad),
            body,
        )
        .expect("in-memory sealing does not fail");
    tag_out.copy_from_slice(tag.as_ref());
    let digest = header.signed_digest(key.object, &key.record, &out[HEADER..]);
    header.signature = writer.sign(&digest);
    header.write(out);
}

/// Checks that `writer` (the certificate the header names, checked against
/// the authority by the caller) signed `sealed` and may write it under
/// `write`.
pub fn verify_writer(
    header: &Header,
    object: &Object,
    record: &[u8; 32],
    write: &Policy,
    writer: &Certificate,
    sealed: &[u8],
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
    let digest = header.signed_digest(object, record, &sealed[HEADER..]);
    if !writer.verify_signature(&digest, &header.signature) {
        return Err(SealError::Integrity(format!(
            "version {}'s signature does not match its bytes",
            header.version
        )));
    }
    Ok(())
}

/// Opens `sealed` into `plain` (exactly `sealed.len() - OVERHEAD` bytes).
/// On an integrity error `plain` holds no part of the data.
pub fn open(
    header: &Header,
    key: &SealKey<'_>,
    sealed: &[u8],
    plain: &mut [u8],
) -> Result<(), SealError> {
    assert_eq!(sealed.len(), plain.len() + OVERHEAD, "sealed size");
    if header.epoch != key.epoch {
        return Err(SealError::Integrity("opened under another epoch".into()));
    }
    let aad = header.aad(key.object, &key.record);
    let dk = data_key(key.kek, key.object, key.epoch, header.version);
    let n = plain.len();
    plain.copy_from_slice(&sealed[HEADER..HEADER + n]);
    let tag: [u8; TAG] = sealed[HEADER + n..].try_into().expect("16-byte tag");
    let r = header.aead.key(&dk).open_in_place_separate_tag(
        Nonce::assume_unique_for_key(header.nonce),
        Aad::from(&aad),
        Tag::from(tag),
        plain,
        0..,
    );
    r.map(|_| ()).map_err(|_| {
        plain.fill(0);
        SealError::Integrity(format!(
            "version {} does not decrypt: its bytes, epoch or binding were changed",
            header.version
        ))
    })
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

    fn record(w: &World) -> (EpochRecord, [u8; 32], Policy) {
        let read = Policy::parse("tenant_a").unwrap();
        let write = Policy::parse("tenant_a and writer").unwrap();
        let (r, kek) =
            EpochRecord::create(&Ac17, &w.alice, Cover::Chunks(vec![7, 9]), &read, &write).unwrap();
        (r, kek, write)
    }

    #[test]
    fn a_sealed_version_opens_only_as_it_was_sealed() {
        let w = world();
        let (rec, kek, write) = record(&w);
        let label = write_policy_label(&write);
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
        assert_eq!(unwrapped, kek);
        let object = Object::Chunk(7);
        let key = SealKey {
            object: &object,
            epoch: rec.epoch,
            record: rec.digest(),
            kek: &kek,
        };
        for aead in [Aead::Aes256Gcm, Aead::ChaCha20Poly1305] {
            let plain: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
            let mut sealed = vec![0u8; plain.len() + OVERHEAD];
            seal(&key, 5, aead, &w.alice, &plain, &mut sealed);
            assert!(
                !sealed.windows(64).any(|win| win == &plain[100..164]),
                "plaintext visible"
            );
            let h = Header::parse(&sealed).unwrap().unwrap();
            assert_eq!((h.aead, h.epoch, h.version), (aead, rec.epoch, 5));
            verify_writer(
                &h,
                &object,
                &key.record,
                &write,
                w.alice.certificate(),
                &sealed,
            )
            .unwrap();
            let mut out = vec![0u8; plain.len()];
            open(&h, &key, &sealed, &mut out).unwrap();
            assert_eq!(out, plain);

            // Every byte of the version is covered: flip each one in turn.
            for at in (0..sealed.len()).step_by(37) {
                let mut bad = sealed.clone();
                bad[at] ^= 0x20;
                let refused = match Header::parse(&bad) {
                    Err(_) => true,
                    Ok(None) => false,
                    Ok(Some(h)) => {
                        verify_writer(
                            &h,
                            &object,
                            &key.record,
                            &write,
                            w.alice.certificate(),
                            &bad,
                        )
                        .is_err()
                            || open(&h, &key, &bad, &mut out).is_err()
                    }
                };
                assert!(refused, "a flip at byte {at} went unnoticed");
            }
            // Moved to another chunk: refused.
            let other = Object::Chunk(8);
            let moved = SealKey {
                object: &other,
                ..key
            };
            assert!(open(&h, &moved, &sealed, &mut out).is_err());
        }
    }

    #[test]
    fn a_reader_that_may_not_write_cannot_sign_a_version_readers_accept() {
        let w = world();
        let (rec, kek, write) = record(&w);
        let object = Object::Chunk(7);
        let key = SealKey {
            object: &object,
            epoch: rec.epoch,
            record: rec.digest(),
            kek: &kek,
        };
        let mut sealed = vec![0u8; 10 + OVERHEAD];
        seal(
            &key,
            6,
            Aead::Aes256Gcm,
            &w.reader,
            b"forged!!!!",
            &mut sealed,
        );
        let h = Header::parse(&sealed).unwrap().unwrap();
        let e = verify_writer(
            &h,
            &object,
            &key.record,
            &write,
            w.reader.certificate(),
            &sealed,
        )
        .unwrap_err();
        assert!(matches!(e, SealError::Writer(_)), "{e}");
        // Nor can it pass alice's certificate off as its own.
        assert!(verify_writer(
            &h,
            &object,
            &key.record,
            &write,
            w.alice.certificate(),
            &sealed
        )
        .is_err());
        // Nor make an epoch of its own with a write policy it satisfies.
        let mine = Policy::parse("tenant_a").unwrap();
        let (rogue, _) =
            EpochRecord::create(&Ac17, &w.reader, Cover::Chunks(vec![7]), &mine, &mine).unwrap();
        let e = rogue
            .verify(
                &object,
                rogue.epoch,
                Some(&write_policy_label(&write)),
                w.reader.certificate(),
            )
            .unwrap_err();
        assert!(matches!(e, SealError::Writer(_)), "{e}");
        let _ = &w.auth;
    }

    #[test]
    fn never_written_is_all_zeros_and_nothing_else() {
        assert_eq!(Header::parse(&[0u8; OVERHEAD + 10]).unwrap(), None);
        let mut b = vec![0u8; OVERHEAD + 10];
        b[OVERHEAD + 3] = 1;
        assert!(Header::parse(&b).is_err());
        assert!(Header::parse(&[0u8; 5]).is_err());
    }
}
