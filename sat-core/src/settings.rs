//! The environment's tuning variables, read once per process, in one place,
//! by one rule: unset or empty means the default; a value that does not
//! parse is an error naming the variable, the value and what it takes. The
//! bootstrap and [`crate::service::connect`] call [`check`] first, so a
//! process with a bad value stops, saying why, before it joins a run or a
//! service; the modules then read the parsed values from [`get`].
//!
//! | variable | takes | default |
//! |---|---|---|
//! | `SAT_CHUNK_SIZE` | bytes, 1 to 2^30 | 65536 |
//! | `SAT_PROGRESS` | `sleep` or `busy` | `sleep` |
//! | `SAT_SPIN_US` | microseconds | 50 |
//! | `SAT_SLEEP_MIN_NS`, `SAT_SLEEP_MAX_NS` | nanoseconds | 1000, 1000000 |
//! | `SAT_HOST_SEGMENTS` | `on` or `off` | `on` |
//! | `SAT_BALANCE` | `on` or `off` | `on` |
//! | `SAT_STATS_MAX_EVENTS` | a count | 1000000 |
//! | `SAT_BOOTSTRAP_TIMEOUT` | seconds | 60 |
//! | `SAT_RECOVERY` | `on`/`1` or `off`/`0` | `off` |
//! | `SAT_LEASE_S` | seconds, 2 to 3600 | 10 |
//!
//! The others are not tuning: paths and addresses (`SAT_TOPOLOGY`,
//! `SAT_SEED`, `SAT_STATS`, ...) are checked where they are used, `SAT_LOG`
//! by the debug stream, the encryption layer's by the vault.

use std::sync::OnceLock;

use crate::chunk::{DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE};
use crate::error::{SatError, SatResult};

/// The parsed values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `SAT_CHUNK_SIZE`: the chunk size MALLOC splits chains by.
    pub chunk_size: usize,
    /// `SAT_PROGRESS=busy`: never sleep while idle.
    pub busy: bool,
    /// `SAT_SPIN_US`: how long to poll after the last message before sleeping.
    pub spin_us: u64,
    /// `SAT_SLEEP_MIN_NS`, `SAT_SLEEP_MAX_NS`: the adaptive micro-sleep's bounds.
    pub sleep_min_ns: u64,
    pub sleep_max_ns: u64,
    /// `SAT_HOST_SEGMENTS`: versions in shared memory on one host.
    pub host_segments: bool,
    /// `SAT_BALANCE`: a process about to sleep on a core brings over one
    /// of the run's processes that share another (`crate::balance`).
    pub balance: bool,
    /// `SAT_STATS_MAX_EVENTS`: entries kept per list of the statistics stream.
    pub stats_max_events: usize,
    /// `SAT_BOOTSTRAP_TIMEOUT`: seconds the processes wait for each other.
    pub bootstrap_timeout_s: u64,
    /// `SAT_RECOVERY=on`: a run outlives a client that dies or stops
    /// answering (`crate::bootstrap::watch`). The seed's value is the run's.
    pub recovery: bool,
    /// `SAT_LEASE_S`: how long a process may stay silent on its watch
    /// connection before it is declared lost (runs with recovery, and
    /// services). The seed's (or the service's) value is the one used.
    pub lease_s: u64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            chunk_size: DEFAULT_CHUNK_SIZE,
            busy: false,
            spin_us: 50,
            sleep_min_ns: 1_000,
            sleep_max_ns: 1_000_000,
            host_segments: true,
            balance: true,
            stats_max_events: 1_000_000,
            bootstrap_timeout_s: 60,
            recovery: false,
            lease_s: 10,
        }
    }
}

