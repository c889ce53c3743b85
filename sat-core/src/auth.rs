//! Who may join: the secret of a run or of a service, and the handshake by
//! which a process proves it holds the secret without ever sending it, and
//! without handing anyone something to test guesses of it against.
//!
//! A process that joins (a rank contacting the seed, a process attaching to
//! a service's desk) and the one that admits it run SPAKE2, a
//! password-authenticated key exchange, with the secret as the password:
//! each sends a token (its SPAKE2 message, a fresh curve point blinded by
//! the secret), and each derives a key from both tokens and the secret. The
//! two keys are equal only when both sides hold the same secret. Each side
//! then proves it has the key with HMAC-SHA256, keyed by it, over a label
//! naming its side and both tokens:
//!
//! ```text
//! joiner   -> admitter   Hello { .., nonce: J }              (J: the joiner's token)
//! admitter -> joiner     Challenge { nonce: A, proof: HMAC(k, "admitter" | J | A) }
//! joiner   -> admitter   Proof(HMAC(k, "joiner" | J | A))
//! ```
//!
//! The admitter checks the joiner's proof before it hands out a rank, a
//! slot or any address; the joiner checks the admitter's, so it never sends
//! its endpoint to a process that merely listens on the port. The labels
//! keep one side's proof from passing as the other's; fresh tokens keep an
//! overheard proof from being replayed.
//!
//! Why a key exchange and not an HMAC keyed by the secret itself: such an
//! HMAC, with the nonces beside it, lets whoever receives one (any process
//! that connects to the desk, which proves itself first; anyone who
//! overhears a handshake) test guesses of the secret offline, as fast as
//! it can compute HMACs, and a secret a person chose falls in minutes. Here
//! a guess can only be tested by a handshake with the admitter, one guess a
//! connection: the key depends on the admitter's random scalar, which never
//! leaves it. A wrong proof looks like random bytes.
//!
//! A token travels where a 32-byte nonce used to: the SPAKE2 message less
//! its first byte, which names the sender's side and so is known.
//!
//! A [`Secret`] never reaches a log, an error message or `Debug` output:
//! errors name where a secret came from, never what it is.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use spake2::{Ed25519Group, Identity, Password, Spake2};
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

