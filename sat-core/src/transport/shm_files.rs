//! The files libfabric's shm provider makes under `/dev/shm`: one 16 MiB
//! region `<pid>:<uid>:<n>` per endpoint, `n` counting the process's
//! endpoints from 0 (its address is `fi_shm://<pid>:<uid>:<n>`).
//!
//! A process that ends normally, or of a signal SAT handles, removes its
//! own (`fabric.rs`). One killed with SIGKILL cannot: satrun removes the
//! files of a rank it saw die ([`remove_shm_leftovers`]), but nobody is left
//! to do it when satrun itself was killed (`satrun --serve` and its
//! servers, under an operator's `kill -9` or the OOM killer). Each such
//! crash would keep 16 MiB of RAM per server in the tmpfs for good, so
//! satrun sweeps, as it starts, the regions of processes that no longer
//! run ([`sweep_dead_regions`]).
//!
//! What makes a region dead, all of:
//! - its name is `<pid>:<uid>:<n>` with this user's uid, and the file is
//!   a regular file this user owns;
//! - no process `pid` runs (in this pid namespace);
//! - no process holds the region's claim: every SAT endpoint keeps a
//!   shared `flock` on its own region for as long as it is open
//!   ([`Claim`]), which the kernel drops when the process dies, however it
//!   dies. The claim guards a region whose process runs in another pid
//!   namespace that shares this `/dev/shm` (its pid means nothing here).
//!   A region of another libfabric program has no claim: only its pid
//!   protects it.

use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use tracing::debug;

use crate::os::flock;

pub(crate) const SHM_DIR: &str = "/dev/shm";

/// The pid and uid a region's name gives, if `name` is one.
fn parse_region_name(name: &str) -> Option<(u32, u32)> {
    let mut parts = name.split(':');
    let mut number = || {
        parts
            .next()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u32>().ok())
    };
    let (pid, uid, _n) = (number()?, number()?, number()?);
    parts.next().is_none().then_some((pid, uid))
}

/// The names under `/dev/shm` that belong to the shm endpoints of `pid`.
pub fn shm_files_of(pid: u32) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = region_names()?
        .into_iter()
        .filter(|name| parse_region_name(name).is_some_and(|(p, _)| p == pid))
        .collect();
    names.sort();
    Ok(names)
}

/// Every name under `/dev/shm` (none when there is no such folder).
fn region_names() -> io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(SHM_DIR) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in entries {
        if let Some(name) = entry?.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

/// Removes the `/dev/shm` files the shm provider left behind for process `pid`
/// (a process killed with SIGKILL cannot close its endpoint). Returns how many.
pub fn remove_shm_leftovers(pid: u32) -> io::Result<usize> {
    let mut removed = 0;
    for name in shm_files_of(pid)? {
        match std::fs::remove_file(Path::new(SHM_DIR).join(&name)) {
            Ok(()) => {
                debug!(pid, file = %name, "removed a leftover shm region");
                removed += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// An open endpoint's hold on its own region: a shared `flock`, kept until
/// the endpoint closes or the process dies. (A `fork()` child that keeps the
/// descriptor keeps the claim too, which only delays the sweep.)
#[derive(Debug)]
pub(crate) struct Claim(#[allow(dead_code)] File);

impl Claim {
    /// Claims the region at `path`, the endpoint's own. None (said in the
    /// debug stream) when it cannot be opened or locked: the region then
    /// relies on its pid alone, as before claims existed.
    pub(crate) fn take(path: &Path) -> Option<Claim> {
        let file = match open_region(path) {
            Ok(file) => file,
            Err(e) => {
                debug!(path = %path.display(), "shm region not claimed: {e}");
                return None;
            }
        };
        match flock(&file, libc::LOCK_SH | libc::LOCK_NB) {
            Ok(()) => Some(Claim(file)),
            Err(e) => {
                debug!(path = %path.display(), "shm region not claimed: {e}");
                None
            }
        }
    }
}

fn open_region(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

/// A region removed by [`sweep_dead_regions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweptRegion {
    pub name: String,
    pub pid: u32,
}

/// Removes the regions of this user's processes that no longer run (the
/// module's doc says what counts). Returns what it removed; a region it
/// cannot look at is left alone.
pub fn sweep_dead_regions() -> io::Result<Vec<SweptRegion>> {
    // SAFETY: getuid and geteuid take no arguments and cannot fail.
    let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
    let mut swept = Vec::new();
    for name in region_names()? {
        let Some((pid, named_uid)) = parse_region_name(&name) else {
            continue;
        };
        if named_uid != uid || !crate::os::process_gone(pid) {
            continue;
        }
        let path = Path::new(SHM_DIR).join(&name);
        let Ok(file) = open_region(&path) else {
            continue;
        };
        let owned_file = file
            .metadata()
            .is_ok_and(|m| m.file_type().is_file() && m.uid() == euid);
        // Held exclusively until the file is closed, after the unlink: an
        // endpoint claiming it meanwhile would fail, and it is dead anyway.
        if !owned_file || flock(&file, libc::LOCK_EX | libc::LOCK_NB).is_err() {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                debug!(pid, file = %name, "removed the shm region of a process that no longer runs");
                swept.push(SweptRegion { name, pid });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => debug!(file = %name, "a dead process's shm region stays: {e}"),
        }
    }
    Ok(swept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_name_is_three_numbers() {
        assert_eq!(parse_region_name("123:1000:0"), Some((123, 1000)));
        assert_eq!(parse_region_name("123:1000:17"), Some((123, 1000)));
        for not in [
            "123:1000",
            "123:1000:0:1",
            "123::0",
            "sem.123:1000:0",
            "123:1000:x",
            "99999999999:0:0",
            "",
        ] {
            assert_eq!(parse_region_name(not), None, "{not:?}");
        }
    }

    /// A file named as a dead process's region goes; the same with a claim
    /// held on it (a process of another pid namespace) stays, and so does
    /// one named for another user.
    #[test]
    fn the_sweep_takes_only_unclaimed_regions_of_dead_processes() {
        // A pid that ran and ended: a child reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        let dead = child.id();
        // SAFETY: getuid takes no arguments and cannot fail.
        let uid = unsafe { libc::getuid() };
        let names = [
            format!("{dead}:{uid}:9000"),
            format!("{dead}:{uid}:9001"),
            format!("{dead}:{}:9002", uid.wrapping_add(1)),
            format!("{}:{uid}:9003", std::process::id()),
        ];
        let paths: Vec<_> = names.iter().map(|n| Path::new(SHM_DIR).join(n)).collect();
        for p in &paths {
            std::fs::write(p, b"region").unwrap();
        }
        let claim = Claim::take(&paths[1]).expect("claimed");
        let swept = sweep_dead_regions().unwrap();
        let left: Vec<bool> = paths.iter().map(|p| p.exists()).collect();
        drop(claim);
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
        assert!(
            swept.contains(&SweptRegion {
                name: names[0].clone(),
                pid: dead
            }),
            "{swept:?}"
        );
        assert_eq!(left, [false, true, true, true], "{names:?}");
    }
}