/// Parses the variables `var` gives; every bad value is named in the error.
pub fn parse(var: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
    let mut s = Settings::default();
    let mut bad = Vec::new();
    let value = |name: &str| {
        var(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let mut number =
        |name: &str, range: std::ops::RangeInclusive<u64>, what: &str, into: &mut u64| {
            if let Some(v) = value(name) {
                match v.parse::<u64>() {
                    Ok(n) if range.contains(&n) => *into = n,
                    _ => bad.push(format!(
                        "{name}={v:?} is not {what} from {} to {}",
                        range.start(),
                        range.end()
                    )),
                }
            }
        };
    let mut chunk = s.chunk_size as u64;
    number(
        "SAT_CHUNK_SIZE",
        1..=MAX_CHUNK_SIZE as u64,
        "a size in bytes",
        &mut chunk,
    );
    number(
        "SAT_SPIN_US",
        0..=u64::from(u32::MAX),
        "a number of microseconds",
        &mut s.spin_us,
    );
    number(
        "SAT_SLEEP_MIN_NS",
        1..=1_000_000_000,
        "a number of nanoseconds",
        &mut s.sleep_min_ns,
    );
    number(
        "SAT_SLEEP_MAX_NS",
        1..=1_000_000_000,
        "a number of nanoseconds",
        &mut s.sleep_max_ns,
    );
    let mut events = s.stats_max_events as u64;
    number(
        "SAT_STATS_MAX_EVENTS",
        0..=u64::from(u32::MAX),
        "a count",
        &mut events,
    );
    number(
        "SAT_BOOTSTRAP_TIMEOUT",
        1..=86_400,
        "a number of seconds",
        &mut s.bootstrap_timeout_s,
    );
    number(
        "SAT_LEASE_S",
        2..=3_600,
        "a number of seconds",
        &mut s.lease_s,
    );
    s.chunk_size = chunk as usize;
    s.stats_max_events = events as usize;
    // Both bounds given the wrong way round is a mistake to name; a minimum
    // alone above the default maximum raises the maximum with it.
    let both_given = value("SAT_SLEEP_MIN_NS").is_some() && value("SAT_SLEEP_MAX_NS").is_some();
    if both_given && s.sleep_min_ns > s.sleep_max_ns {
        bad.push(format!(
            "SAT_SLEEP_MIN_NS={} is above SAT_SLEEP_MAX_NS={}: give a minimum at most the maximum",
            s.sleep_min_ns, s.sleep_max_ns
        ));
    }
    s.sleep_max_ns = s.sleep_max_ns.max(s.sleep_min_ns);
    match value("SAT_PROGRESS").as_deref() {
        None | Some("sleep") => {}
        Some("busy") => s.busy = true,
        Some(other) => bad.push(format!(
            "SAT_PROGRESS={other:?} is neither 'sleep' nor 'busy'"
        )),
    }
    match value("SAT_HOST_SEGMENTS").as_deref() {
        None | Some("on") => {}
        Some("off") => s.host_segments = false,
        Some(other) => bad.push(format!(
            "SAT_HOST_SEGMENTS={other:?} is neither 'on' nor 'off'"
        )),
    }
    match value("SAT_BALANCE").as_deref() {
        None | Some("on") => {}
        Some("off") => s.balance = false,
        Some(other) => bad.push(format!("SAT_BALANCE={other:?} is neither 'on' nor 'off'")),
    }
    // Folders SAT writes into later, made if missing: a path that is a file
    // would fail only then, losing what was to be written there.
    for var in ["SAT_STATS", "SAT_SPILL_DIR", "SAT_HOME_DUMP"] {
        if let Some(path) = value(var) {
            if std::fs::metadata(&path).is_ok_and(|m| !m.is_dir()) {
                bad.push(format!(
                    "{var}={path:?} is a file, not a folder: name a folder (SAT makes it if \
                     missing)"
                ));
            }
        }
    }
    // The encryption layer reads its own variables where it uses them;
    // a value it would not take is named here, before anything starts,
    // rather than ignored there.
    if cfg!(feature = "abe") {
        match value("SAT_ABE_AEAD").as_deref() {
            None | Some("aes-256-gcm") | Some("chacha20-poly1305") => {}
            Some(other) => bad.push(format!(
                "SAT_ABE_AEAD={other:?} is neither 'aes-256-gcm' nor 'chacha20-poly1305'"
            )),
        }
        if let Some(v) = value("SAT_ABE_KEK_LIFETIME") {
            if !v.parse::<f64>().is_ok_and(|s| s.is_finite() && s >= 0.0) {
                bad.push(format!(
                    "SAT_ABE_KEK_LIFETIME={v:?} is not a number of seconds (0 or more)"
                ));
            }
        }
    }
    match value("SAT_RECOVERY").as_deref() {
        None | Some("off") | Some("0") => {}
        Some("on") | Some("1") => s.recovery = true,
        Some(other) => bad.push(format!(
            "SAT_RECOVERY={other:?} is neither 'on' (or 1) nor 'off' (or 0)"
        )),
    }
    if bad.is_empty() {
        Ok(s)
    } else {
        Err(format!(
            "{}: set a valid value or unset it (README, \"Environment\")",
            bad.join("; ")
        ))
    }
}

fn parsed() -> &'static Result<Settings, String> {
    static PARSED: OnceLock<Result<Settings, String>> = OnceLock::new();
    PARSED.get_or_init(|| parse(|name| std::env::var(name).ok()))
}

/// The encryption layer's variables (docs/ENCRYPTION.md).
const ENCRYPTION_VARIABLES: [&str; 4] = [
    "SAT_ABE_KEY",
    "SAT_ABE_CRL",
    "SAT_ABE_KEK_LIFETIME",
    "SAT_ABE_AEAD",
];

/// The encryption layer's variables set in an environment whose SAT was
/// built without the layer: they protect nothing there, which an operator
/// who set them must hear.
fn encryption_variables_ignored(value: impl Fn(&str) -> Option<String>) -> Vec<&'static str> {
    if cfg!(feature = "abe") {
        return Vec::new();
    }
    ENCRYPTION_VARIABLES
        .into_iter()
        .filter(|name| value(name).is_some())
        .collect()
}