/// A side's token in one handshake: its SPAKE2 message without the side's
/// byte, or fresh random bytes from a side without a secret (it proves
/// nothing then, and is refused by a side that has one).
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
    /// The password of the handshake's key exchange: derived from the
    /// secret, overwritten when dropped.
    fn password(&self) -> Zeroizing<[u8; 32]> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(b"SAT handshake 2: password");
        Zeroizing::new(mac.finalize().into_bytes().into())
    }

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
            Side::Joiner => b"SAT handshake 2: joiner",
            Side::Admitter => b"SAT handshake 2: admitter",
        }
    }

    /// The first byte of this side's SPAKE2 message (left out of its token).
    fn spake_byte(self) -> u8 {
        match self {
            Side::Joiner => b'A',
            Side::Admitter => b'B',
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Joiner => Side::Admitter,
            Side::Admitter => Side::Joiner,
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

/// The SPAKE2 identities of the two sides: they make the joiner's and the
/// admitter's messages differ, so that one side's token cannot be sent back
/// as the other's.
const JOINER_ID: &[u8] = b"SAT joiner";
const ADMITTER_ID: &[u8] = b"SAT admitter";

/// One side's half of a handshake, before it has the other's token.
pub struct Handshake {
    side: Side,
    spake: Option<Spake2<Ed25519Group>>,
    token: Nonce,
}

impl Handshake {
    /// Starts this side's half: with a secret, a SPAKE2 message; without,
    /// random bytes (the other side then finds no proof, or one it cannot
    /// check, and refuses).
    pub fn start(secret: Option<&Secret>, side: Side) -> SatResult<Handshake> {
        let Some(secret) = secret else {
            return Ok(Handshake {
                side,
                spake: None,
                token: nonce()?,
            });
        };
        // The crate keeps copies of the password that it does not
        // overwrite when they are dropped, so it gets a value derived from
        // the secret, never the secret's text: freed memory may keep that
        // value (which opens this run or service only), not the text, which
        // a person may have used elsewhere (`tests/secrets_wiped.rs`).
        let derived = secret.password();
        let password = Password::new(derived.as_slice());
        let (joiner, admitter) = (Identity::new(JOINER_ID), Identity::new(ADMITTER_ID));
        let (spake, message) = match side {
            Side::Joiner => Spake2::<Ed25519Group>::start_a(&password, &joiner, &admitter),
            Side::Admitter => Spake2::<Ed25519Group>::start_b(&password, &joiner, &admitter),
        };
        let token = match message.split_first() {
            Some((&b, rest)) if b == side.spake_byte() => rest.try_into().ok(),
            _ => None,
        }
        .ok_or_else(|| {
            SatError::Bootstrap(
                "the handshake's key exchange made a message of another shape".into(),
            )
        })?;
        Ok(Handshake {
            side,
            spake: Some(spake),
            token,
        })
    }

    /// The admitter's whole half, once the joiner's token came: the token
    /// to answer with, and the proofs.
    pub fn answer(secret: Option<&Secret>, joiners: &Nonce) -> SatResult<(Nonce, Proofs)> {
        let admitter = Handshake::start(secret, Side::Admitter)?;
        let token = admitter.token();
        Ok((token, admitter.finish(joiners)?))
    }

    /// The token this side sends.
    pub fn token(&self) -> Nonce {
        self.token
    }

    /// Both tokens known: what proves this side and checks the other.
    pub fn finish(self, theirs: &Nonce) -> SatResult<Proofs> {
        let (joiner, admitter) = match self.side {
            Side::Joiner => (self.token, *theirs),
            Side::Admitter => (*theirs, self.token),
        };
        let key = match self.spake {
            None => None,
            Some(spake) => {
                let mut message = [0u8; 33];
                message[0] = self.side.other().spake_byte();
                message[1..].copy_from_slice(theirs);
                match spake.finish(&message) {
                    Ok(key) => Some(Zeroizing::new(key)),
                    // Not a point of the curve: the other side holds no key
                    // this one could share. A random key makes this side's
                    // proof random bytes and refuses any of theirs, as a
                    // wrong secret would.
                    Err(_) => {
                        let mut key = Zeroizing::new(vec![0u8; 32]);
                        fill_random(&mut key)?;
                        Some(key)
                    }
                }
            }
        };
        Ok(Proofs {
            side: self.side,
            key,
            joiner,
            admitter,
        })
    }
}

/// A finished handshake's key: the proof of this side, the check of the
/// other's.
pub struct Proofs {
    side: Side,
    key: Option<Zeroizing<Vec<u8>>>,
    joiner: Nonce,
    admitter: Nonce,
}

impl Proofs {
    fn mac(&self, key: &[u8], side: Side) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(side.label());
        mac.update(&self.joiner);
        mac.update(&self.admitter);
        mac
    }

    /// This side's proof: none without a secret.
    pub fn mine(&self) -> Option<Proof> {
        let key = self.key.as_ref()?;
        Some(self.mac(key, self.side).finalize().into_bytes().into())
    }

    /// Checks the other side's proof, in constant time.
    pub fn check_theirs(&self, proof: Option<&Proof>) -> Result<(), Refusal> {
        match (&self.key, proof) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(Refusal::Unexpected),
            (Some(_), None) => Err(Refusal::Missing),
            (Some(key), Some(p)) => self
                .mac(key, self.side.other())
                .verify_slice(p)
                .map_err(|_| Refusal::Wrong),
        }
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

    /// A whole handshake: the joiner's and the admitter's finished halves.
    fn handshake(joiner: Option<&Secret>, admitter: Option<&Secret>) -> (Proofs, Proofs) {
        let j = Handshake::start(joiner, Side::Joiner).unwrap();
        let a = Handshake::start(admitter, Side::Admitter).unwrap();
        let (jt, at) = (j.token(), a.token());
        (j.finish(&at).unwrap(), a.finish(&jt).unwrap())
    }

    #[test]
    fn a_proof_passes_only_with_the_same_secret_side_and_tokens() {
        let s = Secret::generate().unwrap();
        let other = Secret::generate().unwrap();
        assert_ne!(s, other);
        assert_eq!(s.expose().len(), 64);
        let (j, a) = handshake(Some(&s), Some(&s));
        let (jp, ap) = (j.mine().unwrap(), a.mine().unwrap());
        assert_eq!(a.check_theirs(Some(&jp)), Ok(()));
        assert_eq!(j.check_theirs(Some(&ap)), Ok(()));
        // One side's proof is not the other's.
        assert_eq!(a.check_theirs(Some(&ap)), Err(Refusal::Wrong));
        assert_eq!(j.check_theirs(Some(&jp)), Err(Refusal::Wrong));
        // Another secret on either side: each refuses the other.
        for (js, ad) in [(&other, &s), (&s, &other)] {
            let (j2, a2) = handshake(Some(js), Some(ad));
            assert_eq!(a2.check_theirs(j2.mine().as_ref()), Err(Refusal::Wrong));
            assert_eq!(j2.check_theirs(a2.mine().as_ref()), Err(Refusal::Wrong));
        }
        // A proof from an earlier handshake does not pass a fresh one.
        let (j3, a3) = handshake(Some(&s), Some(&s));
        assert_eq!(a3.check_theirs(Some(&jp)), Err(Refusal::Wrong));
        assert_eq!(j3.check_theirs(Some(&ap)), Err(Refusal::Wrong));
        // With a secret on one side only.
        let (j4, a4) = handshake(None, Some(&s));
        assert_eq!(j4.mine(), None);
        assert_eq!(a4.check_theirs(None), Err(Refusal::Missing));
        assert_eq!(
            j4.check_theirs(a4.mine().as_ref()),
            Err(Refusal::Unexpected)
        );
        let (j5, a5) = handshake(Some(&s), None);
        assert_eq!(j5.check_theirs(None), Err(Refusal::Missing));
        assert_eq!(
            a5.check_theirs(j5.mine().as_ref()),
            Err(Refusal::Unexpected)
        );
        let (j6, a6) = handshake(None, None);
        assert_eq!(j6.check_theirs(a6.mine().as_ref()), Ok(()));
        assert_eq!(a6.check_theirs(j6.mine().as_ref()), Ok(()));
    }

    #[test]
    fn a_token_an_impostor_makes_up_gets_no_proof_through() {
        let s = Secret::generate().unwrap();
        // The joiner's own token sent back, bytes that are no point of the
        // curve or are, a token of the other side's shape: the admitter
        // refuses whatever proof comes with it, and does not panic.
        let joiner = Handshake::start(Some(&s), Side::Joiner).unwrap();
        let reflected = joiner.token();
        for theirs in [reflected, [0u8; 32], [0xff; 32], [2u8; 32]] {
            let a = Handshake::start(Some(&s), Side::Admitter)
                .unwrap()
                .finish(&theirs)
                .unwrap();
            assert!(a.mine().is_some());
            assert_eq!(a.check_theirs(Some(&[0u8; 32])), Err(Refusal::Wrong));
        }
        // Two admitters answering the same joiner token prove with
        // different keys: the admitter's key depends on its own fresh
        // randomness, not on the secret and the tokens alone.
        let first = Handshake::start(Some(&s), Side::Admitter).unwrap();
        let second = Handshake::start(Some(&s), Side::Admitter).unwrap();
        assert_ne!(first.token(), second.token());
        let (p1, p2) = (
            first.finish(&reflected).unwrap().mine(),
            second.finish(&reflected).unwrap().mine(),
        );
        assert_ne!(p1, p2);
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
