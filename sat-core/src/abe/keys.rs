//! The keys of the encryption layer and the files that hold them.
//!
//! - The **authority** (an operator, with `sat-abe setup`) holds the CP-ABE
//!   master key and an Ed25519 signing key. Its public half
//!   ([`AuthorityPublic`]) is the root every process trusts.
//! - A **tenant** (`sat-abe keygen`) gets one file ([`TenantKey`]): its
//!   CP-ABE attribute key, an Ed25519 signing key of its own, the
//!   authority's [`Certificate`] binding that signing key to the tenant's
//!   name and attributes, and a copy of the authority's public keys. One
//!   file is all a process needs (`SAT_ABE_KEY`).
//!
//! Why a certificate next to the attribute key: CP-ABE decides who may
//! *read*; anyone who can read could also encrypt a new version. Versions
//! are therefore signed, and a reader checks that the signer's certified
//! attributes satisfy the chunk's write policy (see [`super::seal`]).
//!
//! Files are JSON with a `sat_abe` field naming their kind, binary fields in
//! hex. Secret files are created with mode 0600 and never overwritten.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zeroize::{Zeroize, Zeroizing};

use super::{Abe, AbeError, Ac17, Policy};

/// What went wrong with a key or a key file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} already exists: SAT never overwrites a key file; remove it first or choose another path", path.display())]
    Exists { path: PathBuf },
    #[error("{}: not a SAT key file, or a damaged one ({why}); use the file `sat-abe` wrote", path.display())]
    Corrupt { path: PathBuf, why: String },
    #[error("{} holds secret keys but others may read or change it (mode {mode:04o}): make it private with chmod 600 {}", path.display(), path.display())]
    Exposed { path: PathBuf, mode: u32 },
    #[error("{} holds secret keys but belongs to another user (uid {owner}, this process runs as uid {me}), who could replace them: use a key file of your own (copy it, then chmod 600)", path.display())]
    NotOwned { path: PathBuf, owner: u32, me: u32 },
    #[error("{} holds secret keys in a folder others may write (mode {mode:04o}, not sticky), where they could replace it: keep it in a folder of your own", path.display())]
    OpenFolder { path: PathBuf, mode: u32 },
    #[error("{} holds {found}; give {wanted} here ({hint})", path.display())]
    WrongKind {
        path: PathBuf,
        found: String,
        wanted: &'static str,
        hint: &'static str,
    },
    #[error("certificate of tenant {tenant:?}: {why}")]
    BadCertificate { tenant: String, why: String },
    #[error("tenant name {0:?}: use 1 to 64 letters, digits, '_', '-', '.' or '@'")]
    BadTenant(String),
    #[error("revocation list: {0}")]
    BadRevocationList(String),
    #[error(transparent)]
    Abe(#[from] AbeError),
}

/// 32 bytes from the operating system's generator.
pub(crate) fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b).expect("the operating system's random generator failed");
    b
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Hex as [`hex`] writes it: lowercase digits only. Works on bytes, so that
/// any text (a damaged file, a certificate another process published) is an
/// error and never a panic; and one byte string has one spelling, so a
/// certificate's id cannot be changed by re-spelling its signature.
///
/// The bytes may be a secret key's: they are wiped when dropped, and the
/// vector is made at its final size, so no smaller copy is left behind in
/// freed memory as it grows.
fn unhex(text: &str) -> Result<Zeroizing<Vec<u8>>, String> {
    let bytes = text.as_bytes();
    if bytes.len() & 1 == 1 {
        return Err("odd-length hex".into());
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err("bad hex".to_string()),
    };
    let mut out = Zeroizing::new(Vec::with_capacity(bytes.len() / 2));
    for p in bytes.chunks_exact(2) {
        out.push(digit(p[0])? << 4 | digit(p[1])?);
    }
    Ok(out)
}

fn unhex_array<const N: usize>(field: &str, text: &str) -> Result<Zeroizing<[u8; N]>, String> {
    let v = unhex(text).map_err(|e| format!("{field}: {e}"))?;
    let mut a = Zeroizing::new([0u8; N]);
    if v.len() != N {
        return Err(format!("{field}: {} bytes, not {N}", v.len()));
    }
    a.copy_from_slice(&v);
    Ok(a)
}

/// `value` as JSON, in a buffer made at its final size and wiped when
/// dropped: for what holds a secret key (a growing buffer would leave
/// copies of its first part in freed memory).
pub(crate) fn secret_json<T: Serialize>(value: &T, pretty: bool) -> Zeroizing<Vec<u8>> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    fn write<W: std::io::Write, T: Serialize>(w: W, value: &T, pretty: bool) {
        let done = if pretty {
            serde_json::to_writer_pretty(w, value)
        } else {
            serde_json::to_writer(w, value)
        };
        done.expect("a key serializes");
    }
    let mut count = Count(0);
    write(&mut count, value, pretty);
    let mut out = Zeroizing::new(Vec::with_capacity(count.0));
    write(&mut *out, value, pretty);
    out
}

/// The authority's public keys: what every process trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityPublic {
    /// The CP-ABE public key (opaque bytes of the scheme).
    pub abe_public: Vec<u8>,
    /// The Ed25519 key that signs certificates.
    pub verifying: [u8; 32],
}

/// The authority: CP-ABE master key and certificate-signing key.
///
/// Its secret keys are wiped when it is dropped (the master key here, the
/// signing key by `ed25519-dalek`).
pub struct AuthorityKeys {
    public: AuthorityPublic,
    abe_master: Zeroizing<Vec<u8>>,
    signing: SigningKey,
}

