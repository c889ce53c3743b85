//! Who may join: the secret of a run or of a service, and the
//! challenge-response by which a process proves it holds the secret without
//! ever sending it.
//!
//! A process that joins (a rank contacting the seed, a process attaching to
//! a service's desk) and the one that admits it each pick a random nonce.
//! Each side proves itself with HMAC-SHA256, keyed by the secret, over a
//! label naming its side and both nonces:
//!
//! ```text
//! joiner   -> admitter   Hello { .., nonce: J }
//! admitter -> joiner     Challenge { nonce: A, proof: HMAC(s, "admitter" | J | A) }
//! joiner   -> admitter   Proof(HMAC(s, "joiner" | J | A))
//! ```
//!
//! The admitter checks the joiner's proof before it hands out a rank, a
//! slot or any address; the joiner checks the admitter's, so it never sends
//! its endpoint to a process that merely listens on the port. The labels
//! keep one side's proof from passing as the other's; fresh nonces keep an
//! overheard proof from being replayed. A wrong proof looks like random
//! bytes: it tells an eavesdropper nothing about the secret.
//!
//! A [`Secret`] never reaches a log, an error message or `Debug` output:
//! errors name where a secret came from, never what it is.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::{Zeroize, Zeroizing};

use crate::error::{SatError, SatResult};

/// The variable that gives a process its run's or its service's secret.
pub const SECRET_VAR: &str = "SAT_SECRET";

/// What a secret may be: long enough not to be guessed, short enough to be
/// a line, and free of the characters that delimit it in a connection
/// string (`sat://SECRET@host:port`).
const MIN_SECRET_LEN: usize = 16;
const MAX_SECRET_LEN: usize = 256;

/// Random bytes in a secret that SAT makes (64 hex digits).
const GENERATED_BYTES: usize = 32;

/// A nonce: fresh random bytes for one handshake.
pub type Nonce = [u8; 32];
/// An HMAC-SHA256 proof of holding the secret.
pub type Proof = [u8; 32];

/// The scheme of a service's connection string.
pub const SCHEME: &str = "sat://";

