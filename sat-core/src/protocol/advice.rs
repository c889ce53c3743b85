//! `SAT_ADVICE=FILE`: the adviser's protocol per chunk
//! (`tools/sat-stats DIR --advise --json > FILE`, from an earlier run's
//! statistics) applied to the chunks a program allocates with MESI, the
//! default, without changing the program (a legacy C program, a notebook).
//!
//! Profile-guided: the choice is made when a chunk is allocated.
//!
//! `SAT_ADAPTIVE=1` is the other opt-in, with no earlier run: each chunk
//! allocated with MESI that the advice does not name is allocated adaptive
//! ([`ProtocolId::Adaptive`]): it starts on MESI, and its home moves it to
//! the protocol its pattern calls for while the run goes on.
//!
//! Every process of a run must see the same file (satrun passes the
//! environment on): a MALLOC of the same chunk with two protocols is a
//! mismatch error. The file is read once, at the first allocation; the
//! bootstrap and a service connect check it first, so a malformed file
//! stops the process with a message saying what is wrong. Protected chains
//! keep the protocol they are allocated with, and so do chunks the advice
//! does not name.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use super::ProtocolId;
use crate::error::{SatError, SatResult};

/// The advice file's chunks: chunk id -> protocol.
pub type Advice = HashMap<u64, ProtocolId>;

/// Parses the adviser's JSON (`{"run": ..., "chunks": [{"chunk": N,
/// "protocol": "name", ...}, ...]}`); only built-in protocols are taken.
pub fn parse(text: &str) -> Result<Advice, String> {
    let doc: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let chunks = doc
        .get("chunks")
        .and_then(|c| c.as_array())
        .ok_or("no \"chunks\" list (write the file with sat-stats DIR --advise --json)")?;
    let mut advice = Advice::new();
    for (i, c) in chunks.iter().enumerate() {
        let chunk = c
            .get("chunk")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| format!("chunks[{i}]: \"chunk\" is not a chunk id"))?;
        let name = c
            .get("protocol")
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("chunks[{i}]: \"protocol\" is not a name"))?;
        let protocol = ProtocolId::ALL
            .into_iter()
            .find(|p| p.short_name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = ProtocolId::ALL.iter().map(|p| p.short_name()).collect();
                format!(
                    "chunks[{i}]: no built-in protocol is called {name:?} (give one of {})",
                    names.join(", ")
                )
            })?;
        if advice.insert(chunk, protocol).is_some() {
            return Err(format!("chunks[{i}]: chunk {chunk} is advised twice"));
        }
    }
    Ok(advice)
}

fn loaded() -> &'static Result<Option<Arc<Advice>>, String> {
    static LOADED: OnceLock<Result<Option<Arc<Advice>>, String>> = OnceLock::new();
    LOADED.get_or_init(|| load(std::env::var_os("SAT_ADVICE")))
}

/// The advice in the file `SAT_ADVICE` names (None when unset or empty).
fn load(path: Option<std::ffi::OsString>) -> Result<Option<Arc<Advice>>, String> {
    let Some(path) = path.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let shown = std::path::Path::new(&path).display().to_string();
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("SAT_ADVICE={shown}: cannot be read: {e}"))?;
    parse(&text).map(|a| Some(Arc::new(a))).map_err(|e| {
        format!(
            "SAT_ADVICE={shown}: {e}; unset it or give a file that sat-stats --advise --json wrote"
        )
    })
}

/// `SAT_ADAPTIVE`'s value read.
fn adaptive_from(value: &str) -> Result<bool, String> {
    match value {
        "" | "0" | "off" => Ok(false),
        "1" | "on" => Ok(true),
        other => Err(format!(
            "SAT_ADAPTIVE={other:?}: give 1 or on (chunks allocated with MESI switch protocol \
             as their pattern shows), or 0, off or nothing"
        )),
    }
}

