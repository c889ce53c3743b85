//! `sat-abe`: the authority's tool of the encryption layer (feature `abe`).
//! See `sat-abe help` and docs/ENCRYPTION.md.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sat_core::abe::keys::{
    self, AuthorityKeys, AuthorityPublic, KeyError, KeyKind, RevocationList, TenantKey,
};
use sat_core::abe::Policy;

const USAGE: &str = "\
sat-abe: keys of SAT's attribute-based encryption layer

usage:
  sat-abe setup [--out DIR]
      A new authority: DIR/authority.key (secret, mode 0600) and DIR/public.key
      (mode 0644). DIR defaults to the current folder and is created if
      missing. If either file exists, neither is written.
  sat-abe keygen --authority FILE --tenant NAME --attrs A,B,... [--out FILE]
      A tenant's key file (mode 0600; default NAME.key in the current
      folder): its attribute key, a signing key and the authority's
      certificate of both. --authority is the authority.key of `setup`.
      NAME: 1 to 64 letters, digits, '_', '-', '.' or '@'.
      --attrs may be repeated and takes commas or spaces:
      `--attrs tenant_a,analyst`, `--attrs tenant_a --attrs analyst` and
      `--attrs \"tenant_a analyst\"` are the same. Attributes: letters,
      digits, '_', '-', '.', ':' (not `and`, `or`); an empty one (`a,,b`,
      a trailing comma) or one given twice is refused. An existing file is
      never overwritten.
      --days N: the certificate's validity (default 365); past it, readers
      refuse what the key signs and the key is refused at load.
  sat-abe revoke --authority FILE --serial S [--serial S ...] --crl FILE
      Revokes certificates by serial (`show` prints a key's serial, in hex):
      writes the authority's signed revocation list FILE, the one there plus
      these serials under the next sequence number (created if missing).
      Give it to every process as SAT_ABE_CRL=FILE: they then refuse data
      and key epochs signed under a revoked certificate. A process refuses
      a list older than one it has.
  sat-abe show FILE [--authority FILE]
      What a key file holds, never its secrets: its kind, the authority's
      verifying key, and for a tenant its name, attributes, certificate id,
      serial, expiry and whether the certificate verifies against the
      authority key the file holds. Of a revocation list: its sequence
      number and revoked serials, and with --authority (any key file of the
      authority) whether the authority signed it. Exit 2 if the file cannot
      be used (the reason on stderr).
  sat-abe check FILE --policy POLICY
      Whether a tenant key satisfies POLICY (exit 0 if it does, 1 if not).
      POLICY: attributes with `and`, `or` (any case; `and` binds tighter)
      and parentheses, e.g. \"(tenant_a and analyst) or admin\".
  sat-abe help   (also --help, -h, or no arguments)

Options take their value as the next argument or after '=' (--out=DIR).

A process takes its key from SAT_ABE_KEY=FILE ({rank} in FILE is replaced by
its rank). Exit status: 0 done, 1 `check` not satisfied, 2 a usage or input
error (one line on stderr saying what to do).";

/// A usage or input error: one line for stderr.
struct Fail(String);

impl From<KeyError> for Fail {
    fn from(e: KeyError) -> Fail {
        Fail(e.to_string())
    }
}

/// A line on stdout. A closed stdout (`sat-abe show k | head -1`) is not an
/// error of this command, and must not become a panic.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

fn main() -> ExitCode {
    let result = std::env::args_os()
        .skip(1)
        .map(|a| {
            a.into_string().map_err(|a| {
                Fail(format!(
                    "argument {a:?} is not valid UTF-8: give key files paths in UTF-8"
                ))
            })
        })
        .collect::<Result<Vec<String>, Fail>>()
        .and_then(|args| run(&args));
    match result {
        Ok(code) => code,
        Err(Fail(msg)) => {
            let _ = writeln!(std::io::stderr().lock(), "sat-abe: {msg}");
            ExitCode::from(2)
        }
    }
}

/// Options after a subcommand: `--name value` pairs (`--name=value` too)
/// and plain words.
struct Options {
    pairs: Vec<(String, String)>,
    words: Vec<String>,
}

fn options(args: &[String], known: &[&str]) -> Result<Options, Fail> {
    let mut o = Options {
        pairs: Vec::new(),
        words: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(name) = a.strip_prefix("--") {
            let (name, value) = match name.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (name, None),
            };
            if !known.contains(&name) {
                return Err(Fail(format!("unknown option --{name}; see sat-abe help")));
            }
            // Not `--tenant --attrs x` (the value was forgotten), nor an empty one.
            let value = match value {
                Some(v) => Some(v),
                None => it
                    .next()
                    .map(String::as_str)
                    .filter(|v| !v.starts_with("--")),
            }
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Fail(format!("--{name} needs a value; see sat-abe help")))?;
            o.pairs.push((name.to_string(), value.to_string()));
        } else {
            o.words.push(a.clone());
        }
    }
    Ok(o)
}