/// The shared secret of a run or a service. Its bytes are overwritten when
/// it is dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<[u8]>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl Secret {
    /// A fresh secret of 256 random bits, written as 64 hex digits.
    pub fn generate() -> SatResult<Secret> {
        let mut raw = [0u8; GENERATED_BYTES];
        fill_random(&mut raw)?;
        let mut text = Zeroizing::new(String::with_capacity(2 * GENERATED_BYTES));
        for &b in &raw {
            text.push(char::from_digit(u32::from(b >> 4), 16).expect("a hex digit"));
            text.push(char::from_digit(u32::from(b & 15), 16).expect("a hex digit"));
        }
        raw.zeroize();
        Ok(Secret(text.as_bytes().into()))
    }

    /// A secret given as text; `source` names where it came from (for the
    /// error, which never repeats the text).
    pub fn parse(text: &str, source: &str) -> SatResult<Secret> {
        let text = text.trim();
        let usable = (MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'@' && b != b'/');
        if !usable {
            return Err(SatError::Usage(format!(
                "{source} is not a usable secret: it must be {MIN_SECRET_LEN} to {MAX_SECRET_LEN} \
                 printable characters without spaces, '@' or '/' (satrun makes one: 64 hex digits)"
            )));
        }
        Ok(Secret(text.as_bytes().into()))
    }

    /// The secret given by `SAT_SECRET`, if it is set and not empty.
    pub fn from_env() -> SatResult<Option<Secret>> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Secret::from_env`] over any variable lookup.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> SatResult<Option<Secret>> {
        match get(SECRET_VAR)
            .map(Zeroizing::new)
            .filter(|s| !s.trim().is_empty())
        {
            Some(text) => Secret::parse(&text, SECRET_VAR).map(Some),
            None => Ok(None),
        }
    }

    /// The secret's text, to hand to a process that must hold it (an
    /// environment variable, a file readable by its owner only).
    pub fn expose(&self) -> &str {
        std::str::from_utf8(&self.0).expect("a secret is ASCII")
    }

    fn mac(&self, side: Side, joiner: &Nonce, admitter: &Nonce) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(side.label());
        mac.update(joiner);
        mac.update(admitter);
        mac
    }
}

/// The two sides of a handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The process that joins (a rank, an attaching process).
    Joiner,
    /// The process that admits it (the seed, the service's desk).
    Admitter,
}

impl Side {
    fn label(self) -> &'static [u8] {
        match self {
            Side::Joiner => b"SAT handshake 1: joiner",
            Side::Admitter => b"SAT handshake 1: admitter",
        }
    }
}

/// What is wrong with a proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A secret is required and the other side proved none.
    Missing,
    /// The other side proved a different secret.
    Wrong,
    /// The other side proved a secret and this side has none.
    Unexpected,
}

/// This side's proof for a handshake: none without a secret.
pub fn prove(
    secret: Option<&Secret>,
    side: Side,
    joiner: &Nonce,
    admitter: &Nonce,
) -> Option<Proof> {
    secret.map(|s| s.mac(side, joiner, admitter).finalize().into_bytes().into())
}

/// Checks the proof of the other side (`side` is the side that made it),
/// in constant time.
pub fn check(
    secret: Option<&Secret>,
    side: Side,
    joiner: &Nonce,
    admitter: &Nonce,
    proof: Option<&Proof>,
) -> Result<(), Refusal> {
    match (secret, proof) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(Refusal::Unexpected),
        (Some(_), None) => Err(Refusal::Missing),
        (Some(s), Some(p)) => s
            .mac(side, joiner, admitter)
            .verify_slice(p)
            .map_err(|_| Refusal::Wrong),
    }
}

/// A fresh nonce.
pub fn nonce() -> SatResult<Nonce> {
    let mut n = [0u8; 32];
    fill_random(&mut n)?;
    Ok(n)
}

fn fill_random(buf: &mut [u8]) -> SatResult<()> {
    getrandom::getrandom(buf).map_err(|e| {
        SatError::Bootstrap(format!(
            "the operating system's random generator failed: {e}"
        ))
    })
}

/// A service's address as a process attaching to it gives it: where the
/// service listens, and the secret when the string carries one.
#[derive(Debug, Clone)]
pub struct ServiceAddress {
    /// `host:port`.
    pub host_port: String,
    pub secret: Option<Secret>,
}

impl ServiceAddress {
    /// Reads a connection string: `sat://SECRET@host:port` (the address
    /// file's one line), or `host:port`, whose secret then comes from
    /// `SAT_SECRET` if set. Errors never repeat the secret.
    pub fn parse(text: &str) -> SatResult<ServiceAddress> {
        Self::parse_with(text, |name| std::env::var(name).ok())
    }

    /// [`ServiceAddress::parse`] over any variable lookup.
    pub fn parse_with(
        text: &str,
        get: impl Fn(&str) -> Option<String>,
    ) -> SatResult<ServiceAddress> {
        let text = text.trim();
        let Some(rest) = text.strip_prefix(SCHEME) else {
            if text.contains('@') {
                return Err(SatError::Usage(
                    "a service address with a secret starts with sat:// \
                     (sat://SECRET@host:port, as in the service's address file)"
                        .into(),
                ));
            }
            return Ok(ServiceAddress {
                host_port: text.to_owned(),
                secret: Secret::from_lookup(get)?,
            });
        };
        let Some((secret, host_port)) = rest.split_once('@') else {
            // Not repeated: what follows sat:// may be a secret.
            return Err(SatError::Usage(
                "a connection string is sat://SECRET@host:port, as in the service's address \
                 file: this one has no '@'"
                    .into(),
            ));
        };
        let host_port = host_port.trim_end_matches('/');
        if host_port.is_empty() || host_port.contains('@') || host_port.contains('/') {
            return Err(SatError::Usage(
                "a connection string is sat://SECRET@host:port: this one has no host:port after '@'"
                    .into(),
            ));
        }
        Ok(ServiceAddress {
            host_port: host_port.to_owned(),
            secret: Some(Secret::parse(
                secret,
                "the secret of the connection string",
            )?),
        })
    }

    /// The connection string, secret included: for the address file only.
    /// Wiped when dropped, as the secret is (and made at its final size).
    pub fn connection_string(&self) -> Zeroizing<String> {
        let Some(s) = &self.secret else {
            return Zeroizing::new(self.host_port.clone());
        };
        let secret = s.expose();
        let mut text =
            String::with_capacity(SCHEME.len() + secret.len() + 1 + self.host_port.len() + 1);
        text.push_str(SCHEME);
        text.push_str(secret);
        text.push('@');
        text.push_str(&self.host_port);
        Zeroizing::new(text)
    }
}