/// [`check`] over any variable lookup: what satrun checks before it
/// starts anything, with the processes' own code.
pub fn check_with(var: impl Fn(&str) -> Option<String>) -> Result<(), String> {
    let adaptive = adaptive_from(&var("SAT_ADAPTIVE").unwrap_or_default()).err();
    let advice = load(var("SAT_ADVICE").map(Into::into)).err();
    match [adaptive, advice].into_iter().flatten().collect::<Vec<_>>() {
        bad if bad.is_empty() => Ok(()),
        bad => Err(bad.join("; ")),
    }
}

/// `SAT_ADAPTIVE`: unset, empty, `0` or `off`: no; `1` or `on`: yes.
fn adaptive_setting() -> &'static Result<bool, String> {
    static SETTING: OnceLock<Result<bool, String>> = OnceLock::new();
    SETTING.get_or_init(|| adaptive_from(&std::env::var("SAT_ADAPTIVE").unwrap_or_default()))
}

/// Whether `SAT_ADAPTIVE` asks for adaptive chunks instead of MESI ones.
pub fn adaptive_by_default() -> bool {
    matches!(adaptive_setting(), Ok(true))
}

/// An error when `SAT_ADVICE` names a file that cannot be read or is not
/// the adviser's, or `SAT_ADAPTIVE` has a value it does not take: what a
/// process checks before it joins anything.
pub fn check() -> SatResult<()> {
    if let Err(e) = adaptive_setting() {
        return Err(SatError::Usage(e.clone()));
    }
    match loaded() {
        Ok(_) => Ok(()),
        Err(e) => Err(SatError::Usage(e.clone())),
    }
}

/// The advice `SAT_ADVICE` names, if any (what a client starts with; the
/// whole-stack simulator gives its clients advice of its own).
pub fn from_env() -> Option<Arc<Advice>> {
    loaded().as_ref().ok().cloned().flatten()
}

/// What a run with replicated homes can take of the advice and of
/// `SAT_ADAPTIVE`: a backup rebuilds a home from its last version, which
/// MESI with its E state, the diffing protocols and adaptive chunks cannot
/// be rebuilt from (the homes refuse such a MALLOC). Advice naming them is
/// dropped (those chunks stay MESI), and adaptive is off; a warning says so
/// once per process, so that advice computed from another run's statistics
/// never makes a replicated run fail.
pub fn for_replicated_homes(
    advice: Option<Arc<Advice>>,
    adaptive: bool,
) -> (Option<Arc<Advice>>, bool) {
    let dropped: Vec<(u64, ProtocolId)> = advice
        .iter()
        .flat_map(|a| a.iter())
        .filter(|&(_, &p)| !crate::server::can_replicate(p))
        .map(|(&c, &p)| (c, p))
        .collect();
    if dropped.is_empty() && !adaptive {
        return (advice, adaptive);
    }
    static WARNED_ADVICE: OnceLock<()> = OnceLock::new();
    static WARNED_ADAPTIVE: OnceLock<()> = OnceLock::new();
    if let Some(&(chunk, protocol)) = dropped.iter().min_by_key(|(c, _)| *c) {
        WARNED_ADVICE.get_or_init(|| {
            tracing::warn!(
                "SAT_ADVICE names {} chunks with a protocol a run with replicated homes cannot \
                 rebuild (chunk {chunk}: {}): they stay home-based MESI",
                dropped.len(),
                protocol.name()
            )
        });
    }
    if adaptive {
        WARNED_ADAPTIVE.get_or_init(|| {
            tracing::warn!(
                "SAT_ADAPTIVE is set, but a run with replicated homes cannot rebuild adaptive \
                 chunks: MESI chunks stay home-based MESI"
            )
        });
    }
    let kept = advice.map(|a| {
        Arc::new(
            a.iter()
                .filter(|&(_, &p)| crate::server::can_replicate(p))
                .map(|(&c, &p)| (c, p))
                .collect::<Advice>(),
        )
    });
    (kept, false)
}

