//! Attribute-based encryption (cargo feature `abe`, off by default).
//!
//! This is the first part of the encryption layer: the access policies
//! ([`policy`]) and the CP-ABE scheme behind a small trait ([`Abe`]), which
//! wraps a key-encryption key under a read policy and unwraps it with a
//! tenant's attribute key. Chunks, chains and symbols do not use it yet.
//!
//! The scheme is AC17 (Agrawal and Chase, 2017) from `rabe`. Not its BSW
//! scheme: measured here, BSW hashes attribute names only up to their first
//! `_`, so a key for `tenant` opened data for `tenant_a` and `tenant_b`.
//! AC17 panics on AND/OR nodes with more than two children; policies reach
//! it as nested pairs ([`policy::Policy::to_pairs`]) and any panic inside the
//! scheme becomes an error.

#[cfg(feature = "fuzz")]
pub(crate) mod fuzzing;
pub mod keys;
pub mod policy;
pub mod seal;
pub mod vault;

pub use vault::{Protection, SecureChain, Vault};

use std::panic::{catch_unwind, AssertUnwindSafe};

use rabe::schemes::ac17;
use rabe::utils::policy::pest::PolicyLanguage;
use zeroize::Zeroizing;

pub use policy::{Policy, PolicyError};

/// Why an ABE operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AbeError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The key's attributes do not satisfy the policy.
    #[error(
        "access denied: the key's attributes {attributes:?} do not satisfy the policy {policy}"
    )]
    AccessDenied {
        attributes: Vec<String>,
        policy: String,
    },
    #[error("a key needs at least one attribute")]
    NoAttributes,
    #[error(
        "attribute {0:?}: use letters, digits, '_', '-', '.' and ':', and not the words `and` \
         and `or`, which policies join attributes with"
    )]
    BadAttribute(String),
    #[error("the key or ciphertext is corrupt or of another authority: {0}")]
    Corrupt(String),
    #[error("the ABE scheme failed: {0}")]
    Scheme(String),
}

/// A CP-ABE scheme, as the encryption layer uses it: keys and ciphertexts
/// are opaque bytes, so another scheme can replace this one. Secret keys
/// and unwrapped secrets come in buffers wiped when dropped.
pub trait Abe {
    /// A new authority: (public key, master key).
    fn setup(&self) -> Result<(Vec<u8>, Zeroizing<Vec<u8>>), AbeError>;
    /// A tenant's secret key for `attributes`.
    fn keygen(&self, master: &[u8], attributes: &[&str]) -> Result<Zeroizing<Vec<u8>>, AbeError>;
    /// `secret` encrypted so that only keys satisfying `policy` open it.
    fn wrap(&self, public: &[u8], policy: &Policy, secret: &[u8]) -> Result<Vec<u8>, AbeError>;
    /// `secret` back, or [`AbeError::AccessDenied`].
    fn unwrap(&self, key: &[u8], wrapped: &[u8]) -> Result<Zeroizing<Vec<u8>>, AbeError>;
}

/// AC17 over BN254 pairings, from `rabe`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ac17;

fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, AbeError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        AbeError::Scheme(format!("{what}: {why}"))
    })
}

fn to_bytes<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, AbeError> {
    serde_json::to_vec(v).map_err(|e| AbeError::Scheme(e.to_string()))
}

fn from_bytes<T: serde::de::DeserializeOwned>(what: &str, b: &[u8]) -> Result<T, AbeError> {
    serde_json::from_slice(b).map_err(|e| AbeError::Corrupt(format!("{what}: {e}")))
}

impl Abe for Ac17 {
    // The scheme's own structures (`rabe`'s keys and their serde forms)
    // are not wiped when dropped: `rabe` offers no way to. What SAT keeps
    // is the serialized form, in wiped buffers.
    fn setup(&self) -> Result<(Vec<u8>, Zeroizing<Vec<u8>>), AbeError> {
        let (pk, msk) = guarded("setup", ac17::setup)?;
        Ok((to_bytes(&pk)?, keys::secret_json(&msk, false)))
    }