/// An error naming every malformed variable; what a process checks before
/// it joins anything. Also warns, once per process, of the encryption
/// layer's variables when this SAT was built without the layer.
pub fn check() -> SatResult<()> {
    static WARNED: OnceLock<()> = OnceLock::new();
    WARNED.get_or_init(|| {
        let ignored = encryption_variables_ignored(|name| std::env::var(name).ok());
        if !ignored.is_empty() {
            tracing::warn!(
                "{} set, but this SAT was built without the encryption layer: ignored, and \
                 nothing is protected (build with the feature `abe`, docs/ENCRYPTION.md)",
                ignored.join(", ")
            );
        }
    });
    match parsed() {
        Ok(_) => Ok(()),
        Err(e) => Err(SatError::Usage(e.clone())),
    }
}

/// The settings; the defaults where [`check`] found a bad value (code that
/// runs without a bootstrap, such as unit tests, still works).
pub fn get() -> &'static Settings {
    static DEFAULTS: OnceLock<Settings> = OnceLock::new();
    match parsed() {
        Ok(s) => s,
        Err(_) => DEFAULTS.get_or_init(Settings::default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Settings, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    /// A folder SAT writes into later that names a file is refused before
    /// anything starts; a folder, or a path not made yet, is taken.
    #[test]
    fn an_output_folder_that_is_a_file_is_refused() {
        let file = std::env::temp_dir().join(format!("sat-settings-file-{}", std::process::id()));
        std::fs::write(&file, b"x").unwrap();
        let file_s = file.to_str().unwrap();
        let tmp = std::env::temp_dir();
        let missing = tmp.join("sat-settings-not-made-yet");
        for var in ["SAT_STATS", "SAT_SPILL_DIR", "SAT_HOME_DUMP"] {
            let e = with(&[(var, file_s)]).unwrap_err();
            assert!(
                e.contains(&format!("{var}=\"{file_s}\" is a file, not a folder")),
                "{e}"
            );
            assert!(with(&[(var, tmp.to_str().unwrap())]).is_ok());
            assert!(with(&[(var, missing.to_str().unwrap())]).is_ok());
        }
        std::fs::remove_file(&file).unwrap();
    }

    /// Without the encryption layer, its variables are named as ignored;
    /// with it, they are the layer's to read.
    #[test]
    fn the_encryption_layers_variables_are_named_when_it_is_not_built() {
        let set = |name: &str| (name == "SAT_ABE_KEY" || name == "SAT_ABE_CRL").then(String::new);
        let ignored = encryption_variables_ignored(set);
        if cfg!(feature = "abe") {
            assert!(ignored.is_empty(), "{ignored:?}");
        } else {
            assert_eq!(ignored, ["SAT_ABE_KEY", "SAT_ABE_CRL"]);
        }
        assert!(encryption_variables_ignored(|_| None).is_empty());
    }

    #[test]
    fn unset_or_empty_is_the_default_and_good_values_are_taken() {
        assert_eq!(with(&[]), Ok(Settings::default()));
        assert_eq!(with(&[("SAT_CHUNK_SIZE", " ")]), Ok(Settings::default()));
        let s = with(&[
            ("SAT_CHUNK_SIZE", "1024"),
            ("SAT_PROGRESS", "busy"),
            ("SAT_HOST_SEGMENTS", "off"),
            ("SAT_BALANCE", "off"),
            ("SAT_SLEEP_MIN_NS", "5000000"),
            ("SAT_BOOTSTRAP_TIMEOUT", "5"),
            ("SAT_RECOVERY", "1"),
            ("SAT_LEASE_S", "3"),
        ])
        .unwrap();
        assert!(s.recovery);
        assert_eq!(s.lease_s, 3);
        assert_eq!(s.chunk_size, 1024);
        assert!(s.busy && !s.host_segments && !s.balance);
        assert_eq!(
            (s.sleep_min_ns, s.sleep_max_ns),
            (5_000_000, 5_000_000),
            "the default max raised to a min above it"
        );
        assert_eq!(s.bootstrap_timeout_s, 5);
    }

    #[test]
    fn every_bad_value_is_named_with_what_it_takes() {
        let e = with(&[
            ("SAT_CHUNK_SIZE", "64k"),
            ("SAT_PROGRESS", "fast"),
            ("SAT_HOST_SEGMENTS", "yes"),
            ("SAT_BALANCE", "always"),
            ("SAT_SPIN_US", "-1"),
            ("SAT_BOOTSTRAP_TIMEOUT", "0"),
            ("SAT_RECOVERY", "yes"),
            ("SAT_LEASE_S", "1"),
        ])
        .unwrap_err();
        for part in [
            "SAT_CHUNK_SIZE=\"64k\" is not a size in bytes from 1 to 1073741824",
            "SAT_PROGRESS=\"fast\" is neither 'sleep' nor 'busy'",
            "SAT_BALANCE=\"always\" is neither 'on' nor 'off'",
            "SAT_HOST_SEGMENTS=\"yes\" is neither 'on' nor 'off'",
            "SAT_SPIN_US=\"-1\"",
            "SAT_BOOTSTRAP_TIMEOUT=\"0\"",
            "SAT_RECOVERY=\"yes\" is neither 'on' (or 1) nor 'off' (or 0)",
            "SAT_LEASE_S=\"1\" is not a number of seconds from 2 to 3600",
            "unset it",
        ] {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
        assert!(with(&[("SAT_CHUNK_SIZE", "1073741825")]).is_err());
        let e = with(&[("SAT_SLEEP_MIN_NS", "5000"), ("SAT_SLEEP_MAX_NS", "10")]).unwrap_err();
        assert!(
            e.contains("SAT_SLEEP_MIN_NS=5000 is above SAT_SLEEP_MAX_NS=10"),
            "{e}"
        );
    }

    /// With the encryption layer, its AEAD and KEK lifetime are checked
    /// with the others (they were taken as the default when malformed).
    #[cfg(feature = "abe")]
    #[test]
    fn the_encryption_layers_values_are_checked() {
        let e = with(&[("SAT_ABE_AEAD", "bogus"), ("SAT_ABE_KEK_LIFETIME", "-5")]).unwrap_err();
        for part in [
            "SAT_ABE_AEAD=\"bogus\" is neither 'aes-256-gcm' nor 'chacha20-poly1305'",
            "SAT_ABE_KEK_LIFETIME=\"-5\" is not a number of seconds (0 or more)",
        ] {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
        for lifetime in ["abc", "inf", "nan"] {
            assert!(
                with(&[("SAT_ABE_KEK_LIFETIME", lifetime)]).is_err(),
                "{lifetime}"
            );
        }
        let good = with(&[
            ("SAT_ABE_AEAD", "chacha20-poly1305"),
            ("SAT_ABE_KEK_LIFETIME", "0.5"),
        ]);
        assert_eq!(good, Ok(Settings::default()));
    }
}