/// A tenant's signing key certified by the authority with its attributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Certificate {
    pub tenant: String,
    pub attributes: Vec<String>,
    /// The tenant's Ed25519 verifying key, hex.
    key: String,
    /// A random number the authority's revocation list names it by.
    #[serde(default)]
    pub serial: u64,
    /// Seconds since 1970 (UTC) after which it no longer certifies.
    #[serde(default)]
    pub not_after: u64,
    /// SHA-256 of the tenant's attribute key (the CP-ABE key issued with
    /// this certificate), hex: what lets a tenant's file be refused when
    /// that key was edited or damaged, since a CP-ABE key cannot be checked
    /// against the public key alone. Empty in certificates made before it
    /// existed (their key files are read unchecked, as then).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    abe_key_digest: String,
    /// The authority's signature over the fields above, hex.
    signature: String,
}

/// How long a certificate [`AuthorityKeys::issue`] makes is valid.
pub const DEFAULT_VALIDITY: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The authority's signed list of revoked certificate serials. Each new
/// list has the next sequence number: a process given a list refuses an
/// older one, so a revocation cannot be undone by replaying a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevocationList {
    pub sequence: u64,
    pub revoked: Vec<u64>,
    /// When it was made (seconds since 1970).
    pub issued: u64,
    signature: String,
}

impl RevocationList {
    fn signed_bytes(&self) -> Vec<u8> {
        let mut b = b"sat-abe revocation list 1\0".to_vec();
        b.extend_from_slice(&self.sequence.to_le_bytes());
        b.extend_from_slice(&self.issued.to_le_bytes());
        b.extend_from_slice(&(self.revoked.len() as u64).to_le_bytes());
        for s in &self.revoked {
            b.extend_from_slice(&s.to_le_bytes());
        }
        b
    }

    /// Checks the authority's signature.
    pub fn verify(&self, authority: &AuthorityPublic) -> Result<(), KeyError> {
        let key = VerifyingKey::from_bytes(&authority.verifying)
            .map_err(|e| KeyError::BadRevocationList(format!("the authority's key: {e}")))?;
        let sig =
            unhex_array::<64>("signature", &self.signature).map_err(KeyError::BadRevocationList)?;
        key.verify(&self.signed_bytes(), &Signature::from_bytes(&sig))
            .map_err(|_| {
                KeyError::BadRevocationList(
                    "not signed by this authority (forged, damaged, or of another authority)"
                        .into(),
                )
            })
    }

    pub fn is_revoked(&self, certificate: &Certificate) -> bool {
        self.revoked.contains(&certificate.serial)
    }

    /// Reads the list at `path` (at most 1 MiB) and checks it against
    /// `authority`.
    pub fn load(path: &Path, authority: &AuthorityPublic) -> Result<RevocationList, KeyError> {
        let bytes = read_limited(path)?;
        let list: RevocationList =
            serde_json::from_slice(&bytes).map_err(|e| KeyError::Corrupt {
                path: path.to_path_buf(),
                why: parse_error(&e),
            })?;
        list.verify(authority)?;
        Ok(list)
    }

    /// Reads the list at `path` without checking its signature (for
    /// showing it): `None` when the file is not a revocation list.
    pub fn read_unchecked(path: &Path) -> Option<RevocationList> {
        let bytes = read_limited(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes the list to `path`, replacing the one there as a whole
    /// (a new list supersedes the old: written aside, then renamed).
    pub fn save(&self, path: &Path) -> Result<(), KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        let bytes = serde_json::to_vec_pretty(self).expect("json");
        // Created new (a file or link planted under the temporary name is
        // refused, never written through) and readable by all but written
        // by its owner only, whatever the umask: whoever may write the list
        // could put an older one back.
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
            .and_then(|mut f| {
                f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
                f.write_all(&bytes)?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = &written {
            // Never a file this process did not make.
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                let _ = std::fs::remove_file(&tmp);
            }
        }
        written.map_err(io)
    }
}

/// What one tenant's process holds.
///
/// Its secret keys are wiped when it is dropped (the attribute key here, the
/// signing key by `ed25519-dalek`).
pub struct TenantKey {
    authority: AuthorityPublic,
    certificate: Certificate,
    abe_key: Zeroizing<Vec<u8>>,
    signing: SigningKey,
}

impl std::fmt::Debug for AuthorityKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthorityKeys { .. }")
    }
}

impl std::fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantKey")
            .field("tenant", &self.certificate.tenant)
            .field("attributes", &self.certificate.attributes)
            .finish_non_exhaustive()
    }
}

fn check_tenant(name: &str) -> Result<(), KeyError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(KeyError::BadTenant(name.to_string()))
    }
}

impl AuthorityKeys {
    /// A new authority.
    pub fn setup() -> Result<AuthorityKeys, KeyError> {
        let (abe_public, abe_master) = Ac17.setup()?;
        let signing = SigningKey::from_bytes(&random::<32>());
        Ok(AuthorityKeys {
            public: AuthorityPublic {
                abe_public,
                verifying: signing.verifying_key().to_bytes(),
            },
            abe_master,
            signing,
        })
    }

    pub fn public(&self) -> &AuthorityPublic {
        &self.public
    }

    /// A key for `tenant` with `attributes`: an attribute key, a fresh
    /// signing key and its certificate, valid for [`DEFAULT_VALIDITY`].
    pub fn issue(&self, tenant: &str, attributes: &[&str]) -> Result<TenantKey, KeyError> {
        self.issue_for(tenant, attributes, DEFAULT_VALIDITY)
    }