/// Describes a refused proof for the admitting side's log and the refused
/// process.
pub fn refusal_reason(refusal: Refusal, what: &str) -> String {
    match refusal {
        Refusal::Missing => format!(
            "{what} requires a secret and none was presented: use the connection string of the \
             address file (sat://SECRET@host:port), or set {SECRET_VAR}"
        ),
        Refusal::Wrong => format!(
            "the secret presented is not {what}'s: use the connection string of its address \
             file, or the same {SECRET_VAR} as the process that started it"
        ),
        Refusal::Unexpected => format!(
            "a secret was presented but {what} has none: set the same {SECRET_VAR} on both sides"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nonces() -> (Nonce, Nonce) {
        (nonce().unwrap(), nonce().unwrap())
    }

    #[test]
    fn a_proof_passes_only_with_the_same_secret_side_and_nonces() {
        let s = Secret::generate().unwrap();
        let other = Secret::generate().unwrap();
        assert_ne!(s, other);
        assert_eq!(s.expose().len(), 64);
        let (j, a) = nonces();
        let p = prove(Some(&s), Side::Joiner, &j, &a).unwrap();
        assert_eq!(check(Some(&s), Side::Joiner, &j, &a, Some(&p)), Ok(()));
        assert_eq!(
            check(Some(&other), Side::Joiner, &j, &a, Some(&p)),
            Err(Refusal::Wrong)
        );
        // One side's proof is not the other's.
        assert_eq!(
            check(Some(&s), Side::Admitter, &j, &a, Some(&p)),
            Err(Refusal::Wrong)
        );
        // A proof from an earlier handshake does not pass a fresh one.
        let (j2, a2) = nonces();
        assert_eq!(
            check(Some(&s), Side::Joiner, &j, &a2, Some(&p)),
            Err(Refusal::Wrong)
        );
        assert_eq!(
            check(Some(&s), Side::Joiner, &j2, &a, Some(&p)),
            Err(Refusal::Wrong)
        );
        assert_eq!(
            check(Some(&s), Side::Joiner, &j, &a, None),
            Err(Refusal::Missing)
        );
        assert_eq!(
            check(None, Side::Joiner, &j, &a, Some(&p)),
            Err(Refusal::Unexpected)
        );
        assert_eq!(check(None, Side::Joiner, &j, &a, None), Ok(()));
        assert_eq!(prove(None, Side::Joiner, &j, &a), None);
    }

    #[test]
    fn a_secret_never_shows_in_debug_output_or_errors() {
        let s = Secret::parse("correct-horse-battery-staple", "test").unwrap();
        assert_eq!(format!("{s:?}"), "Secret(..)");
        let a =
            ServiceAddress::parse_with("sat://correct-horse-battery-staple@h:1", |_| None).unwrap();
        assert!(!format!("{a:?}").contains("horse"));
        for bad in [
            "sat://short@h:1",
            "sat://correct horse battery staple@h:1",
            "sat://correct-horse-battery-staple@",
            "sat://correct-horse-battery-staple",
        ] {
            let e = ServiceAddress::parse_with(bad, |_| None)
                .unwrap_err()
                .to_string();
            assert!(!e.contains("horse") && !e.contains("short"), "{e}");
            assert!(
                e.contains("sat://SECRET@host:port") || e.contains("secret"),
                "{e}"
            );
        }
        let e = Secret::parse("tiny", SECRET_VAR).unwrap_err().to_string();
        assert!(e.contains(SECRET_VAR) && !e.contains("tiny"), "{e}");
    }

    #[test]
    fn connection_strings_read_back_as_written() {
        let s = Secret::generate().unwrap();
        let a = ServiceAddress {
            host_port: "127.0.0.1:7070".into(),
            secret: Some(s.clone()),
        };
        let text = a.connection_string();
        assert!(text.starts_with("sat://") && text.ends_with("@127.0.0.1:7070"));
        let back = ServiceAddress::parse_with(&format!("{}\n", text.as_str()), |_| None).unwrap();
        assert_eq!(back.host_port, "127.0.0.1:7070");
        assert_eq!(back.secret, Some(s));
        // Without a secret in the string, SAT_SECRET gives it.
        let env = |name: &str| (name == SECRET_VAR).then(|| "0123456789abcdef0123".to_owned());
        let plain = ServiceAddress::parse_with("[::1]:7070", env).unwrap();
        assert_eq!(plain.host_port, "[::1]:7070");
        assert_eq!(plain.secret.unwrap().expose(), "0123456789abcdef0123");
        assert!(ServiceAddress::parse_with("h:1", |_| None)
            .unwrap()
            .secret
            .is_none());
        assert!(ServiceAddress::parse_with("user@h:1", |_| None).is_err());
    }
}
