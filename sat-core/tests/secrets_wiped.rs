//! Secret keys leave no copy in freed memory: a process that loaded the
//! authority's or a tenant's key file, or held the run's secret, and let
//! them go, has overwritten every heap block that held them.
//!
//! This test binary's allocator searches every block it frees for the
//! watched byte strings (a secret key's bytes, and their hex as the key files
//! write them) and counts those it finds. A block the program frees without
//! wiping it first, a copy left behind as a buffer grows included, is found.
#![cfg(feature = "abe")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};

use sat_core::abe::keys::{AuthorityKeys, TenantKey};
use sat_core::auth::{Handshake, Secret, ServiceAddress, Side};

/// The system's allocator, which looks into each block it frees.
struct Watching;

const SLOTS: usize = 16;
#[allow(clippy::declare_interior_mutable_const)] // only to fill the arrays below
const NO_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
#[allow(clippy::declare_interior_mutable_const)]
const NO_LEN: AtomicUsize = AtomicUsize::new(0);
/// The watched byte strings (leaked, so never freed themselves).
static WATCHED: [AtomicPtr<u8>; SLOTS] = [NO_PTR; SLOTS];
static WATCHED_LEN: [AtomicUsize; SLOTS] = [NO_LEN; SLOTS];
/// Freed blocks that held one of them.
static FOUND: AtomicUsize = AtomicUsize::new(0);

fn holds(block: &[u8], pattern: &[u8]) -> bool {
    block.len() >= pattern.len() && block.windows(pattern.len()).any(|w| w == pattern)
}

unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the block is `layout.size()` bytes at `ptr`, still
        // allocated until the call below.
        let block = unsafe { std::slice::from_raw_parts(ptr, layout.size()) };
        let found = WATCHED.iter().zip(&WATCHED_LEN).any(|(p, n)| {
            let (p, n) = (p.load(SeqCst), n.load(SeqCst));
            // SAFETY: a watched string is leaked: it lives for ever.
            !p.is_null() && holds(block, unsafe { std::slice::from_raw_parts(p, n) })
        });
        if found {
            FOUND.fetch_add(1, SeqCst);
        }
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) }
    }
    // `realloc` is the trait's own: a new block, a copy, and `dealloc` of
    // the old one, which is searched like any other.
}

#[global_allocator]
static ALLOCATOR: Watching = Watching;

/// Watches `bytes` from now on (a copy of them, never freed).
fn watch(bytes: &[u8]) {
    watch_owned(bytes.to_vec());
}

/// Watches `bytes` from now on; they are never freed.
fn watch_owned(bytes: Vec<u8>) {
    assert!(
        bytes.len() >= 16,
        "a pattern that short could match by chance"
    );
    let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    for (p, n) in WATCHED.iter().zip(&WATCHED_LEN) {
        if p.load(SeqCst).is_null() {
            n.store(leaked.len(), SeqCst);
            p.store(leaked.as_ptr().cast_mut(), SeqCst);
            return;
        }
    }
    panic!("more than {SLOTS} watched strings");
}

fn unwatch_all() {
    for p in &WATCHED {
        p.store(std::ptr::null_mut(), SeqCst);
    }
}

