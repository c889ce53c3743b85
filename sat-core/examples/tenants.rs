//! Two tenants on one S-DSM, with the encryption layer (feature `abe`).
//!
//! ```text
//! SAT_ABE_KEY=keys/tenant-{rank}.key \
//!   satrun -n 6 --topology sat-core/topologies/two-servers.xml -- target/debug/examples/tenants
//! ```
//! Four clients, each with its own tenant key (`{rank}` in `SAT_ABE_KEY`):
//! - rank 2, alice: `tenant_a writer dept-1`
//! - rank 3, bob: `tenant_b writer`
//! - rank 4, rita: `tenant_a` (reads tenant_a's data, may not write it)
//! - rank 5, carl: `contractor` (reads tenant_a's data until revoked)
//!
//! Steps, separated by barriers; every check panics when it fails, which
//! fails the run:
//! 1. alice allocates and writes chain A (3 chunks, read `tenant_a or
//!    contractor`, write `tenant_a and writer`) and chunk C (read with a
//!    three-child AND), bob chain B (`tenant_b`); each writes a protected
//!    symbol.
//! 2. Everyone reads everything: own tenant's data opens with the right
//!    bytes, the other's gives access denied (chains and symbols).
//! 3. rank 5 reads A's chunks through the plain API (the bytes the homes
//!    serve): they hold no plaintext.
//! 4. rita, who may read A but not write it, writes a version through the
//!    layer and then a forged epoch of her own: readers refuse both with an
//!    integrity error; alice writes again and readers accept.
//! 5. carl flips one byte of a stored version: the next read fails with an
//!    integrity error, and the plaintext holds no part of it. alice repairs.
//! 6. alice starts a new epoch whose read policy drops `contractor` and
//!    writes: carl is denied the new version, rita still reads it.
//! 7. An older version put back in place is refused.
//! 8. bob's KEK lifetime: none keeps the epoch, zero starts one per write.
//! 9. carl zeroes a chunk of A with the plain API: readers that have seen
//!    it written refuse it with an integrity error; alice repairs it.
//! 10. With `TENANTS_REVOKED_KEY` (a key whose certificate the list in
//!     `SAT_ABE_CRL` revokes), carl writes A under it: readers refuse the
//!     version; alice repairs.
//! 11. carl writes back A's sealed bytes from before step 6: a reader that
//!     never saw A refuses them, and alice's next write is not sealed under
//!     the epoch carl could read.
//! 12. With `TENANTS_WRITE_ONLY_KEY`, carl writes C as a tenant that may
//!     write it but not read it: alice's next write does not continue that
//!     tenant's epoch, and the tenant cannot read it.
//! 13. With the same key, on a chain D that tenant could read until a new
//!     epoch: sealing new versions under the old epoch, or under an epoch
//!     of its own that gives its read access back, gets it nothing; after a
//!     version under a record that does not verify, her processes refuse to
//!     write D, one that knows no read policy of D and one that knows the
//!     policy from before the new epoch alike, until D's owner writes again
//!     ([`revoked_writer`]).
//! 14. carl writes back the sealed bytes of an older value of a protected
//!     symbol through the plain API: a reader that never opened the name
//!     refuses them, as carl's own layer does; bytes read before a newer
//!     write and opened after it give the newer value.

use std::time::Duration;

use sat_core::abe::keys::TenantKey;
use sat_core::abe::seal::{self, Aead, Cover, EpochRecord, Object, SealKey};
use sat_core::abe::{Ac17, Policy, Protection, SecureChain, Vault};
use sat_core::bootstrap::{run, RoleResult, Roles};
use sat_core::client::Client;
use sat_core::protocol::{Access, ProtocolId};
use sat_core::SatError;

const WAIT: Duration = Duration::from_secs(30);
const A: u64 = 100;
const B: u64 = 200;
const C: u64 = 300;
const SIZE_A: usize = 1000;
const CHUNK: usize = 400;

const ALICE: u32 = 2;
const BOB: u32 = 3;
const RITA: u32 = 4;
const CARL: u32 = 5;