    /// [`AuthorityKeys::issue`], the certificate valid for `validity`.
    pub fn issue_for(
        &self,
        tenant: &str,
        attributes: &[&str],
        validity: std::time::Duration,
    ) -> Result<TenantKey, KeyError> {
        check_tenant(tenant)?;
        let abe_key = Ac17.keygen(&self.abe_master, attributes)?;
        let signing = SigningKey::from_bytes(&random::<32>());
        let mut certificate = Certificate {
            tenant: tenant.to_string(),
            attributes: attributes.iter().map(|a| a.to_string()).collect(),
            key: hex(&signing.verifying_key().to_bytes()),
            // Never 0: 0 is the mark of a certificate made without one.
            serial: u64::from_le_bytes(random::<8>()) | 1,
            not_after: now_secs().saturating_add(validity.as_secs()),
            abe_key_digest: abe_key_digest(&abe_key),
            signature: String::new(),
        };
        certificate.signature = hex(&self.signing.sign(&certificate.signed_bytes()).to_bytes());
        Ok(TenantKey {
            authority: self.public.clone(),
            certificate,
            abe_key,
            signing,
        })
    }
}

impl AuthorityKeys {
    /// The revocation list that follows `previous` (None: the first) and
    /// also revokes `serials`.
    pub fn revoke(&self, previous: Option<&RevocationList>, serials: &[u64]) -> RevocationList {
        let mut revoked = previous.map(|p| p.revoked.clone()).unwrap_or_default();
        for s in serials {
            if !revoked.contains(s) {
                revoked.push(*s);
            }
        }
        let mut list = RevocationList {
            sequence: previous.map_or(1, |p| p.sequence + 1),
            revoked,
            issued: now_secs(),
            signature: String::new(),
        };
        list.signature = hex(&self.signing.sign(&list.signed_bytes()).to_bytes());
        list
    }
}

impl Certificate {
    /// What the authority signs: every field but the signature, each
    /// length-prefixed so that no two certificates share these bytes.
    fn signed_bytes(&self) -> Vec<u8> {
        // Version 3 adds the attribute key's digest; a certificate without
        // one signs what version 2 did, so that older ones still verify.
        let mut b = if self.abe_key_digest.is_empty() {
            b"sat-abe certificate 2\0".to_vec()
        } else {
            b"sat-abe certificate 3\0".to_vec()
        };
        let mut field = |f: &[u8]| {
            b.extend_from_slice(&(f.len() as u32).to_le_bytes());
            b.extend_from_slice(f);
        };
        field(self.tenant.as_bytes());
        field(&(self.attributes.len() as u32).to_le_bytes());
        for a in &self.attributes {
            field(a.as_bytes());
        }
        field(self.key.as_bytes());
        field(&self.serial.to_le_bytes());
        field(&self.not_after.to_le_bytes());
        if !self.abe_key_digest.is_empty() {
            field(self.abe_key_digest.as_bytes());
        }
        b
    }

    /// Whether `abe_key` is the attribute key issued with this certificate
    /// (true for a certificate that names none: made before the digest).
    fn issued_with(&self, abe_key: &[u8]) -> bool {
        self.abe_key_digest.is_empty() || self.abe_key_digest == abe_key_digest(abe_key)
    }

    /// The certificate's id: SHA-256 of its encoding. Versions name their
    /// writer by it.
    pub fn id(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.signed_bytes());
        h.update(self.signature.as_bytes());
        h.finalize().into()
    }

    /// The tenant's verifying key.
    pub fn verifying_key(&self) -> Result<VerifyingKey, KeyError> {
        let bytes = unhex_array::<32>("key", &self.key).map_err(|why| self.bad(why))?;
        VerifyingKey::from_bytes(&bytes).map_err(|e| self.bad(e.to_string()))
    }

    fn bad(&self, why: impl Into<String>) -> KeyError {
        KeyError::BadCertificate {
            tenant: self.tenant.clone(),
            why: why.into(),
        }
    }

    /// Checks the authority's signature and the expiry.
    pub fn verify(&self, authority: &AuthorityPublic) -> Result<(), KeyError> {
        self.verify_issued(authority)?;
        self.check_unexpired()
    }

    /// Checks that the authority issued this certificate, whatever its
    /// expiry: enough to know whose attributes signed a past epoch.
    pub fn verify_issued(&self, authority: &AuthorityPublic) -> Result<(), KeyError> {
        let key = VerifyingKey::from_bytes(&authority.verifying)
            .map_err(|e| self.bad(format!("the authority's key: {e}")))?;
        let sig = unhex_array::<64>("signature", &self.signature).map_err(|w| self.bad(w))?;
        if self.serial == 0 && self.not_after == 0 {
            return Err(self.bad(
                "made by an older sat-abe, with no serial and no expiry: have the authority \
                 issue the key again (sat-abe keygen)",
            ));
        }
        key.verify(&self.signed_bytes(), &Signature::from_bytes(&sig))
            .map_err(|_| {
                self.bad("not signed by this authority (forged, damaged, or of another authority)")
            })?;
        self.verifying_key().map(|_| ())
    }

    /// Checks that the certificate has not expired.
    pub fn check_unexpired(&self) -> Result<(), KeyError> {
        if now_secs() > self.not_after {
            return Err(self.bad(format!(
                "expired (valid until {} seconds after 1970, UTC): have the authority issue a \
                 new key (sat-abe keygen)",
                self.not_after
            )));
        }
        Ok(())
    }

    /// Whether the certified attributes satisfy `policy`.
    pub fn satisfies(&self, policy: &Policy) -> bool {
        let attrs: Vec<&str> = self.attributes.iter().map(String::as_str).collect();
        policy.satisfied_by(&attrs)
    }

    /// Checks `signature` over `message` under the certified key.
    pub fn verify_signature(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        self.verifying_key()
            .map(|k| k.verify(message, &Signature::from_bytes(signature)).is_ok())
            .unwrap_or(false)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a certificate serializes")
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Certificate, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

impl TenantKey {
    pub fn certificate(&self) -> &Certificate {
        &self.certificate
    }

    pub fn authority(&self) -> &AuthorityPublic {
        &self.authority
    }

    pub fn attributes(&self) -> &[String] {
        &self.certificate.attributes
    }

    /// The CP-ABE attribute key (opaque bytes of the scheme).
    pub fn abe_key(&self) -> &[u8] {
        &self.abe_key
    }

    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.signing.sign(message).to_bytes()
    }
}