/// The protocol a chunk allocated with `asked` gets: the advice's for a
/// MESI chunk it names; else adaptive for a MESI chunk when `adaptive`
/// (`SAT_ADAPTIVE`); else `asked`.
pub fn protocol_for(
    advice: Option<&Advice>,
    adaptive: bool,
    chunk: u64,
    asked: ProtocolId,
) -> ProtocolId {
    if asked != ProtocolId::HomeMesi {
        return asked;
    }
    match advice.and_then(|a| a.get(&chunk).copied()) {
        Some(advised) => advised,
        None if adaptive => ProtocolId::Adaptive,
        None => asked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Advice from another run's statistics (the adviser knows nothing of
    /// replication) never makes a replicated run's MALLOC fail: what its
    /// homes cannot rebuild stays MESI, the rest is taken, adaptive is off.
    #[test]
    fn a_run_with_replicated_homes_takes_only_the_advice_it_can_rebuild() {
        let advice: Advice = [
            (1, ProtocolId::MesiExclusive),
            (2, ProtocolId::UpdateMesi),
            (3, ProtocolId::MultipleWriters),
            (4, ProtocolId::HomeOnly),
        ]
        .into();
        let (kept, adaptive) = for_replicated_homes(Some(Arc::new(advice)), true);
        let kept = kept.unwrap();
        assert!(!adaptive);
        for (chunk, want) in [
            (1, ProtocolId::HomeMesi),
            (2, ProtocolId::UpdateMesi),
            (3, ProtocolId::HomeMesi),
            (4, ProtocolId::HomeOnly),
        ] {
            assert_eq!(
                protocol_for(Some(&kept), adaptive, chunk, ProtocolId::HomeMesi),
                want,
                "chunk {chunk}"
            );
        }
        let (none, adaptive) = for_replicated_homes(None, false);
        assert!(none.is_none() && !adaptive);
    }

    #[test]
    fn the_advisers_json_is_read_and_bad_files_are_explained() {
        let a = parse(
            r#"{"run": "update", "chunks": [
                {"chunk": 10, "scopes": 4, "protocol": "update", "home": 0, "why": "..."},
                {"chunk": 18446744073709551615, "protocol": "home-only"}]}"#,
        )
        .unwrap();
        assert_eq!(a[&10], ProtocolId::UpdateMesi);
        assert_eq!(a[&u64::MAX], ProtocolId::HomeOnly);
        for (bad, says) in [
            ("", "not JSON"),
            ("{}", "no \"chunks\""),
            (
                r#"{"chunks": [{"chunk": -1, "protocol": "mesi"}]}"#,
                "not a chunk id",
            ),
            (r#"{"chunks": [{"chunk": 1}]}"#, "not a name"),
            (
                r#"{"chunks": [{"chunk": 1, "protocol": "msi"}]}"#,
                "no built-in protocol",
            ),
            (
                r#"{"chunks": [{"chunk": 1, "protocol": "mesi"}, {"chunk": 1, "protocol": "update"}]}"#,
                "advised twice",
            ),
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn advice_comes_first_then_the_adaptive_opt_in_and_only_for_mesi() {
        let advice: Advice = [(1, ProtocolId::UpdateMesi)].into_iter().collect();
        let mesi = ProtocolId::HomeMesi;
        assert_eq!(
            protocol_for(Some(&advice), true, 1, mesi),
            ProtocolId::UpdateMesi
        );
        assert_eq!(
            protocol_for(Some(&advice), true, 2, mesi),
            ProtocolId::Adaptive
        );
        assert_eq!(protocol_for(Some(&advice), false, 2, mesi), mesi);
        assert_eq!(
            protocol_for(None, true, 2, ProtocolId::HomeOnly),
            ProtocolId::HomeOnly
        );
        assert_eq!(
            protocol_for(Some(&advice), true, 1, ProtocolId::HomeOnly),
            ProtocolId::HomeOnly
        );
    }
}