impl Options {
    fn one(&self, name: &str) -> Result<Option<&str>, Fail> {
        let mut values = self.pairs.iter().filter(|(n, _)| n == name);
        let first = values.next().map(|(_, v)| v.as_str());
        if values.next().is_some() {
            return Err(Fail(format!("--{name} given twice; give it once")));
        }
        Ok(first)
    }

    fn required(&self, name: &str, what: &str) -> Result<&str, Fail> {
        self.one(name)?
            .ok_or_else(|| Fail(format!("--{name} is missing: give {what}")))
    }

    fn all(&self, name: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn no_words(&self, command: &str) -> Result<(), Fail> {
        match self.words.first() {
            Some(w) => Err(Fail(format!(
                "{command}: unexpected argument {w:?}; see sat-abe help"
            ))),
            None => Ok(()),
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, Fail> {
    let help = |a: &String| a == "help" || a == "--help" || a == "-h";
    let Some(command) = args.first().filter(|c| !help(c)) else {
        say!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    };
    let rest = &args[1..];
    // `sat-abe keygen --help`; not `help` here, which may be a file's name.
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        say!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    }
    match command.as_str() {
        "setup" => setup(&options(rest, &["out"])?),
        "keygen" => keygen(&options(
            rest,
            &["authority", "tenant", "attrs", "out", "days"],
        )?),
        "revoke" => revoke(&options(rest, &["authority", "serial", "crl"])?),
        "show" => show(&options(rest, &["authority"])?),
        "check" => check(&options(rest, &["policy"])?),
        other => Err(Fail(format!(
            "unknown command {other:?}: use setup, keygen, revoke, show, check or help"
        ))),
    }
}

/// SAT never overwrites a key file: what to do instead.
fn exists(path: &Path) -> Fail {
    Fail(format!(
        "{} already exists: SAT never overwrites a key file; remove it or choose another --out",
        path.display()
    ))
}

/// The library's errors, its refusal to overwrite told in this command's terms.
fn refusal(e: KeyError) -> Fail {
    match e {
        KeyError::Exists { path } => exists(&path),
        e => e.into(),
    }
}

/// A key file that does not load: a certificate that fails to verify also
/// says what to do.
fn unusable(e: KeyError) -> Fail {
    match e {
        KeyError::BadCertificate { .. } => Fail(format!(
            "{e}; this key cannot be used: have the authority issue a new one (sat-abe keygen)"
        )),
        e => e.into(),
    }
}

fn setup(o: &Options) -> Result<ExitCode, Fail> {
    o.no_words("setup")?;
    let dir = PathBuf::from(o.one("out")?.unwrap_or("."));
    if dir.exists() && !dir.is_dir() {
        return Err(Fail(format!(
            "--out {}: not a folder; give the folder for authority.key and public.key",
            dir.display()
        )));
    }
    let secret = dir.join("authority.key");
    let public = dir.join("public.key");
    // Both checked first, so that a refusal writes neither (a dangling link
    // counts as there: saving would refuse it).
    for p in [&secret, &public] {
        if p.symlink_metadata().is_ok() {
            return Err(exists(p));
        }
    }
    // A folder made here is the owner's alone (whatever the umask): it
    // holds the authority's secret keys, which nobody else may replace.
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Fail(format!("cannot create {}: {e}", dir.display())))?;
    }
    let auth = AuthorityKeys::setup()?;
    auth.save(&secret).map_err(refusal)?;
    auth.public().save(&public).map_err(refusal)?;
    say!(
        "authority written: {} (secret, keep it safe) and {}",
        secret.display(),
        public.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `--attrs` values: commas or spaces separate attributes (`a,b`, `a, b`,
/// `"a b"`, repeated `--attrs`). An empty one (`a,,b`, a trailing comma) or
/// one given twice is refused rather than dropped, as it is most likely a
/// typing mistake. Which names are allowed is the library's rule
/// ([`sat_core::abe::AbeError::BadAttribute`]).
fn attributes(values: &[&str]) -> Result<Vec<String>, Fail> {
    let mut attrs: Vec<String> = Vec::new();
    for v in values {
        for part in v.split(',') {
            let words: Vec<&str> = part.split_whitespace().collect();
            if words.is_empty() {
                return Err(Fail(format!(
                    "--attrs {v:?} has an empty attribute; separate attributes with single commas"
                )));
            }
            for w in words {
                if attrs.iter().any(|a| a == w) {
                    return Err(Fail(format!(
                        "attribute {w:?} is given twice in --attrs; give each attribute once"
                    )));
                }
                attrs.push(w.to_string());
            }
        }
    }
    Ok(attrs)
}

fn keygen(o: &Options) -> Result<ExitCode, Fail> {
    o.no_words("keygen")?;
    let authority = o.required("authority", "the authority.key that `sat-abe setup` wrote")?;
    let tenant = o.required("tenant", "the tenant's name")?;
    let values = o.all("attrs");
    if values.is_empty() {
        return Err(Fail(
            "--attrs is missing: give the tenant's attributes, e.g. --attrs tenant_a,analyst"
                .into(),
        ));
    }
    let attrs = attributes(&values)?;
    let out = o.one("out")?;
    let auth = AuthorityKeys::load(Path::new(authority))?;
    let refs: Vec<&str> = attrs.iter().map(String::as_str).collect();
    let days = match o.one("days")? {
        None => 365,
        Some(d) => d
            .parse::<u64>()
            .ok()
            .filter(|&d| d > 0 && d <= 36_500)
            .ok_or_else(|| {
                Fail(format!(
                    "--days {d:?}: give a number of days from 1 to 36500"
                ))
            })?,
    };
    // Issued first: it checks the tenant's name, of which the default file name is made.
    let key = auth.issue_for(
        tenant,
        &refs,
        std::time::Duration::from_secs(days * 24 * 3600),
    )?;
    let out = out
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("{tenant}.key")));
    key.save(&out).map_err(refusal)?;
    say!(
        "tenant {tenant:?} with attributes {attrs:?} written to {}",
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn revoke(o: &Options) -> Result<ExitCode, Fail> {
    o.no_words("revoke")?;
    let authority = o.required("authority", "the authority.key that `sat-abe setup` wrote")?;
    let crl = PathBuf::from(o.required("crl", "the revocation list file to write")?);
    let values = o.all("serial");
    if values.is_empty() {
        return Err(Fail(
            "--serial is missing: give the serial `sat-abe show` prints for the key".into(),
        ));
    }
    let serials = values
        .iter()
        .map(|v| {
            // Exactly the 16 digits `show` prints: a digit left out of a
            // copied serial would revoke some other certificate, or none.
            let digits = v.strip_prefix("0x").unwrap_or(v);
            let whole = digits.len() == 16 && digits.bytes().all(|b| b.is_ascii_hexdigit());
            (whole)
                .then(|| u64::from_str_radix(digits, 16).ok())
                .flatten()
                .ok_or_else(|| {
                    Fail(format!(
                        "--serial {v:?}: a serial is 16 hex digits, as `sat-abe show` prints \
                         it; copy it whole"
                    ))
                })
        })
        .collect::<Result<Vec<u64>, Fail>>()?;
    let auth = AuthorityKeys::load(Path::new(authority))?;
    let previous = if crl.exists() {
        Some(RevocationList::load(&crl, auth.public())?)
    } else {
        None
    };
    let list = auth.revoke(previous.as_ref(), &serials);
    list.save(&crl)?;
    say!(
        "revocation list {} ({} certificates revoked) written to {}",
        list.sequence,
        list.revoked.len(),
        crl.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn show(o: &Options) -> Result<ExitCode, Fail> {
    let [file] = o.words.as_slice() else {
        return Err(Fail("show needs one key file; see sat-abe help".into()));
    };
    let path = Path::new(file);
    if let Some(list) = RevocationList::read_unchecked(path) {
        return show_revocations(o, &list);
    }
    if o.one("authority")?.is_some() {
        return Err(Fail(
            "--authority is for a revocation list: a key file carries its authority's key".into(),
        ));
    }
    // The public part first, so that a file whose certificate does not verify
    // is still shown; then the file is loaded as its kind, which checks the
    // rest (its secrets too, never printed).
    let info = keys::inspect(path)?;
    let loaded = match info.kind {
        KeyKind::Authority => {
            say!("kind: authority (secret keys: keep this file safe; tenants get their own files)");
            say!("authority key: {}", hex(&info.authority.verifying));
            AuthorityKeys::load(path).map(drop)
        }
        KeyKind::Public => {
            say!("kind: authority public keys");
            say!("authority key: {}", hex(&info.authority.verifying));
            AuthorityPublic::load(path).map(drop)
        }
        KeyKind::Tenant => {
            say!("kind: tenant key");
            if let Some(cert) = &info.certificate {
                say!("tenant: {}", cert.tenant);
                say!("attributes: {}", cert.attributes.join(" "));
                say!("certificate: {}", hex(&cert.id()));
                say!("serial: {:016x}", cert.serial);
                say!("valid until: {} (seconds since 1970, UTC)", cert.not_after);
                match cert.verify(&info.authority) {
                    Ok(()) => say!("certificate verifies against the file's authority key"),
                    Err(e) => say!("certificate does NOT verify: {e}"),
                }
            }
            say!("authority key: {}", hex(&info.authority.verifying));
            TenantKey::load(path).map(drop)
        }
    };
    loaded.map_err(unusable)?;
    Ok(ExitCode::SUCCESS)
}

/// `show` of a revocation list: what it revokes, and with `--authority`
/// (any key file of that authority) whether the authority signed it.
fn show_revocations(o: &Options, list: &RevocationList) -> Result<ExitCode, Fail> {
    say!("kind: revocation list");
    say!("sequence: {}", list.sequence);
    say!("issued: {} (seconds since 1970, UTC)", list.issued);
    let serials: Vec<String> = list.revoked.iter().map(|s| format!("{s:016x}")).collect();
    say!("revoked serials ({}): {}", serials.len(), serials.join(" "));
    let Some(authority) = o.one("authority")? else {
        say!("signature not checked: give --authority FILE (a key file of the authority)");
        return Ok(ExitCode::SUCCESS);
    };
    let info = keys::inspect(Path::new(authority)).map_err(unusable)?;
    match list.verify(&info.authority) {
        Ok(()) => say!("signed by the authority of {authority}"),
        Err(e) => {
            say!("NOT signed by the authority of {authority}: {e}");
            return Err(Fail(format!("the revocation list does not verify: {e}")));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn check(o: &Options) -> Result<ExitCode, Fail> {
    let [file] = o.words.as_slice() else {
        return Err(Fail(
            "check needs one tenant key file; see sat-abe help".into(),
        ));
    };
    let text = o.required("policy", "a policy such as \"tenant_a and analyst\"")?;
    let policy = Policy::parse(text).map_err(|e| {
        Fail(format!(
            "--policy {text:?}, at character {}: {}",
            e.at, e.why
        ))
    })?;
    let key = TenantKey::load(Path::new(file)).map_err(unusable)?;
    let satisfied = key.certificate().satisfies(&policy);
    say!(
        "{:?} with attributes {:?} {} {policy}",
        key.certificate().tenant,
        key.attributes(),
        if satisfied {
            "satisfies"
        } else {
            "does not satisfy"
        }
    );
    Ok(if satisfied {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
