"""Protected chains and symbols (the encryption layer), two tenants over real processes.

Keys come from the `sat-abe` command (built by `make test` before these tests run).
"""

import os
import subprocess
from pathlib import Path

import pytest

import sat
from conftest import REPO
from _service import service  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(
    not sat.HAS_ABE, reason="the sat module was built without the encryption layer (feature abe)"
)

# Ranks 1 to 4 are the clients of the one server (satrun -n 5).
TENANTS = {
    1: ("alice", "tenant_a,writer"),
    2: ("rita", "tenant_a"),
    3: ("bob", "tenant_b,writer"),
    4: ("carl", "contractor"),
}


def sat_abe() -> Path:
    target = Path(os.environ.get("SAT_TARGET_DIR", REPO / "target"))
    for profile in ("release", "debug"):
        exe = target / profile / "sat-abe"
        if exe.is_file():
            return exe
    pytest.fail(f"sat-abe is missing in {target}: build it with 'cargo build -p sat-core --features abe --bin sat-abe'")


@pytest.fixture
def keys(tmp_path: Path) -> str:
    """An authority and one key file per client rank; the SAT_ABE_KEY pattern."""
    tool = str(sat_abe())
    subprocess.run([tool, "setup", "--out", str(tmp_path / "auth")], check=True, capture_output=True)
    for rank, (name, attrs) in TENANTS.items():
        subprocess.run(
            [tool, "keygen", "--authority", str(tmp_path / "auth" / "authority.key"), "--tenant", name,
             "--attrs", attrs, "--out", str(tmp_path / f"tenant-{rank}.key")],
            check=True, capture_output=True,
        )
    return str(tmp_path / "tenant-{rank}.key")


SCRIPT = """
import numpy as np
import sat

A, B = 100, 200
A_DATA = np.arange(1000, dtype=np.float64)

def role(client):
    me = client.rank
    if me == 1:
        a = client.malloc(A, A_DATA.nbytes, read_policy="tenant_a or contractor",
                          write_policy="tenant_a and writer")
        assert a.protected and a.size == A_DATA.nbytes
        with a.write() as view:
            np.frombuffer(view, dtype=np.float64)[:] = A_DATA
        client.symbols.protect("a-array", A_DATA[:10], read_policy="tenant_a", write_policy="tenant_a and writer")
        client.write_symbol("a-bytes", b"tenant a only", read_policy="tenant_a", write_policy="tenant_a")
    if me == 3:
        b = client.malloc(B, 64, read_policy="tenant_b", write_policy="tenant_b and writer")
        client.put(b, bytes(range(64)))
    client.barrier(1, 4)

    a = client.lookup(A, nbchunks=a_chunks(client))
    b = client.lookup(B)
    assert a.protected and b.protected and a.size == A_DATA.nbytes and b.size == 64
    if me in (1, 2, 4):
        with a.read():
            got = a.array(np.float64).copy()
        assert (got == A_DATA).all(), me
        try:
            client.get(b)
        except sat.AccessDenied as e:
            print("B denied:", "access denied" in str(e))
    if me in (1, 2):
        assert (client.symbols["a-array"] == A_DATA[:10]).all()
        assert client.read_symbol("a-bytes") == b"tenant a only"
    if me == 3:
        assert client.get(b) == bytes(range(64))
        try:
            with a.read():
                pass
        except sat.AccessDenied as e:
            print("A denied:", "tenant_b" in str(e))
        try:
            client.symbols["a-array"]
        except sat.AccessDenied:
            print("a-array denied")
    client.barrier(2, 4)

    # A reader that may not write is refused, and publishes nothing.
    if me == 2:
        try:
            client.put(a, np.zeros(1000).tobytes())
        except sat.AccessDenied as e:
            print("reader may not write:", "write policy" in str(e))
    client.barrier(3, 4)
    if me == 4:
        print("unchanged:", (np.frombuffer(client.get(a), dtype=np.float64) == A_DATA).all())
    client.barrier(4, 4)

    # Revocation: a new epoch without `contractor` (after alice has written
    # over rita's version: a new epoch re-seals what it can read and verify).
    if me == 1:
        client.put(a, A_DATA.tobytes())
        client.new_epoch(a, read_policy="tenant_a")
        client.put(a, (A_DATA * 2).tobytes())
    client.barrier(5, 4)
    if me == 4:
        try:
            client.get(a)
        except sat.AccessDenied:
            print("revoked")
    if me == 2:
        assert (np.frombuffer(client.get(a), dtype=np.float64) == A_DATA * 2).all()
        print("still reads")
    client.barrier(6, 4)

def a_chunks(client):
    return -(-A_DATA.nbytes // client.chunk_size)

sat.run({1: role})
"""


