//! `sat-abe`: the authority's tool of the encryption layer (feature `abe`).
//! See `sat-abe help` and docs/ENCRYPTION.md.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sat_core::abe::keys::{AuthorityKeys, AuthorityPublic, Certificate, KeyError, TenantKey};
use sat_core::abe::Policy;

const USAGE: &str = "\
sat-abe: keys of SAT's attribute-based encryption layer

usage:
  sat-abe setup [--out DIR]
      A new authority: DIR/authority.key (secret, mode 0600) and DIR/public.key.
      DIR defaults to the current folder and is created if missing. Existing
      files are never overwritten.
  sat-abe keygen --authority FILE --tenant NAME --attrs A,B,... [--out FILE]
      A tenant's key file (mode 0600; default NAME.key): its attribute key, a
      signing key and the authority's certificate of both. --attrs may be
      repeated and takes commas or spaces. Attributes: letters, digits,
      '_', '-', '.', ':'.
  sat-abe show FILE
      What a key file holds (never its secrets).
  sat-abe check FILE --policy POLICY
      Whether a tenant key satisfies POLICY (exit 0 if it does, 1 if not).
      POLICY: attributes with `and`, `or` and parentheses, e.g.
      \"(tenant_a and analyst) or admin\".
  sat-abe help

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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(Fail(msg)) => {
            eprintln!("sat-abe: {msg}");
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
                Some((n, v)) => (n.to_string(), v.to_string()),
                None => {
                    let v = it
                        .next()
                        .ok_or_else(|| Fail(format!("--{name} needs a value; see sat-abe help")))?;
                    (name.to_string(), v.clone())
                }
            };
            if !known.contains(&name.as_str()) {
                return Err(Fail(format!("unknown option --{name}; see sat-abe help")));
            }
            o.pairs.push((name, value));
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
    let Some(command) = args.first() else {
        println!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    };
    let rest = &args[1..];
    match command.as_str() {
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        "setup" => setup(&options(rest, &["out"])?),
        "keygen" => keygen(&options(rest, &["authority", "tenant", "attrs", "out"])?),
        "show" => show(&options(rest, &[])?),
        "check" => check(&options(rest, &["policy"])?),
        other => Err(Fail(format!(
            "unknown command {other:?}: use setup, keygen, show, check or help"
        ))),
    }
}

fn setup(o: &Options) -> Result<ExitCode, Fail> {
    o.no_words("setup")?;
    let dir = PathBuf::from(o.one("out")?.unwrap_or("."));
    let secret = dir.join("authority.key");
    let public = dir.join("public.key");
    // Both checked first, so that a refusal writes neither.
    for p in [&secret, &public] {
        if p.exists() {
            return Err(Fail(format!(
                "{} already exists: SAT never overwrites a key file; remove it or choose another --out",
                p.display()
            )));
        }
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| Fail(format!("cannot create {}: {e}", dir.display())))?;
    let auth = AuthorityKeys::setup()?;
    auth.save(&secret)?;
    auth.public().save(&public)?;
    println!(
        "authority written: {} (secret, keep it safe) and {}",
        secret.display(),
        public.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `--attrs` values: commas or spaces separate attributes; an empty one
/// (`a,,b`, a trailing comma) is refused rather than dropped, as it is most
/// likely a typing mistake.
fn attributes(values: &[&str]) -> Result<Vec<String>, Fail> {
    let mut attrs = Vec::new();
    for v in values {
        for part in v.split(',') {
            let words: Vec<&str> = part.split_whitespace().collect();
            if words.is_empty() {
                return Err(Fail(format!(
                    "--attrs {v:?} has an empty attribute; separate attributes with single commas"
                )));
            }
            attrs.extend(words.into_iter().map(str::to_string));
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
    let out = o
        .one("out")?
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("{tenant}.key")));
    if out.exists() {
        return Err(Fail(format!(
            "{} already exists: SAT never overwrites a key file; remove it or choose another --out",
            out.display()
        )));
    }
    let auth = AuthorityKeys::load(Path::new(authority))?;
    let refs: Vec<&str> = attrs.iter().map(String::as_str).collect();
    let key = auth.issue(tenant, &refs)?;
    key.save(&out)?;
    println!(
        "tenant {tenant:?} with attributes {attrs:?} written to {}",
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn describe(cert: &Certificate, authority: &AuthorityPublic) {
    println!("tenant: {}", cert.tenant);
    println!("attributes: {}", cert.attributes.join(" "));
    println!("certificate: {}", hex(&cert.id()));
    match cert.verify(authority) {
        Ok(()) => println!("certificate verifies against the authority's key"),
        Err(e) => println!("certificate does NOT verify: {e}"),
    }
    println!("authority key: {}", hex(&authority.verifying));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn show(o: &Options) -> Result<ExitCode, Fail> {
    let [file] = o.words.as_slice() else {
        return Err(Fail("show needs one key file; see sat-abe help".into()));
    };
    let path = Path::new(file);
    // Whatever kind the file is: each loader says when it is another kind.
    if let Ok(key) = TenantKey::load(path) {
        println!("kind: tenant key");
        describe(key.certificate(), key.authority());
        return Ok(ExitCode::SUCCESS);
    }
    if let Ok(auth) = AuthorityKeys::load(path) {
        println!("kind: authority (secret keys; keep this file safe)");
        println!("authority key: {}", hex(&auth.public().verifying));
        return Ok(ExitCode::SUCCESS);
    }
    match AuthorityPublic::load(path) {
        Ok(public) => {
            println!("kind: authority public keys");
            println!("authority key: {}", hex(&public.verifying));
            Ok(ExitCode::SUCCESS)
        }
        // The tenant loader's error says most about a damaged tenant file,
        // the usual thing to inspect.
        Err(_) => Err(TenantKey::load(path)
            .err()
            .map(Fail::from)
            .unwrap_or_else(|| Fail(format!("{}: not a SAT key file", path.display())))),
    }
}

fn check(o: &Options) -> Result<ExitCode, Fail> {
    let [file] = o.words.as_slice() else {
        return Err(Fail(
            "check needs one tenant key file; see sat-abe help".into(),
        ));
    };
    let text = o.required("policy", "a policy such as \"tenant_a and analyst\"")?;
    let policy = Policy::parse(text).map_err(|e| Fail(format!("--policy {text:?}: {e}")))?;
    let key = TenantKey::load(Path::new(file))?;
    if key.certificate().satisfies(&policy) {
        println!(
            "{:?} with attributes {:?} satisfies {policy}",
            key.certificate().tenant,
            key.attributes()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "{:?} with attributes {:?} does not satisfy {policy}",
            key.certificate().tenant,
            key.attributes()
        );
        Ok(ExitCode::from(1))
    }
}
