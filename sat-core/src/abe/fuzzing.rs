//! The encryption layer's parsers under `sat-fuzz` (feature `fuzz`): what
//! a hostile writer, a tampering server or an edited key file can make a
//! reader do. Each target parses bytes from an attacker and checks the
//! layer's promise on them: no panic, and no sealed version that opens
//! unless it is the one the writer sealed.

use std::sync::OnceLock;

use super::keys::{AuthorityKeys, Certificate, TenantKey};
use super::policy::Policy;
use super::seal::{self, Aead, Cover, EpochRecord, Header, Object, SealKey};
use super::Ac17;

/// Keys and valid encodings made once per process (CP-ABE setup is slow).
struct Material {
    authority: AuthorityKeys,
    writer: TenantKey,
    certificate: Vec<u8>,
    record: Vec<u8>,
    sealed: Vec<u8>,
    tenant_file: Vec<u8>,
}

const PLAIN: usize = 100;
const KEK: [u8; 32] = [0x4b; 32];
static OBJECT: Object = Object::Chunk(5);

fn key() -> SealKey<'static> {
    SealKey {
        object: &OBJECT,
        epoch: 7,
        parent: 3,
        record: [0x52; 32],
        kek: &KEK,
    }
}

fn material() -> &'static Material {
    static MATERIAL: OnceLock<Material> = OnceLock::new();
    MATERIAL.get_or_init(|| {
        let authority = AuthorityKeys::setup().expect("an authority");
        let writer = authority
            .issue("fuzz", &["tenant_a", "writer"])
            .expect("a tenant");
        let read = Policy::parse("tenant_a or admin").expect("a policy");
        let write = Policy::parse("tenant_a and writer").expect("a policy");
        let (record, _) = EpochRecord::create(
            &Ac17,
            &writer,
            Cover::Chunks(vec![5, 6]),
            vec![0, 0],
            &read,
            &write,
        )
        .expect("an epoch");
        let plain: Vec<u8> = (0..PLAIN as u32).map(|i| (i * 7) as u8).collect();
        let mut sealed = vec![0u8; seal::sealed_len(PLAIN)];
        seal::seal(&key(), 3, Aead::preferred(), &writer, &plain, &mut sealed);
        let dir = std::env::temp_dir().join(format!("sat-fuzz-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        writer.save(&dir.join("t.key")).expect("a key file");
        let tenant_file = std::fs::read(dir.join("t.key")).expect("the key file");
        let _ = std::fs::remove_dir_all(&dir);
        Material {
            certificate: writer.certificate().to_bytes(),
            record: record.to_bytes(),
            authority,
            writer,
            sealed,
            tenant_file,
        }
    })
}

pub(crate) fn policy_corpus() -> Vec<Vec<u8>> {
    [
        "tenant_a",
        "(tenant_a and analyst) or admin",
        "a and (b or (c and (d or e)))",
        "x or y or z",
    ]
    .iter()
    .map(|p| p.as_bytes().to_vec())
    .collect()
}

/// A policy from anyone: parsed, normalized, parsed again to the same.
pub(crate) fn policy(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Ok(p) = Policy::parse(&text) {
        // Epoch records keep policies normalized and parse them back so.
        let pairs = p.to_pairs();
        let again = Policy::parse(&pairs.replace('"', ""))
            .unwrap_or_else(|e| panic!("a normalized policy does not parse: {pairs:?}: {e}"));
        assert_eq!(again.to_pairs(), pairs, "normalizing is not stable");
        let _ = p.satisfied_by(&["tenant_a", "admin", "x"]);
    }
}

pub(crate) fn certificate_corpus() -> Vec<Vec<u8>> {
    vec![material().certificate.clone()]
}

/// A certificate from anyone: parsed, then checked against the authority;
/// only the authority's own certificate verifies.
pub(crate) fn certificate(bytes: &[u8]) {
    let m = material();
    if let Ok(c) = Certificate::from_bytes(bytes) {
        if c.verify(m.authority.public()).is_ok() {
            assert_eq!(
                &c,
                m.writer.certificate(),
                "a certificate the authority never issued verifies"
            );
        }
    }
}

pub(crate) fn epoch_corpus() -> Vec<Vec<u8>> {
    vec![material().record.clone()]
}

/// An epoch record from a chunk: parsed, then verified; one that verifies
/// is the record its author signed.
pub(crate) fn epoch(bytes: &[u8]) {
    let m = material();
    if let Ok(r) = EpochRecord::from_bytes(bytes) {
        if r.verify(&Object::Chunk(5), r.epoch, None, m.writer.certificate())
            .is_ok()
        {
            assert_eq!(
                r.to_bytes(),
                EpochRecord::from_bytes(&m.record)
                    .expect("the original")
                    .to_bytes(),
                "an epoch record its author never signed verifies"
            );
        }
    }
}

pub(crate) fn sealed_corpus() -> Vec<Vec<u8>> {
    vec![material().sealed.clone()]
}

/// A sealed version as a server hands it over: its header parsed, and only
/// the bytes the writer sealed open.
pub(crate) fn sealed(bytes: &[u8]) {
    let m = material();
    let Ok(Some(header)) = Header::parse(bytes) else {
        return;
    };
    if bytes.len() != m.sealed.len() {
        return;
    }
    let write = Policy::parse("tenant_a and writer").expect("a policy");
    let mut plain = vec![0u8; PLAIN];
    let opened = seal::open(
        &header,
        &key(),
        &write,
        m.writer.certificate(),
        bytes,
        &mut plain,
    );
    if opened.is_ok() {
        assert_eq!(
            bytes,
            &m.sealed[..],
            "a version the writer never sealed opens"
        );
    } else {
        assert!(
            plain.iter().all(|&b| b == 0),
            "a refused version left plaintext behind"
        );
    }
}

pub(crate) fn tenant_file_corpus() -> Vec<Vec<u8>> {
    vec![material().tenant_file.clone()]
}

/// A tenant's key file as bytes: parsed and checked, never a panic.
pub(crate) fn tenant_file(bytes: &[u8]) {
    super::keys::fuzz_tenant_file(bytes);
}