def test_two_tenants(satrun, keys, provider):
    out = satrun(SCRIPT, n=5, provider=provider, env={"SAT_ABE_KEY": keys, "SAT_CHUNK_SIZE": "4096"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == ["B denied: True"]
    assert out.lines(3) == ["A denied: True", "a-array denied"]
    assert out.lines(2) == ["B denied: True", "reader may not write: True", "still reads"]
    assert out.lines(4) == ["B denied: True", "unchanged: True", "revoked"]


@pytest.mark.parametrize("empty", [False, True], ids=["unset", "empty"])
def test_protected_calls_need_both_policies_and_a_key(satrun, empty):
    # Empty is unset (README, "Environment"): not a key or revocation list named "".
    env = {"SAT_ABE_KEY": "", "SAT_ABE_CRL": ""} if empty else {}
    out = satrun(
        """
        import sat

        def role(client):
            try:
                client.malloc(10, 64, read_policy="x")
            except sat.UsageError as e:
                print("one policy:", "both" in str(e))
            try:
                client.malloc(10, 64, read_policy="x", write_policy="y")
            except sat.AccessDenied as e:
                print("no key:", "SAT_ABE_KEY" in str(e))
            try:
                client.load_key("/nonexistent/tenant.key")
            except sat.UsageError as e:
                print("bad key:", "tenant.key" in str(e))

        sat.run({1: role})
        """,
        n=2,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(1) == ["one policy: True", "no key: True", "bad key: True"]


def test_two_clients_of_one_process_are_two_tenants(service, keys):
    """A tenant key belongs to a client: two `sat.connect` clients of one process act as their own
    tenants, and a later session of the same process starts with no key and no cached chain."""
    out = service.attach(
        """
        import os
        import sat

        keys = os.environ["KEYS"]
        alice = sat.connect(os.environ["SAT_ADDRESS"])
        bob = sat.connect(os.environ["SAT_ADDRESS"])
        alice.load_key(keys.format(rank=1))   # tenant_a, writer
        bob.load_key(keys.format(rank=3))     # tenant_b, writer
        a = alice.malloc(500, 64, read_policy="tenant_a", write_policy="tenant_a and writer")
        alice.put(a, bytes(range(64)))
        print("alice wrote")
        b = bob.lookup(500)
        try:
            bob.get(b)
            print("bob read alice's data")
        except sat.AccessDenied:
            print("bob denied")
        try:
            bob.put(b, bytes(64))
            print("bob wrote alice's data")
        except sat.AccessDenied:
            print("bob may not write")
        print("alice reads:", alice.get(a) == bytes(range(64)))
        # A tenant that may write but not read is refused its own version too.
        w = alice.malloc(510, 64, read_policy="tenant_a", write_policy="writer")
        alice.put(w, bytes(64))
        bw = bob.lookup(510)
        bob.put(bw, b"b" * 64)
        try:
            bob.get(bw)
            print("bob read back what he may not read")
        except sat.AccessDenied:
            print("bob denied his own version")
        print("alice reads bob's:", alice.get(w) == b"b" * 64)
        # A write block that raises publishes nothing, on a protected chain too, and the next
        # scope reads the version, not what the block wrote.
        try:
            with a.write() as view:
                view[:] = b"\x07" * 64
                raise RuntimeError("the block fails")
        except RuntimeError:
            pass
        print("after a failed write block:", alice.get(a) == bytes(range(64)))
        # A notification cannot carry a protected chunk's bytes: they are sealed.
        for target in (a, 500):
            try:
                alice.subscribe(target, lambda event: None, with_data=True)
                print("subscribed with sealed data")
            except sat.UsageError as e:
                print("no data subscription:", "sealed" in str(e))
        alice.subscribe(a, lambda event: None)
        alice.unsubscribe(a)
        # Plain bytes over a protected symbol are refused, not returned as its value.
        alice.write_symbol("cfg", b"sealed value", read_policy="tenant_a", write_policy="tenant_a and writer")
        bob.write_symbol("cfg", b"forged")
        try:
            alice.read_symbol("cfg")
            print("forged value read")
        except sat.IntegrityError:
            print("forged symbol refused")
        # `in` says whether a value was written, also one its reader may not open.
        print("forged symbol there:", "cfg" in alice.symbols)
        alice.write_symbol("alice-only", b"v", read_policy="tenant_a", write_policy="tenant_a and writer")
        print("bob sees it there:", "alice-only" in bob.symbols, "never-written" in bob.symbols)
        bob.write_symbol("plain", b"plain value")
        print("plain symbol:", alice.read_symbol("plain") == b"plain value")
        # A client that loads another tenant's key acts as that tenant: what the first
        # decrypted is checked again, not served from its cache.
        alice.load_key(keys.format(rank=3))   # now bob
        try:
            alice.get(a)
            print("the cache served tenant_a's data to bob's key")
        except sat.AccessDenied:
            print("switched key denied")
        alice.detach()
        bob.detach()
        # A later session: no key until one is loaded, and the chain is looked up afresh.
        with sat.connect(os.environ["SAT_ADDRESS"]) as again:
            try:
                again.lookup(500)
                print("protected chain looked up without a key")
            except sat.AccessDenied:
                print("no key yet")
            # A plain chunk first does not make the list plain: no raw access to sealed bytes.
            again.malloc(501, 64)
            try:
                raw = again.lookup_lst([501, 500])
                print("mixed list looked up without a key:", raw)
            except sat.AccessDenied:
                print("no key for a mixed list")
            again.load_key(keys.format(rank=2))   # rita: tenant_a, reader only
            try:
                raw = again.lookup_lst([501, 500])
                print("mixed list looked up:", raw)
            except sat.UsageError as e:
                print("mixed list refused:", "not protected" in str(e))
            c = again.lookup(500)
            print("rita reads:", again.get(c) == bytes(range(64)))
            # A tenant that may read but not write is refused, and publishes nothing that
            # readers would then refuse.
            try:
                again.put(c, bytes(64))
                print("rita wrote")
            except sat.AccessDenied:
                print("rita may not write")
            print("rita still reads:", again.get(c) == bytes(range(64)))
        """,
        env={"KEYS": keys},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [
        "alice wrote",
        "bob denied",
        "bob may not write",
        "alice reads: True",
        "bob denied his own version",
        "alice reads bob's: True",
        "after a failed write block: True",
        "no data subscription: True",
        "no data subscription: True",
        "forged symbol refused",
        "forged symbol there: True",
        "bob sees it there: True False",
        "plain symbol: True",
        "switched key denied",
        "no key yet",
        "no key for a mixed list",
        "mixed list refused: True",
        "rita reads: True",
        "rita may not write",
        "rita still reads: True",
    ], out.stdout + out.stderr