/// Watches a secret field of a key file: its hex (a window of 64 digits)
/// and its bytes (a window of 32), at its start and in its middle (a copy
/// left behind as a buffer grew holds the file's first part).
fn watch_field(file: &serde_json::Value, field: &str) {
    let hex = file[field].as_str().unwrap_or_else(|| panic!("no {field}"));
    // The first part of a CP-ABE secret key repeats its public key (the
    // group's generators): its start is past what it has in common with it.
    let public = file["abe_public"].as_str().unwrap_or_default();
    let common = hex
        .bytes()
        .zip(public.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    watch_window(hex, (common & !1).min(hex.len() - 64));
    watch_window(hex, (hex.len() / 2).saturating_sub(32) & !1);
}

fn watch_window(hex: &str, from: usize) {
    let window = &hex[from..from + 64];
    let raw: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&window[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    watch(window.as_bytes());
    watch_owned(raw);
}

/// A fresh folder for the key files, removed when dropped (a failed
/// assertion included).
struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        let d = std::env::temp_dir().join(format!("sat-secrets-wiped-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The fields of a key file, read before anything is watched.
fn fields(path: &PathBuf) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn secret_keys_and_the_run_secret_leave_no_copy_in_freed_memory() {
    let dir = Dir::new();
    let (authority_file, tenant_file) = (dir.0.join("authority.key"), dir.0.join("alice.key"));
    // Made before anything is watched: the CP-ABE scheme's own structures
    // (`rabe`'s) are not wiped, and making keys goes through them.
    {
        let authority = AuthorityKeys::setup().unwrap();
        authority.save(&authority_file).unwrap();
        authority
            .issue("alice", &["tenant_a"])
            .unwrap()
            .save(&tenant_file)
            .unwrap();
    }
    let (authority_fields, tenant_fields) = (fields(&authority_file), fields(&tenant_file));

    // The search works: a copy of a watched key, freed as it is, is found.
    watch_field(&tenant_fields, "signing");
    drop(
        tenant_fields["signing"]
            .as_str()
            .unwrap()
            .as_bytes()
            .to_vec(),
    );
    assert_eq!(
        FOUND.load(SeqCst),
        1,
        "the freed copy of the signing key was not found"
    );
    unwatch_all();
    FOUND.store(0, SeqCst);

    // A tenant's key file, loaded, used to sign, dropped.
    watch_field(&tenant_fields, "signing");
    watch_field(&tenant_fields, "abe_key");
    // The test's own copy of the file is never freed.
    std::mem::forget(tenant_fields);
    let tenant = TenantKey::load(&tenant_file).unwrap();
    let signature = tenant.sign(b"a message");
    drop(tenant);
    assert_eq!(
        FOUND.load(SeqCst),
        0,
        "freed blocks held a tenant's secret keys (signature {:02x?}..)",
        &signature[..4]
    );
    unwatch_all();

    // The authority's file, loaded and dropped.
    watch_field(&authority_fields, "signing");
    watch_field(&authority_fields, "abe_master");
    std::mem::forget(authority_fields);
    drop(AuthorityKeys::load(&authority_file).unwrap());
    assert_eq!(
        FOUND.load(SeqCst),
        0,
        "freed blocks held the authority's secret keys"
    );
    unwatch_all();

    // The run's secret, made and parsed as SAT_SECRET gives it.
    let made = Secret::generate().unwrap();
    watch(made.expose().as_bytes());
    // As an environment variable's value would come: spaces around it.
    let given = Secret::from_lookup(|_| {
        let mut value = String::with_capacity(made.expose().len() + 4);
        value.push_str("  ");
        value.push_str(made.expose());
        value.push_str("  ");
        Some(value)
    })
    .unwrap();
    // The service's address file line, as `satrun --serve` writes it.
    let address = ServiceAddress {
        host_port: "127.0.0.1:7070".into(),
        secret: Some(made.clone()),
    };
    let mut line = address.connection_string();
    line.push('\n');
    assert!(line.contains(made.expose()));
    drop(line);
    // A handshake of each side with it (the key exchange's crate keeps
    // copies of what it is given: a value derived from the secret).
    let joiner = Handshake::start(given.as_ref(), Side::Joiner).unwrap();
    let admitter = Handshake::start(Some(&made), Side::Admitter).unwrap();
    let (jt, at) = (joiner.token(), admitter.token());
    let (joiner, admitter) = (joiner.finish(&at).unwrap(), admitter.finish(&jt).unwrap());
    assert_eq!(admitter.check_theirs(joiner.mine().as_ref()), Ok(()));
    drop((joiner, admitter));
    drop(address);
    drop(made);
    drop(given);
    assert_eq!(FOUND.load(SeqCst), 0, "freed blocks held the run's secret");
    unwatch_all();
}