    fn keygen(&self, master: &[u8], attributes: &[&str]) -> Result<Zeroizing<Vec<u8>>, AbeError> {
        if attributes.is_empty() {
            return Err(AbeError::NoAttributes);
        }
        if let Some(a) = attributes.iter().find(|a| {
            a.is_empty()
                || !a
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c))
                || a.eq_ignore_ascii_case("and")
                || a.eq_ignore_ascii_case("or")
        }) {
            return Err(AbeError::BadAttribute(a.to_string()));
        }
        let msk: ac17::Ac17MasterKey = from_bytes("master key", master)?;
        let sk = guarded("keygen", || ac17::cp_keygen(&msk, attributes))?
            .map_err(|e| AbeError::Scheme(e.to_string()))?;
        Ok(keys::secret_json(&sk, false))
    }

    fn wrap(&self, public: &[u8], policy: &Policy, secret: &[u8]) -> Result<Vec<u8>, AbeError> {
        let pk: ac17::Ac17PublicKey = from_bytes("public key", public)?;
        let text = policy.to_pairs();
        let ct = guarded("encrypt", || {
            ac17::cp_encrypt(&pk, &text, secret, PolicyLanguage::HumanPolicy)
        })?
        .map_err(|e| AbeError::Scheme(e.to_string()))?;
        to_bytes(&ct)
    }

    fn unwrap(&self, key: &[u8], wrapped: &[u8]) -> Result<Zeroizing<Vec<u8>>, AbeError> {
        let sk: ac17::Ac17CpSecretKey = from_bytes("attribute key", key)?;
        let ct: ac17::Ac17CpCiphertext = from_bytes("wrapped key", wrapped)?;
        // Checked before the scheme runs: a clear answer, and no pairing work.
        let policy = Policy::parse(&ct.policy.0.replace('"', ""))?;
        let attributes: Vec<&str> = sk.attr.iter().map(|a| a.as_str()).collect();
        if !policy.satisfied_by(&attributes) {
            return Err(AbeError::AccessDenied {
                attributes: sk.attr.clone(),
                policy: policy.to_string(),
            });
        }
        guarded("decrypt", || ac17::cp_decrypt(&sk, &ct))?
            .map(Zeroizing::new)
            .map_err(|e| AbeError::Corrupt(format!("the attributes satisfy the policy, yet: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Authority {
        public: Vec<u8>,
        master: Zeroizing<Vec<u8>>,
    }

    fn authority() -> Authority {
        let (public, master) = Ac17.setup().unwrap();
        Authority { public, master }
    }

    #[test]
    fn a_key_opens_what_its_attributes_satisfy_and_nothing_else() {
        let auth = authority();
        let policy = Policy::parse("(tenant_a and analyst) or admin").unwrap();
        let wrapped = Ac17
            .wrap(&auth.public, &policy, b"kek of tenant a")
            .unwrap();
        let a = Ac17.keygen(&auth.master, &["tenant_a", "analyst"]).unwrap();
        let admin = Ac17.keygen(&auth.master, &["admin"]).unwrap();
        assert_eq!(
            Ac17.unwrap(&a, &wrapped).unwrap().as_slice(),
            b"kek of tenant a"
        );
        assert_eq!(
            Ac17.unwrap(&admin, &wrapped).unwrap().as_slice(),
            b"kek of tenant a"
        );
        for attrs in [
            &["tenant_b", "analyst"][..],
            &["tenant", "analyst"],
            &["tenant_a"],
        ] {
            let k = Ac17.keygen(&auth.master, attrs).unwrap();
            assert!(
                matches!(
                    Ac17.unwrap(&k, &wrapped),
                    Err(AbeError::AccessDenied { .. })
                ),
                "{attrs:?} opened it"
            );
        }
    }

    /// The scheme itself refuses, not only the policy check before it: a
    /// key whose attribute list claims `tenant_a` but was issued for
    /// `tenant_b` does not open tenant_a's data.
    #[test]
    fn tenant_b_s_key_does_not_open_tenant_a_s_data_even_when_it_lies() {
        let auth = authority();
        let policy = Policy::parse("tenant_a").unwrap();
        let wrapped = Ac17.wrap(&auth.public, &policy, b"secret").unwrap();
        let b = Ac17.keygen(&auth.master, &["tenant_b"]).unwrap();
        let forged = String::from_utf8(b.to_vec())
            .unwrap()
            .replace("tenant_b", "tenant_a");
        assert!(Ac17.unwrap(forged.as_bytes(), &wrapped).is_err());
    }

    #[test]
    fn three_children_and_dashes_do_not_panic() {
        let auth = authority();
        let policy = Policy::parse("x-1 and y_2 and z.3 or (p or q or r)").unwrap();
        let wrapped = Ac17.wrap(&auth.public, &policy, b"k").unwrap();
        let k = Ac17.keygen(&auth.master, &["x-1", "y_2", "z.3"]).unwrap();
        assert_eq!(Ac17.unwrap(&k, &wrapped).unwrap().as_slice(), b"k");
        let r = Ac17.keygen(&auth.master, &["r"]).unwrap();
        assert_eq!(Ac17.unwrap(&r, &wrapped).unwrap().as_slice(), b"k");
        let y = Ac17.keygen(&auth.master, &["x-1", "y_2"]).unwrap();
        assert!(Ac17.unwrap(&y, &wrapped).is_err());
    }

    #[test]
    fn corrupt_keys_and_bad_attributes_are_errors() {
        let auth = authority();
        assert!(matches!(
            Ac17.keygen(b"not a key", &["a"]),
            Err(AbeError::Corrupt(_))
        ));
        assert!(matches!(
            Ac17.keygen(&auth.master, &[]),
            Err(AbeError::NoAttributes)
        ));
        assert!(matches!(
            Ac17.keygen(&auth.master, &["a b"]),
            Err(AbeError::BadAttribute(_))
        ));
        let and = Ac17.keygen(&auth.master, &["AND"]).unwrap_err();
        assert!(and.to_string().contains("not the words `and`"), "{and}");
        let policy = Policy::parse("a").unwrap();
        let wrapped = Ac17.wrap(&auth.public, &policy, b"k").unwrap();
        let k = Ac17.keygen(&auth.master, &["a"]).unwrap();
        assert!(matches!(Ac17.unwrap(&k, b"{}"), Err(AbeError::Corrupt(_))));
        assert!(Ac17.unwrap(&k, &wrapped).is_ok());
    }
}