// ---- files ----

#[derive(Serialize, Deserialize)]
struct File {
    sat_abe: String,
    format: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    abe_public: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verifying: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    abe_master: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signing: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    abe_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    certificate: Option<Certificate>,
}

/// A key file's secret fields hold hex of secret keys: wiped when the
/// parsed file is dropped.
impl Drop for File {
    fn drop(&mut self) {
        self.abe_master.zeroize();
        self.signing.zeroize();
        self.abe_key.zeroize();
    }
}

const AUTHORITY: &str = "authority";
const PUBLIC: &str = "public";
const TENANT: &str = "tenant";

impl File {
    fn new(kind: &str) -> File {
        File {
            sat_abe: kind.into(),
            format: 1,
            abe_public: None,
            verifying: None,
            abe_master: None,
            signing: None,
            abe_key: None,
            certificate: None,
        }
    }

    fn field<'a>(v: &'a Option<String>, name: &str) -> Result<&'a str, String> {
        v.as_deref().ok_or_else(|| format!("no {name}"))
    }

    fn public(&self) -> Result<AuthorityPublic, String> {
        Ok(AuthorityPublic {
            abe_public: unhex(File::field(&self.abe_public, "abe_public")?)?.to_vec(),
            verifying: *unhex_array("verifying", File::field(&self.verifying, "verifying")?)?,
        })
    }

    fn signing(&self) -> Result<SigningKey, String> {
        let raw = unhex_array("signing", File::field(&self.signing, "signing")?)?;
        Ok(SigningKey::from_bytes(&raw))
    }
}

/// Writes `bytes` to a new file `path`, whole or not at all: into a
/// temporary file of the same folder first (created with its final mode,
/// so a secret is never readable by others, even for a moment), then linked
/// under its name, which fails rather than replace an existing file.
fn write_new(path: &Path, bytes: &[u8], secret: bool) -> Result<(), KeyError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.exists() {
        return Err(KeyError::Exists {
            path: path.to_path_buf(),
        });
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()));
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    linked.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            KeyError::Exists {
                path: path.to_path_buf(),
            }
        } else {
            io(e)
        }
    })
}