fn main() {
    let roles = Roles::new().role(1, tenant).role(2, tenant);
    if let Err(e) = run(roles, std::env::args()) {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

fn pattern(tag: u8, size: usize) -> Vec<u8> {
    (0..size).map(|i| (i as u8).wrapping_mul(7) ^ tag).collect()
}

fn protection_a() -> Protection {
    Protection::new("tenant_a or contractor", "tenant_a and writer").unwrap()
}

fn protection_b() -> Protection {
    Protection::new("tenant_b", "tenant_b and writer").unwrap()
}

fn protection_c() -> Protection {
    Protection::new(
        "(tenant_a and writer and dept-1) or admin_x",
        "tenant_a and writer",
    )
    .unwrap()
}

fn expect_denied<T: std::fmt::Debug>(what: &str, r: Result<T, SatError>) {
    match r {
        Err(SatError::AccessDenied(m)) => println!("  {what}: access denied ({m})"),
        other => panic!(
            "{what}: expected access denied, got {:?}",
            other.map(|_| "data")
        ),
    }
}

fn expect_integrity<T: std::fmt::Debug>(what: &str, r: Result<T, SatError>) {
    match r {
        Err(SatError::Integrity(m)) => println!("  {what}: integrity error ({m})"),
        other => panic!(
            "{what}: expected an integrity error, got {:?}",
            other.map(|_| "data")
        ),
    }
}

fn read_a(v: &Vault, c: &Client, a: &SecureChain) -> Result<Vec<u8>, SatError> {
    v.get(c, a)
}

fn tenant(c: &Client) -> RoleResult {
    let me = c.rank();
    let mut v = Vault::from_env(me)?.expect("SAT_ABE_KEY names each rank's key");
    c.set_chunk_size(CHUNK)?;
    let n = c.client_count();
    println!(
        "rank {me}: tenant {:?} {:?}",
        v.tenant().certificate().tenant,
        v.tenant().attributes()
    );

    // 1. Allocation and first writes.
    let a0 = pattern(0xA0, SIZE_A);
    let b0 = pattern(0xB0, 500);
    let c0 = pattern(0xC0, 64);
    if me == ALICE {
        let a = v.malloc(c, ProtocolId::default(), A, SIZE_A, &protection_a())?;
        assert_eq!(a.len(), 3, "A spans three chunks");
        v.put(c, &a, &a0)?;
        let cc = v.malloc(c, ProtocolId::default(), C, 64, &protection_c())?;
        v.put(c, &cc, &c0)?;
        v.write_symbol(c, "a-secret", b"tenant a's symbol", &protection_a())?;
        // A plain MALLOC of a protected chunk is refused, as is another
        // write policy.
        assert!(matches!(c.malloc(A, SIZE_A), Err(SatError::Usage(_))));
    }
    if me == BOB {
        let b = v.malloc(c, ProtocolId::HomeOnly, B, 500, &protection_b())?;
        v.put(c, &b, &b0)?;
        v.write_symbol(c, "b-secret", b"tenant b's symbol", &protection_b())?;
    }
    c.barrier(1, n)?;

    // 2. Everyone reads everything.
    let ids_a: Vec<u64> = (A..A + 3).collect();
    let a = v.lookup_lst(c, &ids_a, WAIT)?;
    let b = v.lookup_lst(c, &[B, B + 1], WAIT)?;
    let cc = v.lookup_lst(c, &[C], WAIT)?;
    assert_eq!((a.size(), b.size()), (SIZE_A, 500));
    match me {
        ALICE | RITA | CARL => {
            assert_eq!(read_a(&v, c, &a)?, a0, "rank {me} reads A");
            assert_eq!(v.read_symbol(c, "a-secret", WAIT)?, b"tenant a's symbol");
            expect_denied("B by a tenant_a key", v.get(c, &b));
            expect_denied(
                "b-secret by a tenant_a key",
                v.read_symbol(c, "b-secret", WAIT),
            );
        }
        _ => {
            assert_eq!(v.get(c, &b)?, b0, "bob reads B");
            assert_eq!(v.read_symbol(c, "b-secret", WAIT)?, b"tenant b's symbol");
            expect_denied("A by a tenant_b key", v.get(c, &a));
            expect_denied(
                "a-secret by a tenant_b key",
                v.read_symbol(c, "a-secret", WAIT),
            );
        }
    }
    if me == RITA {
        // Two threads of one process reading one protected chain: the
        // second waits for the first's scope, as with a plain chain.
        let (x, y) = std::thread::scope(|s| {
            let other = s.spawn(|| v.get(c, &a));
            let mine = v.get(c, &a);
            (mine, other.join().expect("the reading thread"))
        });
        assert_eq!((x?, y?), (a0.clone(), a0.clone()), "two threads read A");
    }
    if me == ALICE {
        assert_eq!(v.get(c, &cc)?, c0, "alice satisfies the three-child AND");
    } else {
        expect_denied("C without dept-1", v.get(c, &cc));
    }
    println!("rank {me}: step 2 done");
    c.barrier(2, n)?;

    // 3. What the homes serve for A: no plaintext.
    if me == CARL {
        let sealed = c.lookup_lst(&ids_a, WAIT)?;
        c.acquire_chain(&sealed, Access::Read)?;
        let bytes = c.with_chain(&sealed, |b| b.to_vec())?;
        c.release_chain(&sealed)?;
        assert_eq!(
            bytes.len(),
            2 * seal::sealed_len(CHUNK) + seal::sealed_len(SIZE_A - 2 * CHUNK)
        );
        for window in a0.chunks(16) {
            assert!(
                !bytes.windows(16).any(|w| w == window),
                "plaintext found in the sealed chunks"
            );
        }
        assert_eq!(&bytes[..4], b"SATe");
        println!("rank {me}: step 3 done: the homes hold ciphertext only");
    }
    c.barrier(3, n)?;

    // 4. A reader that may not write.
    if me == RITA {
        // Through the layer: she holds the epoch's KEK (she reads), but
        // her release is refused for the write policy and publishes
        // nothing. (A version she sealed anyway, with a changed library,
        // is refused by readers: `abe::seal`'s tests.)
        v.acquire(c, &a, Access::ReadWrite)?;
        a.with_data_mut(|d| d[..6].copy_from_slice(b"forged"))?;
        expect_denied("a write by a reader", v.release(c, &a));
        // Nor can she start an epoch through the layer.
        expect_denied("an epoch by a reader", v.new_epoch(c, &a, None));
    }
    c.barrier(4, n)?;
    if me == ALICE || me == CARL {
        let got = v.get(c, &a)?;
        assert!(
            !got.starts_with(b"forged"),
            "rank {me}: rita's write was published"
        );
        println!("rank {me}: A unchanged after rita's refused write");
    }
    c.barrier(5, n)?;
    if me == RITA {
        forge_epoch(c, &v, &ids_a)?;
    }
    c.barrier(6, n)?;
    if me == ALICE || me == CARL {
        expect_integrity("A under rita's own epoch", v.get(c, &a));
    }
    c.barrier(7, n)?;
    let a1 = pattern(0xA1, SIZE_A);
    if me == ALICE {
        v.put(c, &a, &a1)?;
    }
    c.barrier(8, n)?;
    if me != BOB {
        assert_eq!(v.get(c, &a)?, a1, "rank {me} reads alice's repair");
        println!("rank {me}: step 4 done");
    }
    c.barrier(9, n)?;

    // 5. One flipped byte.
    if me == CARL {
        let sealed = c.lookup_lst(&ids_a, WAIT)?;
        c.acquire_chain(&sealed, Access::ReadWrite)?;
        c.with_chain_mut(&sealed, |b| {
            b[seal::sealed_len(CHUNK) + seal::HEADER + 5] ^= 1
        })?;
        c.release_chain(&sealed)?;
    }
    c.barrier(10, n)?;
    if me == ALICE || me == RITA {
        expect_integrity("A with a flipped byte", v.get(c, &a));
    }
    // Both have read before either writes (alice's write repairs A).
    c.barrier(100, n)?;
    if me == ALICE || me == RITA {
        // Nothing of the damaged chunk reached the plaintext.
        v.acquire(c, &a, Access::Write)?;
        let zeros = a.with_data(|d| d[CHUNK..2 * CHUNK].iter().all(|&x| x == 0))?;
        v.release(c, &a).ok();
        assert!(
            zeros || me == ALICE,
            "the damaged chunk's plaintext is not zeros"
        );
    }
    c.barrier(11, n)?;
    let a2 = pattern(0xA2, SIZE_A);
    if me == ALICE {
        v.put(c, &a, &a2)?;
    }
    c.barrier(12, n)?;
    if me != BOB {
        assert_eq!(v.get(c, &a)?, a2);
        println!("rank {me}: step 5 done");
    }
    c.barrier(13, n)?;

    // carl keeps A's sealed bytes while he may still read them (step 11).
    let mut kept_by_carl = None;
    if me == CARL {
        let sealed = c.lookup_lst(&ids_a, WAIT)?;
        c.acquire_chain(&sealed, Access::Read)?;
        kept_by_carl = Some(c.with_chain(&sealed, |b| b.to_vec())?);
        c.release_chain(&sealed)?;
    }
    c.barrier(101, n)?;

    // 6. Revocation: a new epoch without `contractor`.
    let a3 = pattern(0xA3, SIZE_A);
    if me == ALICE {
        v.new_epoch(c, &a, Some(&Policy::parse("tenant_a").unwrap()))?;
        v.put(c, &a, &a3)?;
    }
    c.barrier(14, n)?;
    match me {
        CARL => expect_denied("A after contractor was dropped", v.get(c, &a)),
        RITA | ALICE => assert_eq!(v.get(c, &a)?, a3),
        _ => {}
    }
    println!("rank {me}: step 6 done");
    c.barrier(15, n)?;

    // 7. An older version put back.
    if me == RITA {
        let sealed = c.lookup_lst(&ids_a, WAIT)?;
        c.acquire_chain(&sealed, Access::Read)?;
        let old = c.with_chain(&sealed, |b| b.to_vec())?;
        c.release_chain(&sealed)?;
        c.barrier(16, n)?;
        c.barrier(17, n)?; // alice writes a newer version
        assert_eq!(v.get(c, &a)?, pattern(0xA4, SIZE_A));
        c.acquire_chain(&sealed, Access::Write)?;
        c.with_chain_mut(&sealed, |b| b.copy_from_slice(&old))?;
        c.release_chain(&sealed)?;
        expect_integrity("A rolled back", v.get(c, &a));
        println!("rank {me}: step 7 done");
    } else {
        c.barrier(16, n)?;
        if me == ALICE {
            v.put(c, &a, &pattern(0xA4, SIZE_A))?;
        }
        c.barrier(17, n)?;
    }
    c.barrier(18, n)?;

    // 8. The KEK lifetime: unset, writes stay in their epoch; at zero,
    // every write starts a new one (readers follow).
    if me == BOB {
        let epoch_of = |c: &Client| -> Result<Vec<u64>, SatError> {
            let sealed = c.lookup_lst(&[B, B + 1], WAIT)?;
            c.acquire_chain(&sealed, Access::Read)?;
            let epochs = c.with_chain(&sealed, |bytes| {
                (0..2)
                    .map(|i| {
                        let r = sealed.layout().range(i);
                        u64::from_le_bytes(bytes[r.start + 8..r.start + 16].try_into().unwrap())
                    })
                    .collect()
            })?;
            c.release_chain(&sealed)?;
            Ok(epochs)
        };
        let e0 = epoch_of(c)?;
        v.put(c, &b, &pattern(0xB1, 500))?;
        assert_eq!(
            epoch_of(c)?,
            e0,
            "a write without a KEK lifetime keeps the epoch"
        );
        v.set_kek_lifetime(Some(Duration::ZERO));
        v.put(c, &b, &pattern(0xB2, 500))?;
        let e1 = epoch_of(c)?;
        v.put(c, &b, &pattern(0xB3, 500))?;
        let e2 = epoch_of(c)?;
        assert!(
            e1 != e0 && e2 != e1,
            "a KEK lifetime of zero starts an epoch per write"
        );
        assert_eq!(e1[0], e1[1], "one epoch covers the chain");
        assert_eq!(v.get(c, &b)?, pattern(0xB3, 500));
        println!(
            "rank {me}: step 8 done: epochs {:x?} -> {:x?} -> {:x?}",
            e0[0], e1[0], e2[0]
        );
    }
    c.barrier(19, n)?;

    // 9. A chunk zeroed through the plain API: to a reader that has seen
    // it written, "never written" is a lie, not zeros.
    if me == CARL {
        let sealed = c.lookup_lst(&ids_a, WAIT)?;
        c.acquire_chain(&sealed, Access::Write)?;
        c.with_chain_mut(&sealed, |b| {
            let r = sealed.layout().range(1);
            b[r].fill(0)
        })?;
        c.release_chain(&sealed)?;
    }
    c.barrier(20, n)?;
    if me == ALICE || me == RITA {
        expect_integrity("A with a zeroed chunk", v.get(c, &a));
    }
    c.barrier(21, n)?;
    // A writer repairs it, as after a flipped byte.
    if me == ALICE {
        v.put(c, &a, &pattern(0xA5, SIZE_A))?;
    }
    c.barrier(22, n)?;
    if me == ALICE || me == RITA {
        assert_eq!(v.get(c, &a)?, pattern(0xA5, SIZE_A));
        println!("rank {me}: step 9 done");
    }
    c.barrier(23, n)?;

    // 10. A tenant the authority revoked (mallory: tenant_a's write
    // attributes, its certificate's serial in the revocation list every
    // process takes from SAT_ABE_CRL) writes A through the layer: readers
    // refuse the version; alice repairs.
    if let Ok(revoked) = std::env::var("TENANTS_REVOKED_KEY") {
        if me == CARL {
            // Her own process, with the list that revokes her, publishes
            // nothing...
            let mallory = Vault::load(std::path::Path::new(&revoked))?;
            let am = mallory.lookup_lst(c, &ids_a, WAIT)?;
            expect_denied(
                "A written by a revoked tenant that holds the list",
                mallory.put(c, &am, &pattern(0xA5, SIZE_A)),
            );
            // ... one without the list does, and readers refuse it.
            let key = TenantKey::load(std::path::Path::new(&revoked)).map_err(|e| e.to_string())?;
            let unaware = Vault::new(key);
            let am = unaware.lookup_lst(c, &ids_a, WAIT)?;
            unaware.put(c, &am, &pattern(0xA6, SIZE_A))?;
        }
        c.barrier(24, n)?;
        if me == ALICE || me == RITA {
            expect_integrity("A written under a revoked certificate", v.get(c, &a));
        }
        c.barrier(25, n)?;
        if me == ALICE {
            v.put(c, &a, &pattern(0xA7, SIZE_A))?;
        }
        c.barrier(26, n)?;
        if me == ALICE || me == RITA {
            assert_eq!(v.get(c, &a)?, pattern(0xA7, SIZE_A));
            println!("rank {me}: step 10 done");
        }
    }
    c.barrier(27, n)?;

    // 11. Rollback after revocation: carl writes back the sealed bytes he
    // kept from before step 6, under the epoch he could read. A reader that
    // never saw A refuses them (their number is not the S-DSM's), and
    // alice's next write is not sealed under that epoch: carl is denied it.
    if me == CARL {
        let sealed = c.lookup_lst(&ids_a, WAIT)?;
        c.acquire_chain(&sealed, Access::Write)?;
        let kept = kept_by_carl.take().expect("kept before step 6");
        c.with_chain_mut(&sealed, |b| b.copy_from_slice(&kept))?;
        c.release_chain(&sealed)?;
    }
    c.barrier(28, n)?;
    if me == RITA {
        let fresh = Vault::from_env(me)?.expect("SAT_ABE_KEY names each rank's key");
        let fa = fresh.lookup_lst(c, &ids_a, WAIT)?;
        expect_integrity(
            "A rolled back, to a reader that never saw A",
            fresh.get(c, &fa),
        );
    }
    c.barrier(29, n)?;
    if me == ALICE {
        v.put(c, &a, &pattern(0xA8, SIZE_A))?;
    }
    c.barrier(30, n)?;
    match me {
        CARL => expect_denied("A written after carl's rollback", v.get(c, &a)),
        RITA | ALICE => {
            assert_eq!(v.get(c, &a)?, pattern(0xA8, SIZE_A));
            println!("rank {me}: step 11 done");
        }
        _ => {}
    }
    c.barrier(31, n)?;

    // 12. A write-only tenant (wanda: tenant_a and writer, without the
    // dept-1 that C's read policy needs) writes C under an epoch she makes
    // and knows the key of; alice reads it, writes C again, and does not
    // continue wanda's epoch: wanda cannot read what alice wrote.
    if let Ok(write_only) = std::env::var("TENANTS_WRITE_ONLY_KEY") {
        let epoch_of_c = |c: &Client| -> Result<u64, SatError> {
            let sealed = c.lookup_lst(&[C], WAIT)?;
            c.acquire_chain(&sealed, Access::Read)?;
            let e = c.with_chain(&sealed, |b| {
                u64::from_le_bytes(b[8..16].try_into().unwrap())
            })?;
            c.release_chain(&sealed)?;
            Ok(e)
        };
        let wanda = if me == CARL {
            Some(Vault::load(std::path::Path::new(&write_only))?)
        } else {
            None
        };
        let mut wandas_epoch = None;
        if let Some(w) = &wanda {
            let wc = w.lookup_lst(c, &[C], WAIT)?;
            w.put(c, &wc, &pattern(0xC1, 64))?;
            wandas_epoch = Some(epoch_of_c(c)?);
        }
        c.barrier(32, n)?;
        if me == ALICE {
            assert_eq!(
                v.get(c, &cc)?,
                pattern(0xC1, 64),
                "alice reads wanda's write"
            );
            v.put(c, &cc, &pattern(0xC2, 64))?;
        }
        c.barrier(33, n)?;
        if let Some(w) = &wanda {
            assert_ne!(
                Some(epoch_of_c(c)?),
                wandas_epoch,
                "alice sealed under the epoch of a tenant that may not read it"
            );
            let wc = w.lookup_lst(c, &[C], WAIT)?;
            expect_denied(
                "C written after wanda's write, read by wanda",
                w.get(c, &wc),
            );
            println!("rank {me}: step 12 done");
        }
    }
    c.barrier(34, n)?;
    if let Ok(write_only) = std::env::var("TENANTS_WRITE_ONLY_KEY") {
        revoked_writer(c, &v, std::path::Path::new(&write_only))?;
    }
    c.barrier(45, n)?;

    // 14. A protected symbol put back: carl keeps the sealed bytes of
    // alice's first value of FRESH (the plain API reads them as they are),
    // alice writes a newer value (of another size: it takes new chunks),
    // and carl writes the old bytes back through the plain API. rita, who
    // never opened the name, refuses them, and so does carl's own layer;
    // alice's next write reads again. Before that, the other way round:
    // bytes rita read before alice's newer write, opened after it, are a
    // read that met a writer, not a replay: she gets the newer value.
    const FRESH: &str = "a-fresh";
    const SECOND: &[u8] = b"a second, longer value";
    if me == ALICE {
        v.write_symbol(c, FRESH, b"the first value", &protection_a())?;
    }
    c.barrier(48, n)?;
    let kept = if me == CARL || me == RITA {
        Some(c.read_symbol(FRESH, WAIT)?)
    } else {
        None
    };
    c.barrier(49, n)?;
    if me == ALICE {
        v.write_symbol(c, FRESH, SECOND, &protection_a())?;
    }
    c.barrier(50, n)?;
    if me == RITA {
        let late = v.open_symbol(c, FRESH, kept.as_deref().expect("read above"))?;
        assert_eq!(
            late, SECOND,
            "bytes read before a newer write open as the newer value"
        );
    }
    c.barrier(51, n)?;
    if me == CARL {
        c.write_symbol(FRESH, &kept.expect("read above"))?;
    }
    c.barrier(52, n)?;
    if me == RITA || me == CARL {
        expect_integrity(
            &format!("{FRESH} put back, read by rank {me}"),
            v.read_symbol(c, FRESH, WAIT),
        );
    }
    c.barrier(53, n)?;
    if me == ALICE {
        v.write_symbol(c, FRESH, b"the third value", &protection_a())?;
    }
    c.barrier(54, n)?;
    if me == RITA {
        assert_eq!(v.read_symbol(c, FRESH, WAIT)?, b"the third value");
        println!("rank {me}: step 14 done");
    }
    c.barrier(55, n)?;
    println!("rank {me}: all steps passed");
    Ok(())
}

/// Step 13: a tenant whose read access was revoked but who may still write
/// (wanda: `tenant_a writer`) tries to read what is written after: chain D
/// (read `tenant_a`, write `tenant_a and writer`) moves to a new epoch
/// whose read policy also needs `dept-1`. Wanda seals new versions of her
/// own with the plain API: under the old epoch she kept the KEK of (the
/// home refuses it, whichever parent its header names), and under a new
/// epoch of hers that gives the read policy back to `tenant_a` (the home
/// takes it, every reader refuses it). alice writes D again, a reader that
/// never saw D reads it, and wanda cannot.
fn revoked_writer(c: &Client, v: &Vault, wanda_key: &std::path::Path) -> RoleResult {
    const D: u64 = 400;
    let ids: Vec<u64> = vec![D, D + 1];
    let (me, n) = (c.rank(), c.client_count());
    let both = Protection::new("tenant_a", "tenant_a and writer")?;
    let epoch_of_d = |c: &Client| -> Result<u64, SatError> {
        let sealed = c.lookup_lst(&ids, WAIT)?;
        c.acquire_chain(&sealed, Access::Read)?;
        let e = c.with_chain(&sealed, head_epoch)?;
        c.release_chain(&sealed)?;
        Ok(e)
    };
    if me == ALICE {
        let d = v.malloc_lst(c, ProtocolId::default(), &ids, &[CHUNK], &both)?;
        v.put(c, &d, &pattern(0xD1, 2 * CHUNK))?;
    }
    c.barrier(35, n)?;
    // wanda reads D and keeps the epoch's KEK.
    let wanda = (me == CARL)
        .then(|| TenantKey::load(wanda_key).map_err(|e| e.to_string()))
        .transpose()?;
    let wanda_vault = (me == CARL).then(|| Vault::load(wanda_key)).transpose()?;
    let mut old = None;
    if let (Some(key), Some(w)) = (&wanda, &wanda_vault) {
        // A MALLOC of D by a tenant that may write it joins alice's chain
        // (alice stays its owner, named by its label).
        let wd = w.malloc_lst(c, ProtocolId::default(), &ids, &[CHUNK], &both)?;
        assert_eq!(w.get(c, &wd)?, pattern(0xD1, 2 * CHUNK), "wanda reads D");
        let e1 = epoch_of_d(c)?;
        let record =
            EpochRecord::from_bytes(&c.read_symbol(&format!("sat.abe/epoch/{e1:016x}"), WAIT)?)
                .map_err(|e| e.to_string())?;
        let kek: [u8; 32] = sat_core::abe::Abe::unwrap(&Ac17, key.abe_key(), &record.wrapped_kek)
            .map_err(|e| e.to_string())?
            .as_slice()
            .try_into()
            .unwrap();
        old = Some((record, kek));
    }
    c.barrier(36, n)?;
    // alice takes `tenant_a` alone off D's readers.
    if me == ALICE {
        let d = v.lookup_lst(c, &ids, WAIT)?;
        v.new_epoch(c, &d, Some(&Policy::parse("tenant_a and dept-1").unwrap()))?;
        v.put(c, &d, &pattern(0xD2, 2 * CHUNK))?;
    }
    c.barrier(37, n)?;
    // The newest epoch, which the home keeps whatever wanda releases.
    let e2 = epoch_of_d(c)?;
    if let (Some(key), Some((record, kek)), Some(w)) = (&wanda, &old, &wanda_vault) {
        let wd = w.lookup_lst(c, &ids, WAIT)?;
        expect_denied("D after wanda's read access was revoked", w.get(c, &wd));
        assert_ne!(e2, record.epoch, "a new epoch");
        // Under the old epoch, naming its true parent, then the newest as
        // its parent. (Her own copy keeps her bytes until the next write:
        // the home does not tell a releaser it refused.)
        let mine = pattern(0x77, CHUNK);
        for parent in [record.parent_of(&Object::Chunk(D)).unwrap(), e2] {
            seal_raw(c, &ids, key, record, kek, parent, &mine)?;
        }
    }
    c.barrier(38, n)?;
    if me == ALICE {
        assert_eq!(
            epoch_of_d(c)?,
            e2,
            "the home took a version sealed under an old epoch"
        );
        let d = v.lookup_lst(c, &ids, WAIT)?;
        expect_integrity("D after the home refused wanda's versions", v.get(c, &d));
    }
    c.barrier(39, n)?;
    // An epoch of wanda's own, over the newest, giving D back to tenant_a.
    if let Some(key) = &wanda {
        let read = Policy::parse("tenant_a").unwrap();
        let write = Policy::parse("tenant_a and writer").unwrap();
        let (mine, kek) = EpochRecord::create(
            &Ac17,
            key,
            Cover::Chunks(ids.clone()),
            vec![e2; 2],
            &read,
            &write,
        )
        .map_err(|e| e.to_string())?;
        c.write_symbol(
            &format!("sat.abe/epoch/{:016x}", mine.epoch),
            &mine.to_bytes(),
        )?;
        seal_raw(c, &ids, key, &mine, &kek, e2, &pattern(0x78, CHUNK))?;
        c.write_symbol("tenants/wandas-epoch", &mine.epoch.to_le_bytes())?;
    }
    c.barrier(40, n)?;
    if me == ALICE {
        let wandas = c.read_symbol("tenants/wandas-epoch", WAIT)?;
        assert_eq!(
            epoch_of_d(c)?.to_le_bytes().to_vec(),
            wandas,
            "the home takes a new epoch over the newest"
        );
        let d = v.lookup_lst(c, &ids, WAIT)?;
        match v.get(c, &d) {
            Err(SatError::Integrity(why)) => assert!(
                why.contains("only a tenant that can read the data may change who reads it"),
                "{why}"
            ),
            other => panic!(
                "D under wanda's epoch: expected an integrity error, got {:?}",
                other.map(|d| d.len())
            ),
        }
        // alice writes again over it: readable by her, under an epoch
        // whose read policy is the revoking one.
        v.put(c, &d, &pattern(0xD3, 2 * CHUNK))?;
    }
    c.barrier(41, n)?;
    if me == ALICE {
        let fresh = Vault::from_env(me)?.expect("SAT_ABE_KEY names each rank's key");
        let fd = fresh.lookup_lst(c, &ids, WAIT)?;
        assert_eq!(
            fresh.get(c, &fd)?,
            pattern(0xD3, 2 * CHUNK),
            "a reader that never saw D reads it"
        );
    }
    if let (Some((record, _)), Some(w)) = (&old, &wanda_vault) {
        let e3 = epoch_of_d(c)?;
        assert_ne!(e3, record.epoch);
        let wd = w.lookup_lst(c, &ids, WAIT)?;
        expect_denied(
            "D written after wanda's attempts, read by wanda",
            w.get(c, &wd),
        );
    }
    c.barrier(42, n)?;
    // A record that does not verify (a write policy of wanda's own), with a
    // version under it over the newest epoch: the home takes it (it cannot
    // tell), readers refuse it, and the line of epochs before it can no
    // longer be checked from what comes after.
    if let Some(key) = &wanda {
        let head = epoch_of_d(c)?;
        let read = Policy::parse("tenant_a").unwrap();
        let (junk, kek) = EpochRecord::create(
            &Ac17,
            key,
            Cover::Chunks(ids.clone()),
            vec![head; 2],
            &read,
            &read,
        )
        .map_err(|e| e.to_string())?;
        c.write_symbol(
            &format!("sat.abe/epoch/{:016x}", junk.epoch),
            &junk.to_bytes(),
        )?;
        seal_raw(c, &ids, key, &junk, &kek, head, &pattern(0x79, CHUNK))?;
    }
    c.barrier(43, n)?;
    // A process of wanda's that knows no read policy of D refuses to write
    // it (its MALLOC's read policy does not count: wanda is no owner), and
    // so does her process that read D before the new epoch took her read
    // access away: the policies it knows are older than the revocation the
    // unverifiable record now hides, and sealing under them would give her
    // read access back...
    if let Some(w) = &wanda_vault {
        let wd = w.lookup_lst(c, &ids, WAIT)?;
        let fresh = Vault::load(wanda_key)?;
        let fd = fresh.malloc_lst(c, ProtocolId::default(), &ids, &[CHUNK], &both)?;
        for (who, vault, chain) in [("knows an older", w, &wd), ("knows no", &fresh, &fd)] {
            match vault.put(c, chain, &pattern(0xD4, 2 * CHUNK)) {
                Err(SatError::Integrity(why)) => {
                    assert!(
                        why.contains("who may read the chain now is unknown"),
                        "{why}"
                    )
                }
                other => panic!("a write by a process that {who} read policy of D: {other:?}"),
            }
        }
    }
    c.barrier(44, n)?;
    // ... until the owner writes D again; then it may, and alice reads it.
    if me == ALICE {
        let d = v.lookup_lst(c, &ids, WAIT)?;
        expect_integrity("D under a record that does not verify", v.get(c, &d));
        v.put(c, &d, &pattern(0xD5, 2 * CHUNK))?;
    }
    c.barrier(46, n)?;
    if me == CARL {
        let fresh = Vault::load(wanda_key)?;
        let fd = fresh.malloc_lst(c, ProtocolId::default(), &ids, &[CHUNK], &both)?;
        fresh.put(c, &fd, &pattern(0xD6, 2 * CHUNK))?;
        // (That process holds its own plaintext; another one of wanda's
        // may not read what she wrote under D's read policy.)
        let other = Vault::load(wanda_key)?;
        let od = other.lookup_lst(c, &ids, WAIT)?;
        expect_denied("D written by wanda, read by wanda", other.get(c, &od));
    }
    c.barrier(47, n)?;
    if me == ALICE {
        let fresh = Vault::from_env(me)?.expect("SAT_ABE_KEY names each rank's key");
        let fd = fresh.lookup_lst(c, &ids, WAIT)?;
        assert_eq!(
            fresh.get(c, &fd)?,
            pattern(0xD6, 2 * CHUNK),
            "alice reads wanda's write"
        );
    }
    if me == CARL {
        println!("rank {me}: step 13 done");
    }
    Ok(())
}

/// Writes a version of every chunk of `ids` sealed by `key` under
/// `record` (whose KEK is `kek`), naming `parent`, through the plain API,
/// numbered as the next release.
fn seal_raw(
    c: &Client,
    ids: &[u64],
    key: &TenantKey,
    record: &EpochRecord,
    kek: &[u8; 32],
    parent: u64,
    plain: &[u8],
) -> RoleResult {
    let sealed = c.lookup_lst(ids, WAIT)?;
    c.acquire_chain(&sealed, Access::ReadWrite)?;
    let versions: Vec<u64> = ids
        .iter()
        .map(|&id| c.local_version(id).unwrap() + 1)
        .collect();
    c.with_chain_mut(&sealed, |bytes| {
        let layout = sealed.layout();
        for (i, &(id, _)) in layout.chunks().iter().enumerate() {
            let object = Object::Chunk(id);
            let k = SealKey {
                object: &object,
                epoch: record.epoch,
                parent,
                record: record.digest(),
                kek,
            };
            seal::seal(
                &k,
                versions[i],
                Aead::Aes256Gcm,
                key,
                plain,
                &mut bytes[layout.range(i)],
            );
        }
    })?;
    c.release_chain(&sealed)?;
    Ok(())
}

/// The epoch a sealed chunk's header names (bytes 8..16).
fn head_epoch(sealed: &[u8]) -> u64 {
    u64::from_le_bytes(sealed[8..16].try_into().unwrap())
}

/// rita writes an epoch record with a write policy she satisfies, and a
/// version sealed under it, with the plain API.
fn forge_epoch(c: &Client, v: &Vault, ids: &[u64]) -> RoleResult {
    let key = TenantKey::load(std::path::Path::new(
        &std::env::var("SAT_ABE_KEY")
            .unwrap()
            .replace("{rank}", &c.rank().to_string()),
    ))
    .map_err(|e| e.to_string())?;
    let mine = Policy::parse("tenant_a").unwrap();
    let sealed = c.lookup_lst(ids, WAIT)?;
    c.acquire_chain(&sealed, Access::ReadWrite)?;
    // Started over each chunk's newest epoch, so that the homes take it
    // (`server/epochs.rs`): then the readers are the ones to refuse it.
    let parents = c.with_chain(&sealed, |bytes| {
        let layout = sealed.layout();
        (0..layout.len())
            .map(|i| head_epoch(&bytes[layout.range(i)]))
            .collect::<Vec<u64>>()
    })?;
    let (record, kek) = EpochRecord::create(
        &Ac17,
        &key,
        Cover::Chunks(ids.to_vec()),
        parents.clone(),
        &mine,
        &mine,
    )
    .map_err(|e| e.to_string())?;
    c.write_symbol(
        &format!("sat.abe/epoch/{:016x}", record.epoch),
        &record.to_bytes(),
    )?;
    c.with_chain_mut(&sealed, |bytes| {
        let layout = sealed.layout();
        for (i, &(id, size)) in layout.chunks().iter().enumerate() {
            let object = Object::Chunk(id);
            let k = SealKey {
                object: &object,
                epoch: record.epoch,
                parent: parents[i],
                record: record.digest(),
                kek: &kek,
            };
            let plain = vec![0x66u8; seal::plain_len(size).unwrap()];
            seal::seal(
                &k,
                1_000,
                Aead::Aes256Gcm,
                &key,
                &plain,
                &mut bytes[layout.range(i)],
            );
        }
    })?;
    c.release_chain(&sealed)?;
    let _ = v;
    Ok(())
}