/// Refuses a file of secrets that others than its owner may read or write:
/// its keys could be someone else's already, or be replaced.
fn check_private(path: &Path) -> Result<(), KeyError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(path).map_err(|source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode();
    // Its owner may change its mode and its keys at any time.
    // SAFETY: geteuid has no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(KeyError::NotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    // A folder others may write, unless sticky (as /tmp is), lets them
    // rename another file over this one.
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(f) = std::fs::metadata(folder) {
        let fmode = f.permissions().mode();
        if fmode & 0o022 != 0 && fmode & 0o1000 == 0 {
            return Err(KeyError::OpenFolder {
                path: path.to_path_buf(),
                mode: fmode & 0o7777,
            });
        }
    }
    if mode & 0o077 != 0 {
        return Err(KeyError::Exposed {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// The largest key file read: an authority's file with its CP-ABE master
/// key is a few KiB; a larger file is not one of ours.
const MAX_KEY_FILE: u64 = 1 << 20;

/// A key file of any kind, read and of format 1.
fn parse(path: &Path) -> Result<File, KeyError> {
    let bytes = read_limited(path)?;
    parse_bytes(&bytes, path)
}

/// Reads at most [`MAX_KEY_FILE`] bytes of `path`, and more is an error.
///
/// A key file may hold secret keys: its bytes are wiped when dropped, and
/// read into a buffer of the file's size, so that no smaller copy is left
/// in freed memory as the buffer grows.
fn read_limited(path: &Path) -> Result<Zeroizing<Vec<u8>>, KeyError> {
    use std::io::Read;
    let io = |source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_or(0, |m| m.len()).min(MAX_KEY_FILE + 1);
    // One byte more than the file: reading to its end then needs no growth.
    let mut bytes = Zeroizing::new(Vec::with_capacity(size as usize + 1));
    file.take(MAX_KEY_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_KEY_FILE {
        return Err(KeyError::Corrupt {
            path: path.to_path_buf(),
            why: format!("over {MAX_KEY_FILE} bytes: not a SAT key file"),
        });
    }
    Ok(bytes)
}

/// What is wrong with a key file or a revocation list that does not parse,
/// without the parser's own words: they quote the value they found, which
/// in a damaged key file may be a secret key (a field moved to where
/// another type is expected).
fn parse_error(e: &serde_json::Error) -> String {
    let what = match e.classify() {
        serde_json::error::Category::Io => "unreadable",
        serde_json::error::Category::Syntax => "not valid JSON",
        serde_json::error::Category::Data => "a field missing, or of the wrong type or value",
        serde_json::error::Category::Eof => "cut short",
    };
    format!("{what}, at line {} column {}", e.line(), e.column())
}

/// A key file whose kind is none SAT writes. Its `sat_abe` field is not
/// quoted: a damaged file may hold a secret there.
const UNKNOWN_KIND: &str = "an unknown kind of key (its \"sat_abe\" field names none SAT writes)";

/// The key file `bytes` (read from `path`, named in errors).
fn parse_bytes(bytes: &[u8], path: &Path) -> Result<File, KeyError> {
    let file: File = serde_json::from_slice(bytes).map_err(|e| KeyError::Corrupt {
        path: path.to_path_buf(),
        why: parse_error(&e),
    })?;
    if file.format != 1 {
        return Err(KeyError::Corrupt {
            path: path.to_path_buf(),
            why: format!("format {} (this SAT reads format 1)", file.format),
        });
    }
    Ok(file)
}

fn read(path: &Path, wanted: &'static str, hint: &'static str) -> Result<File, KeyError> {
    let file = of_kind(parse(path)?, path, wanted, hint)?;
    if wanted != PUBLIC {
        check_private(path)?;
    }
    Ok(file)
}

/// `file` if it is of the kind `wanted`, else an error saying what it is.
fn of_kind(
    file: File,
    path: &Path,
    wanted: &'static str,
    hint: &'static str,
) -> Result<File, KeyError> {
    if file.sat_abe != wanted {
        return Err(KeyError::WrongKind {
            path: path.to_path_buf(),
            found: match file.sat_abe.as_str() {
                AUTHORITY => "the authority's secret keys".into(),
                PUBLIC => "the authority's public keys".into(),
                TENANT => "a tenant's key".into(),
                _ => UNKNOWN_KIND.into(),
            },
            wanted: match wanted {
                AUTHORITY => "the authority's secret keys",
                PUBLIC => "the authority's public keys",
                _ => "a tenant's key",
            },
            hint,
        });
    }
    Ok(file)
}

/// The digest a certificate keeps of its attribute key, hex.
fn abe_key_digest(abe_key: &[u8]) -> String {
    hex(&Sha256::digest(abe_key))
}

fn corrupt(path: &Path) -> impl Fn(String) -> KeyError + '_ {
    move |why| KeyError::Corrupt {
        path: path.to_path_buf(),
        why,
    }
}

const TENANT_HINT: &str = "the file `sat-abe keygen` wrote for the tenant";

/// The kinds of key file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// The authority's secret keys (`authority.key`).
    Authority,
    /// The authority's public keys (`public.key`).
    Public,
    /// A tenant's key.
    Tenant,
}

/// What a key file holds apart from its secrets, for `sat-abe show`.
#[derive(Debug, Clone)]
pub struct KeyFileInfo {
    pub kind: KeyKind,
    /// The authority's public keys (a tenant's file holds a copy).
    pub authority: AuthorityPublic,
    /// A tenant's certificate; `None` in the authority's files.
    pub certificate: Option<Certificate>,
}

/// Reads the kind and the public part of a key file of any kind, without
/// checking its certificate or its secret fields (and without returning
/// those): to check a file, load it with its kind's `load`.
pub fn inspect(path: &Path) -> Result<KeyFileInfo, KeyError> {
    let mut f = parse(path)?;
    let bad = corrupt(path);
    let kind = match f.sat_abe.as_str() {
        AUTHORITY => KeyKind::Authority,
        PUBLIC => KeyKind::Public,
        TENANT => KeyKind::Tenant,
        _ => return Err(bad(UNKNOWN_KIND.into())),
    };
    let authority = f.public().map_err(&bad)?;
    let certificate = match kind {
        KeyKind::Tenant => Some(
            f.certificate
                .take()
                .ok_or_else(|| bad("no certificate".into()))?,
        ),
        _ => None,
    };
    Ok(KeyFileInfo {
        kind,
        authority,
        certificate,
    })
}

impl AuthorityKeys {
    /// Writes the authority's secret file (mode 0600, never over a file).
    pub fn save(&self, path: &Path) -> Result<(), KeyError> {
        let mut f = File::new(AUTHORITY);
        f.abe_public = Some(hex(&self.public.abe_public));
        f.verifying = Some(hex(&self.public.verifying));
        f.abe_master = Some(hex(&self.abe_master));
        f.signing = Some(hex(Zeroizing::new(self.signing.to_bytes()).as_slice()));
        write_new(path, &secret_json(&f, true), true)
    }

    pub fn load(path: &Path) -> Result<AuthorityKeys, KeyError> {
        let f = read(
            path,
            AUTHORITY,
            "the file `sat-abe setup` wrote as authority.key",
        )?;
        let bad = corrupt(path);
        let public = f.public().map_err(&bad)?;
        let abe_master =
            unhex(File::field(&f.abe_master, "abe_master").map_err(&bad)?).map_err(&bad)?;
        let signing = f.signing().map_err(&bad)?;
        if signing.verifying_key().to_bytes() != public.verifying {
            return Err(bad("its signing and verifying keys do not match".into()));
        }
        Ok(AuthorityKeys {
            public,
            abe_master,
            signing,
        })
    }
}

impl AuthorityPublic {
    /// Writes the public file (mode 0644, never over a file).
    pub fn save(&self, path: &Path) -> Result<(), KeyError> {
        let mut f = File::new(PUBLIC);
        f.abe_public = Some(hex(&self.abe_public));
        f.verifying = Some(hex(&self.verifying));
        write_new(path, &serde_json::to_vec_pretty(&f).expect("json"), false)
    }

    pub fn load(path: &Path) -> Result<AuthorityPublic, KeyError> {
        let f = read(path, PUBLIC, "the file `sat-abe setup` wrote as public.key")?;
        f.public().map_err(corrupt(path))
    }
}

impl TenantKey {
    /// Writes the tenant's file (mode 0600, never over a file).
    pub fn save(&self, path: &Path) -> Result<(), KeyError> {
        let mut f = File::new(TENANT);
        f.abe_public = Some(hex(&self.authority.abe_public));
        f.verifying = Some(hex(&self.authority.verifying));
        f.abe_key = Some(hex(&self.abe_key));
        f.signing = Some(hex(Zeroizing::new(self.signing.to_bytes()).as_slice()));
        f.certificate = Some(self.certificate.clone());
        write_new(path, &secret_json(&f, true), true)
    }

    /// Reads a tenant's file and checks it: the certificate is the
    /// authority's, and certifies this file's signing key.
    pub fn load(path: &Path) -> Result<TenantKey, KeyError> {
        let f = read(path, TENANT, TENANT_HINT)?;
        TenantKey::from_file(f, path)
    }

    /// A tenant's key from its parsed file, checked.
    fn from_file(mut f: File, path: &Path) -> Result<TenantKey, KeyError> {
        let bad = corrupt(path);
        let authority = f.public().map_err(&bad)?;
        let abe_key = unhex(File::field(&f.abe_key, "abe_key").map_err(&bad)?).map_err(&bad)?;
        let signing = f.signing().map_err(&bad)?;
        let certificate = f
            .certificate
            .take()
            .ok_or_else(|| bad("no certificate".into()))?;
        certificate.verify(&authority)?;
        if certificate.verifying_key()?.to_bytes() != signing.verifying_key().to_bytes() {
            return Err(bad("its certificate is for another signing key".into()));
        }
        if !certificate.issued_with(&abe_key) {
            return Err(bad(
                "its attribute key (abe_key) is not the one the authority issued with its \
                 certificate: the file was edited or damaged; have the authority issue the key \
                 again (sat-abe keygen)"
                    .into(),
            ));
        }
        Ok(TenantKey {
            authority,
            certificate,
            abe_key,
            signing,
        })
    }
}

/// Key files as bytes under `sat-fuzz` (feature `fuzz`): what an edited
/// or hostile key file can make SAT do.
#[cfg(feature = "fuzz")]
pub(crate) fn fuzz_tenant_file(bytes: &[u8]) {
    let path = Path::new("fuzz.key");
    if let Ok(f) = parse_bytes(bytes, path).and_then(|f| of_kind(f, path, TENANT, TENANT_HINT)) {
        let _ = TenantKey::from_file(f, path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sat-abe-keys-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn files_round_trip_with_private_modes_and_are_never_overwritten() {
        use std::os::unix::fs::PermissionsExt;
        let d = temp_dir("round");
        let auth = AuthorityKeys::setup().unwrap();
        auth.save(&d.join("authority.key")).unwrap();
        auth.public().save(&d.join("public.key")).unwrap();
        let t = auth.issue("alice", &["tenant_a", "analyst"]).unwrap();
        t.save(&d.join("alice.key")).unwrap();
        let mode = |p: &str| std::fs::metadata(d.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("authority.key"), 0o600);
        assert_eq!(mode("alice.key"), 0o600);
        assert_eq!(mode("public.key"), 0o644);
        assert!(matches!(
            t.save(&d.join("alice.key")),
            Err(KeyError::Exists { .. })
        ));

        let again = AuthorityKeys::load(&d.join("authority.key")).unwrap();
        assert_eq!(again.public(), auth.public());
        assert_eq!(
            AuthorityPublic::load(&d.join("public.key")).unwrap(),
            *auth.public()
        );
        let alice = TenantKey::load(&d.join("alice.key")).unwrap();
        assert_eq!(alice.certificate(), t.certificate());
        assert_eq!(alice.attributes(), ["tenant_a", "analyst"]);
        let sig = alice.sign(b"hello");
        assert!(t.certificate().verify_signature(b"hello", &sig));
        assert!(!t.certificate().verify_signature(b"hellO", &sig));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Secret key files that others may read are refused, saying how to
    /// fix them; an oversized file is not read whole; a write leaves no
    /// temporary file, and a refused one leaves the existing file as it was.
    #[test]
    fn key_files_are_private_bounded_and_written_whole() {
        use std::os::unix::fs::PermissionsExt;
        let d = temp_dir("private");
        let auth = AuthorityKeys::setup().unwrap();
        let t = auth.issue("carol", &["tenant_c"]).unwrap();
        let path = d.join("carol.key");
        t.save(&path).unwrap();
        let before = std::fs::read(&path).unwrap();
        assert!(matches!(t.save(&path), Err(KeyError::Exists { .. })));
        assert_eq!(std::fs::read(&path).unwrap(), before);
        let names: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["carol.key"], "a temporary file was left behind");
        for mode in [0o644, 0o640, 0o602] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = TenantKey::load(&path).unwrap_err();
            assert!(
                matches!(e, KeyError::Exposed { .. }) && e.to_string().contains("chmod 600"),
                "{mode:o}: {e}"
            );
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(TenantKey::load(&path).is_ok());
        // A private file in a folder others may write: refused, unless the
        // folder is sticky.
        let open = d.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::copy(&path, open.join("carol.key")).unwrap();
        std::fs::set_permissions(
            open.join("carol.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        for (mode, refused) in [
            (0o777, true),
            (0o775, true),
            (0o1777, false),
            (0o755, false),
        ] {
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(mode)).unwrap();
            let loaded = TenantKey::load(&open.join("carol.key"));
            assert_eq!(
                matches!(loaded, Err(KeyError::OpenFolder { .. })),
                refused,
                "folder mode {mode:o}: {loaded:?}"
            );
        }
        // A private file of another user's: refused, since that user could
        // replace its keys. (Only root can make one to try.)
        // SAFETY: geteuid has no arguments.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = d.join("theirs.key");
            std::fs::copy(&path, &theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o600)).unwrap();
            let e = TenantKey::load(&theirs).unwrap_err();
            assert!(
                matches!(e, KeyError::NotOwned { owner: 65534, .. }),
                "another user's key file: {e}"
            );
        }
        // The authority's public keys may be read by all.
        auth.public().save(&d.join("public.key")).unwrap();
        assert!(AuthorityPublic::load(&d.join("public.key")).is_ok());
        let big = d.join("big.key");
        std::fs::write(&big, vec![b' '; (MAX_KEY_FILE + 10) as usize]).unwrap();
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = TenantKey::load(&big).unwrap_err();
        assert!(e.to_string().contains("over 1048576 bytes"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A certificate carries a serial and an expiry, both signed: an
    /// expired one, or one whose expiry was edited, does not verify.
    #[test]
    fn certificates_expire_and_their_dates_are_signed() {
        let auth = AuthorityKeys::setup().unwrap();
        let t = auth.issue("erin", &["tenant_e"]).unwrap();
        let c = t.certificate();
        assert!(c.serial != 0 && c.not_after > now_secs() + 300 * 24 * 3600);
        assert!(c.verify(auth.public()).is_ok());
        let other = auth.issue("erin", &["tenant_e"]).unwrap();
        assert_ne!(other.certificate().serial, c.serial);
        // Edited: a later expiry is not the authority's.
        let mut edited = c.clone();
        edited.not_after += 1000;
        assert!(edited
            .verify(auth.public())
            .unwrap_err()
            .to_string()
            .contains("not signed"));
        // Expired: signed by the authority, but past its date.
        let mut expired = c.clone();
        expired.not_after = now_secs() - 10;
        expired.signature = hex(&auth.signing.sign(&expired.signed_bytes()).to_bytes());
        let e = expired.verify(auth.public()).unwrap_err().to_string();
        assert!(e.contains("expired") && e.contains("sat-abe keygen"), "{e}");
        // Made before serials: said so.
        let mut old = c.clone();
        (old.serial, old.not_after) = (0, 0);
        assert!(old
            .verify(auth.public())
            .unwrap_err()
            .to_string()
            .contains("older sat-abe"));
    }

    /// The revocation list is signed, numbered and cumulative; a forged or
    /// edited one does not verify.
    #[test]
    fn revocation_lists_are_signed_numbered_and_cumulative() {
        let d = temp_dir("crl");
        let auth = AuthorityKeys::setup().unwrap();
        let (a, b) = (
            auth.issue("a", &["x"]).unwrap(),
            auth.issue("b", &["x"]).unwrap(),
        );
        let first = auth.revoke(None, &[a.certificate().serial]);
        assert_eq!(first.sequence, 1);
        assert!(first.is_revoked(a.certificate()) && !first.is_revoked(b.certificate()));
        let second = auth.revoke(Some(&first), &[b.certificate().serial]);
        assert_eq!(second.sequence, 2);
        assert!(second.is_revoked(a.certificate()) && second.is_revoked(b.certificate()));
        let path = d.join("revoked.crl");
        second.save(&path).unwrap();
        assert_eq!(RevocationList::load(&path, auth.public()).unwrap(), second);
        // Edited: a serial taken out.
        let mut edited = second.clone();
        edited.revoked.pop();
        assert!(edited.verify(auth.public()).is_err());
        // Another authority's list.
        let other = AuthorityKeys::setup().unwrap();
        assert!(other.revoke(None, &[1]).verify(auth.public()).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn wrong_kinds_and_damaged_files_say_so() {
        let d = temp_dir("bad");
        let auth = AuthorityKeys::setup().unwrap();
        auth.public().save(&d.join("public.key")).unwrap();
        let e = TenantKey::load(&d.join("public.key")).unwrap_err();
        assert!(matches!(e, KeyError::WrongKind { .. }), "{e}");
        assert!(e.to_string().contains("the authority's public keys"), "{e}");
        let write_private = |name: &str, bytes: &[u8]| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(d.join(name), bytes).unwrap();
            std::fs::set_permissions(d.join(name), std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        write_private("junk.key", b"{ not json");
        assert!(matches!(
            AuthorityKeys::load(&d.join("junk.key")),
            Err(KeyError::Corrupt { .. })
        ));
        assert!(matches!(
            TenantKey::load(&d.join("missing.key")),
            Err(KeyError::Io { .. })
        ));
        // A tenant file whose attributes were edited: its certificate fails.
        let t = auth.issue("bob", &["tenant_b"]).unwrap();
        t.save(&d.join("bob.key")).unwrap();
        let text = std::fs::read_to_string(d.join("bob.key")).unwrap();
        write_private(
            "bob2.key",
            text.replace("\"tenant_b\"", "\"tenant_a\"").as_bytes(),
        );
        let e = TenantKey::load(&d.join("bob2.key")).unwrap_err();
        assert!(matches!(e, KeyError::BadCertificate { .. }), "{e}");
        // A tenant file whose attribute key was edited: one hex digit, or
        // the key of another tenant put in its place. Its certificate still
        // verifies; the key's digest in it does not match.
        let key_hex = |text: &str| -> String {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            v["abe_key"].as_str().unwrap().to_string()
        };
        let k = key_hex(&text);
        let at = k.len() / 2;
        let flipped = if &k[at..at + 1] == "0" { "1" } else { "0" };
        let digit = format!("{}{flipped}{}", &k[..at], &k[at + 1..]);
        let alice = auth.issue("alice", &["tenant_a"]).unwrap();
        alice.save(&d.join("alice3.key")).unwrap();
        let other = key_hex(&std::fs::read_to_string(d.join("alice3.key")).unwrap());
        for (name, replaced) in [("bob3.key", digit), ("bob4.key", other)] {
            write_private(name, text.replace(&k, &replaced).as_bytes());
            let e = TenantKey::load(&d.join(name)).unwrap_err();
            assert!(
                matches!(&e, KeyError::Corrupt { why, .. } if why.contains("abe_key")),
                "{name}: {e}"
            );
        }
        // The file as written still loads.
        assert!(TenantKey::load(&d.join("bob.key")).is_ok());
        // A certificate of another authority.
        let other = AuthorityKeys::setup().unwrap();
        assert!(t.certificate().verify(other.public()).is_err());
        assert!(t.certificate().verify(auth.public()).is_ok());
        assert!(matches!(
            auth.issue("a b", &["x"]),
            Err(KeyError::BadTenant(_))
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn inspect_tells_the_kind_and_reads_a_certificate_that_does_not_verify() {
        let d = temp_dir("inspect");
        let auth = AuthorityKeys::setup().unwrap();
        auth.save(&d.join("authority.key")).unwrap();
        auth.public().save(&d.join("public.key")).unwrap();
        let t = auth.issue("dave", &["tenant_d"]).unwrap();
        t.save(&d.join("dave.key")).unwrap();
        for (file, kind) in [
            ("authority.key", KeyKind::Authority),
            ("public.key", KeyKind::Public),
            ("dave.key", KeyKind::Tenant),
        ] {
            let info = inspect(&d.join(file)).unwrap();
            assert_eq!(info.kind, kind, "{file}");
            assert_eq!(info.authority, *auth.public(), "{file}");
            assert_eq!(info.certificate.is_some(), kind == KeyKind::Tenant);
        }
        // Edited attributes: `load` refuses the file, `inspect` shows it.
        let text = std::fs::read_to_string(d.join("dave.key")).unwrap();
        std::fs::write(d.join("edited.key"), text.replace("tenant_d", "admin")).unwrap();
        assert!(TenantKey::load(&d.join("edited.key")).is_err());
        let info = inspect(&d.join("edited.key")).unwrap();
        let cert = info.certificate.unwrap();
        assert_eq!(cert.attributes, ["admin"]);
        assert!(cert.verify(&info.authority).is_err());
        let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
        json["sat_abe"] = "other".into();
        std::fs::write(d.join("odd.key"), json.to_string()).unwrap();
        let e = inspect(&d.join("odd.key")).unwrap_err();
        assert!(matches!(e, KeyError::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("unknown kind"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A revocation list is written into a new temporary file (a link
    /// planted under its name is refused, not written through), readable by
    /// all and written by its owner only, then renamed over the list.
    #[test]
    fn a_revocation_list_is_written_whole_and_never_through_a_planted_link() {
        use std::os::unix::fs::PermissionsExt;
        let d = temp_dir("crl");
        let auth = AuthorityKeys::setup().unwrap();
        let list = auth.revoke(None, &[7]);
        let path = d.join("revoked.crl");
        list.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert!(RevocationList::load(&path, auth.public()).is_ok());
        let victim = d.join("victim");
        std::fs::write(&victim, b"untouched").unwrap();
        let tmp = d.join(format!(".revoked.crl.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        let newer = auth.revoke(Some(&list), &[8]);
        assert!(newer.save(&path).is_err(), "written through a planted link");
        assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
        assert!(
            tmp.symlink_metadata().is_ok(),
            "the planted link is left alone"
        );
        let kept = RevocationList::load(&path, auth.public()).unwrap();
        assert_eq!(kept.revoked, [7], "the list stays the last one written");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A damaged key file whose secret fields moved where another type, or
    /// the kind, is expected: the errors say what is wrong and where, and
    /// quote none of the file's values.
    #[test]
    fn errors_about_a_damaged_key_file_quote_none_of_its_secrets() {
        let d = temp_dir("damaged");
        let auth = AuthorityKeys::setup().unwrap();
        let t = auth.issue("erin", &["tenant_e"]).unwrap();
        t.save(&d.join("erin.key")).unwrap();
        let text = std::fs::read_to_string(d.join("erin.key")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        // Every long string of the file: the secrets among them.
        let mut values = Vec::new();
        fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::String(s) if s.len() >= 16 => out.push(s.clone()),
                serde_json::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
                serde_json::Value::Object(o) => o.values().for_each(|v| strings(v, out)),
                _ => {}
            }
        }
        strings(&json, &mut values);
        assert!(!values.is_empty());
        for (i, secret) in values.iter().enumerate() {
            for field in ["format", "sat_abe"] {
                let mut damaged = json.clone();
                damaged[field] = secret.clone().into();
                let path = d.join(format!("damaged-{i}-{field}.key"));
                std::fs::write(&path, damaged.to_string()).unwrap();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
                for e in [
                    TenantKey::load(&path).map(|_| ()).unwrap_err(),
                    inspect(&path).map(|_| ()).unwrap_err(),
                ] {
                    let said = e.to_string();
                    assert!(!said.contains(secret.as_str()), "{field}: {said}");
                    assert!(!said.contains(&secret[..16]), "{field}: {said}");
                }
            }
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn hex_is_lowercase_digits_and_other_text_is_an_error_not_a_panic() {
        assert_eq!(unhex("00ff7a").unwrap().as_slice(), [0x00, 0xff, 0x7a]);
        assert_eq!(unhex(&hex(&[1, 2, 254])).unwrap().as_slice(), [1, 2, 254]);
        // A multi-byte character across a pair, other spellings of a byte.
        for bad in ["a\u{e9}a", "\u{e9}\u{e9}", "+f", "FF", "0x", "g0", "abc"] {
            assert!(unhex(bad).is_err(), "{bad:?}");
        }
        // A published certificate with such a signature fails to verify.
        let auth = AuthorityKeys::setup().unwrap();
        let t = auth.issue("carol", &["a"]).unwrap();
        let mut c = t.certificate().clone();
        c.signature = format!("a\u{e9}a{}", &c.signature[4..]);
        assert!(matches!(
            c.verify(auth.public()),
            Err(KeyError::BadCertificate { .. })
        ));
        let mut c = t.certificate().clone();
        c.signature = c.signature.to_uppercase();
        assert!(c.verify(auth.public()).is_err());
        assert!(t.certificate().verify(auth.public()).is_ok());
    }
}
