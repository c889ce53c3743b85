"""tools/sat-stats against a synthetic run written to the format of docs/STATISTICS.md.

The run: servers 0 and 1, clients 2 and 3 on server 0 and client 4 on server 1. Each client
allocates its own chunks, looks up another's, and opens scopes under an LRU memory limit, so its
chunk events, scopes and counters agree the way a real process's do.
"""

import importlib.machinery
import importlib.util
import json
import random
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

TOOL = Path(__file__).resolve().parents[1] / "sat-stats"
FIGURES = ["heatmap.png", "time.png", "chunk-allocation.png", "chunk-access.png"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
COUNTERS = ["alloc", "lookup", "free", "read_hit", "read_miss", "write_hit", "write_miss",
            "readwrite_hit", "readwrite_miss"]

SIZE = 5
SERVERS = [0, 1]
SERVER_OF = {2: 0, 3: 0, 4: 1}
ROLE_OF = {2: 1, 3: 2, 4: 2}
CHUNK_SIZE = 4096
START_UNIX_NS = 1_795_000_000_000_000_000


def load_tool():
    """The tool as a module, to look inside its figures."""
    loader = importlib.machinery.SourceFileLoader("sat_stats", str(TOOL))
    spec = importlib.util.spec_from_loader("sat_stats", loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sat_stats"] = module
    # No tools/__pycache__ left behind for a script.
    keep, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = keep
    return module


@pytest.fixture(scope="module")
def tool():
    return load_tool()


# ---------------------------------------------------------------------------
# The synthetic run
# ---------------------------------------------------------------------------


def client_file(rank, pid, seed, own, looked_up, scopes, capacity):
    """A client's file: it allocates `own` chunks, looks up `looked_up`, then opens `scopes` scopes."""
    rng = random.Random(seed)
    t = 40_000_000  # the bootstrap
    known, resident = set(), OrderedDict()
    counters = dict.fromkeys(COUNTERS, 0)
    events, accesses = [], []

    def event(kind, chunk):
        counters[kind] += 1
        events.append({"t_ns": t, "event": kind, "chunk": chunk, "size": CHUNK_SIZE,
                       "chunks": len(known), "footprint": len(resident)})

    def make_resident(chunk):
        nonlocal t
        resident[chunk] = True
        resident.move_to_end(chunk)
        while len(resident) > capacity:
            old, _ = resident.popitem(last=False)
            t += rng.randint(50_000, 200_000)
            event("free", old)

    for chunk in own:
        t += rng.randint(5_000_000, 20_000_000)
        known.add(chunk)
        make_resident(chunk)
        event("alloc", chunk)
    for chunk in looked_up:
        t += rng.randint(2_000_000, 10_000_000)
        known.add(chunk)
        event("lookup", chunk)
    misses = writes = in_scopes = 0
    chunks = sorted(known)
    for _ in range(scopes):
        chunk = rng.choice(chunks)
        access = rng.choice(["read", "read", "write", "readwrite"])
        hit = chunk in resident
        start = t + rng.randint(10_000_000, 60_000_000)  # the application computes
        t = start + (rng.randint(100_000, 2_000_000) if hit else rng.randint(3_000_000, 25_000_000))
        in_scopes += t - start
        if not hit:
            misses += 1
            make_resident(chunk)
        else:
            resident.move_to_end(chunk)
        writes += access != "read"
        counters[f"{access}_{'hit' if hit else 'miss'}"] += 1
        accesses.append({"start_ns": start, "end_ns": t, "chunk": chunk, "access": access,
                         "hit": hit})
    duration = t + 30_000_000
    # SAT's share: its scopes, and the allocations and lookups.
    in_sat = in_scopes + 3_000_000 * (len(own) + len(looked_up))
    sdsm, mp = in_sat // 5, in_sat * 3 // 10
    sleep = in_sat - sdsm - mp
    messages = len(own) + len(looked_up) + 2 * misses + writes + 3
    return {
        "format": "sat-stats 1",
        "rank": rank, "kind": "client", "role": ROLE_OF[rank], "server": SERVER_OF[rank],
        "size": SIZE, "servers": SERVERS,
        "pid": pid, "host": "node1",
        "start_unix_ns": START_UNIX_NS + seed * 1_000, "duration_ns": duration,
        "time_ns": {"user": duration - sdsm - mp - sleep, "sdsm": sdsm, "message_passing": mp,
                    "sleep": sleep},
        "sent": [{"to": SERVER_OF[rank], "messages": messages,
                  "bytes": 64 * messages + CHUNK_SIZE * writes}],
        "counters": counters,
        "truncated": False,
        "chunk_events": events,
        "accesses": accesses,
    }


def server_file(rank, pid, clients):
    """A server's file: data to its clients (what they missed), control messages to the other server."""
    duration = max(c["duration_ns"] for c in clients) + 250_000_000 + 10_000_000 * rank
    sent = []
    for other in SERVERS:
        if other != rank:
            sent.append({"to": other, "messages": 40 + rank, "bytes": 40 * 96 + rank})
    for c in clients:
        misses = c["counters"]["read_miss"] + c["counters"]["write_miss"] + c["counters"]["readwrite_miss"]
        messages = c["sent"][0]["messages"]
        sent.append({"to": c["rank"], "messages": messages,
                     "bytes": 64 * messages + CHUNK_SIZE * misses})
    mp, sleep = duration * (8 + 3 * rank) // 100, duration * (70 - 10 * rank) // 100
    return {
        "format": "sat-stats 1",
        "rank": rank, "kind": "server", "role": 0, "server": rank,
        "size": SIZE, "servers": SERVERS,
        "pid": pid, "host": "node1",
        "start_unix_ns": START_UNIX_NS, "duration_ns": duration,
        "time_ns": {"user": 0, "sdsm": duration - mp - sleep, "message_passing": mp, "sleep": sleep},
        "sent": sent,
        "counters": dict.fromkeys(COUNTERS, 0),
        "truncated": False,
        "chunk_events": [],
        "accesses": [],
    }


def make_run():
    """rank -> file contents."""
    c2 = client_file(2, 3102, seed=2, own=range(1000, 1012), looked_up=[], scopes=60, capacity=10)
    c3 = client_file(3, 3103, seed=3, own=range(2000, 2004), looked_up=range(1000, 1012),
                     scopes=80, capacity=6)
    c4 = client_file(4, 3104, seed=4, own=range(3000, 3006), looked_up=range(2000, 2004),
                     scopes=40, capacity=8)
    return {
        0: server_file(0, 3100, [c2, c3]),
        1: server_file(1, 3101, [c4]),
        2: c2, 3: c3, 4: c4,
    }


def write(folder: Path, data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"sat-stats.{data['rank']}.{data['pid']}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def run_dir(tmp_path):
    files = make_run()
    folder = tmp_path / "stats"
    for data in files.values():
        write(folder, data)
    return folder, files


def sat_stats(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def summary_tables(stdout: str):
    """The two tables of --summary: {rank: {column: text}} each, and the total row."""
    tables, header, total = [], None, None
    for line in stdout.splitlines():
        words = line.split()
        if words[:1] == ["rank"]:
            header = words
            tables.append({})
        elif header and words and words[0].isdigit():
            tables[-1][int(words[0])] = dict(zip(header, words))
        elif header and words[:1] == ["total"]:
            total = words
        elif not words:
            header = None
    return tables, total


# ---------------------------------------------------------------------------
# The figures
# ---------------------------------------------------------------------------


def test_writes_the_four_figures_as_png(run_dir, tmp_path):
    import matplotlib.image

    folder, _ = run_dir
    out = tmp_path / "figures"
    r = sat_stats(folder, "--out", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(out / name) for name in FIGURES]
    for name in FIGURES:
        path = out / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE, name
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 500, (name, image.shape)
        # A drawing, not a blank page.
        colours = np.unique(image.reshape(-1, image.shape[2]), axis=0)
        assert len(colours) > 50, (name, len(colours))


def test_the_figures_go_to_dir_by_default(run_dir):
    folder, _ = run_dir
    r = sat_stats(folder)
    assert r.returncode == 0, r.stderr
    for name in FIGURES:
        assert (folder / name).read_bytes()[:8] == PNG_SIGNATURE


def test_heatmap_holds_the_mb_sent_with_servers_first(run_dir, tool):
    folder, files = run_dir
    run = tool.read_run(folder)
    order, m = tool.sent_matrix(run)
    assert order == [0, 1, 2, 3, 4]
    for rank, data in files.items():
        for s in data["sent"]:
            assert m[order.index(rank), order.index(s["to"])] == pytest.approx(s["bytes"] / 1e6)
    # Clients never send to clients (Figure 2): that quarter stays empty.
    assert not m[2:, 2:].any()
    fig = tool.draw_heatmap(run)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["S0", "S1", "C2", "C3", "C4"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["S0", "S1", "C2", "C3", "C4"]
    cells = [t.get_text() for t in ax.texts]
    assert len(cells) == sum(len(d["sent"]) for d in files.values())
    assert tool._mb_text(files[0]["sent"][0]["bytes"] / 1e6) in cells
    # The colour scale is logarithmic.
    assert type(ax.images[0].norm).__name__ == "LogNorm"


def bare_file(rank, size, servers, sent):
    """A file with no events: what a process that only passed messages writes."""
    kind = "server" if rank in servers else "client"
    return {
        "format": "sat-stats 1", "rank": rank, "kind": kind, "role": 0 if kind == "server" else 1,
        "server": rank if kind == "server" else servers[0], "size": size, "servers": servers,
        "pid": 7000 + rank, "host": "node2", "start_unix_ns": START_UNIX_NS,
        "duration_ns": 10**9, "time_ns": {"user": 0, "sdsm": 10**8, "message_passing": 10**8,
                                          "sleep": 8 * 10**8},
        "sent": [{"to": to, "messages": 1, "bytes": b} for to, b in sent.items()],
        "counters": dict.fromkeys(COUNTERS, 0), "truncated": False,
        "chunk_events": [], "accesses": [],
    }


def test_servers_come_first_wherever_their_ranks_are(tmp_path, tool):
    # Servers 0 and 3 of 5 ranks; rank 4 wrote no file (killed): its row stays empty.
    servers = [3, 0]
    for rank, sent in {0: {3: 1000, 1: 5_000_000}, 3: {0: 2000, 2: 7_000_000},
                       1: {0: 3_000_000}, 2: {3: 4_000_000}}.items():
        write(tmp_path, bare_file(rank, 5, servers, sent))
    run = tool.read_run(tmp_path)
    order, m = tool.sent_matrix(run)
    assert order == [0, 3, 1, 2, 4]
    assert m[1, 3] == pytest.approx(7.0) and m[3, 1] == pytest.approx(4.0)
    assert m[0, 2] == pytest.approx(5.0) and m[2, 0] == pytest.approx(3.0)
    assert not m[4].any()
    fig = tool.draw_heatmap(run)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["S0", "S3", "C1", "C2", "C4"]
    # The lines between servers and clients.
    assert sorted(line.get_xdata()[0] for line in ax.lines if line.get_xdata()[0] == line.get_xdata()[1]) == [1.5]
    assert sorted(line.get_ydata()[0] for line in ax.lines if line.get_ydata()[0] == line.get_ydata()[1]) == [1.5]
    assert "no file for C4" in ax.get_title()
    fig = tool.draw_time(run)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["S0", "S3", "C1", "C2"]


def test_time_bars_are_the_time_split_in_percent(run_dir, tool):
    folder, files = run_dir
    fig = tool.draw_time(tool.read_run(folder))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["S0", "S1", "C2", "C3", "C4"]
    parts = ["user", "sdsm", "message_passing", "sleep"]
    bars = ax.containers
    assert [b.get_label() for b in bars] == ["user", "S-DSM", "sync MP", "sleep"]
    for i, rank in enumerate([0, 1, 2, 3, 4]):
        split = files[rank]["time_ns"]
        whole = sum(split.values())
        for part, bar in zip(parts, bars):
            assert bar[i].get_width() == pytest.approx(100 * split[part] / whole)


def test_chunk_access_draws_every_scope_in_its_class(run_dir, tool):
    folder, files = run_dir
    run = tool.read_run(folder)
    stream = tool.pick_stream(run, 3, None)
    fig = tool.draw_access(run, stream)
    ax = fig.axes[0]
    # Each class is one path, its scopes apart by NaN vertices.
    paths = {c.get_label(): c.get_paths()[0].vertices for c in ax.collections}
    drawn = [(len(p) + 1) // 3 for p in paths.values()]
    c = files[3]["counters"]
    expected = [c["read_hit"], c["read_miss"], c["write_hit"] + c["readwrite_hit"],
                c["write_miss"] + c["readwrite_miss"]]
    assert drawn == [n for n in expected if n]
    assert sum(drawn) == len(files[3]["accesses"])
    # Each segment on its chunk's row.
    ids = tool.chunk_ids(stream)
    rows = np.concatenate([p[0::3, 1] for p in paths.values()]).astype(int)
    assert sorted(ids[rows]) == sorted(a["chunk"] for a in files[3]["accesses"])
    # From its acquire to its release.
    for name, p in paths.items():
        mine = [a for a in files[3]["accesses"] if (a["access"] != "read") == name.startswith("write")
                and a["hit"] == name.endswith("hit")]
        assert p[0::3, 0] == pytest.approx([a["start_ns"] / 1e9 for a in mine])
        assert p[1::3, 0] == pytest.approx([a["end_ns"] / 1e9 for a in mine])
        assert np.isnan(p[2::3]).all()
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[2].startswith(f"write hit ({expected[2]}") and "readwrite" in labels[2]


def test_readwrite_scopes_count_as_writes(tool, tmp_path):
    data = make_run()[2]
    data["accesses"] = [
        {"start_ns": 10, "end_ns": 20, "chunk": 1000, "access": "readwrite", "hit": False},
        {"start_ns": 30, "end_ns": 50, "chunk": 1001, "access": "readwrite", "hit": True},
        {"start_ns": 60, "end_ns": 90, "chunk": 1002, "access": "read", "hit": False},
    ]
    segments = tool.access_segments(tool.read_stream(write(tmp_path, data)))
    assert {k: len(v) for k, v in segments.items()} == {
        "read hit": 0, "read miss": 1, "write hit": 1, "write miss": 1}
    assert segments["write miss"][0].tolist() == [[10e-9, 1000], [20e-9, 1000]]
    assert segments["write hit"][0].tolist() == [[30e-9, 1001], [50e-9, 1001]]


def test_chunk_allocation_shows_the_events_and_the_two_curves(run_dir, tool):
    folder, files = run_dir
    run = tool.read_run(folder)
    stream = tool.pick_stream(run, 4, None)
    fig = tool.draw_allocation(run, stream)
    ax, right = fig.axes
    events = files[4]["chunk_events"]
    # One row per chunk id, in id order, labelled with the id.
    ids = tool.chunk_ids(stream)
    assert list(ids) == sorted({e["chunk"] for e in events} | {a["chunk"] for a in files[4]["accesses"]})
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [str(i) for i in ids]
    by_kind = {line.get_label().split()[0]: line for line in ax.get_lines()}
    for kind in ("alloc", "lookup", "free"):
        mine = [e for e in events if e["event"] == kind]
        assert len(mine) > 0, kind
        assert [int(ids[int(y)]) for y in by_kind[kind].get_ydata()] == [e["chunk"] for e in mine]
        assert list(by_kind[kind].get_xdata()) == pytest.approx([e["t_ns"] / 1e9 for e in mine])
    curves = {line.get_label(): line for line in right.get_lines()}
    assert list(curves["chunks"].get_ydata())[:-1] == [e["chunks"] for e in events]
    assert list(curves["footprint"].get_ydata())[:-1] == [e["footprint"] for e in events]
    assert "C4" in fig.get_suptitle() and "truncated" not in fig.get_suptitle()


def test_a_truncated_file_says_so_in_the_chunk_titles(run_dir, tool):
    folder, files = run_dir
    # SAT_STATS_MAX_EVENTS=10: the lists stop, the counters go on.
    files[3]["truncated"] = True
    files[3]["chunk_events"] = files[3]["chunk_events"][:10]
    files[3]["accesses"] = files[3]["accesses"][:10]
    write(folder, files[3])
    # The spec's example has no "truncated": absent means not truncated.
    del files[2]["truncated"]
    write(folder, files[2])
    run = tool.read_run(folder)
    stream = tool.pick_stream(run, 3, None)
    events = sum(files[3]["counters"][k] for k in ("alloc", "lookup", "free"))
    scopes = sum(files[3]["counters"][k] for k in COUNTERS[3:])
    assert f"truncated: the file kept the first 10 of its {events} chunk events" in \
        tool.draw_allocation(run, stream).get_suptitle()
    assert f"truncated: the file kept the first 10 of its {scopes} scopes" in \
        tool.draw_access(run, stream).get_suptitle()
    stream = tool.pick_stream(run, 2, None)
    assert "truncated" not in tool.draw_access(run, stream).get_suptitle()
    r = sat_stats(folder, "--summary", "--rank", 3)
    assert r.returncode == 0, r.stderr
    (_, counters), _ = summary_tables(r.stdout)
    assert counters[3]["truncated"] == "yes" and counters[2]["truncated"] == "no"
    assert counters[3]["read_hit"] == str(files[3]["counters"]["read_hit"])


def test_the_default_process_is_the_client_with_most_chunk_events(run_dir):
    folder, files = run_dir
    most = max((r for r in files if r not in SERVERS), key=lambda r: len(files[r]["chunk_events"]))
    r = sat_stats(folder, "--out", folder / "f")
    assert r.returncode == 0, r.stderr
    assert f"chunk plots of rank {most} from sat-stats.{most}.{files[most]['pid']}.json" in r.stderr
    r = sat_stats(folder, "--out", folder / "f", "--rank", 4)
    assert r.returncode == 0, r.stderr
    assert "chunk plots of rank 4 from sat-stats.4.3104.json" in r.stderr


def test_large_runs_are_drawn_with_one_collection_per_class(tool, tmp_path):
    data = make_run()[2]
    n = 200_000
    rng = np.random.default_rng(1)
    starts = np.sort(rng.integers(0, 10**10, n))
    chunks = rng.integers(1000, 1400, n)
    kinds = rng.choice(["read", "write", "readwrite"], n)
    hits = rng.random(n) < 0.8
    data["accesses"] = [{"start_ns": int(s), "end_ns": int(s) + 50_000, "chunk": int(c),
                         "access": str(k), "hit": bool(h)}
                        for s, c, k, h in zip(starts, chunks, kinds, hits)]
    data["duration_ns"] = 10**10 + 10**6
    run = tool.read_run(write(tmp_path, data).parent)
    fig = tool.draw_access(run, tool.pick_stream(run, 2, None))
    collections = fig.axes[0].collections
    assert len(collections) == 4
    assert sum((len(c.get_paths()[0].vertices) + 1) // 3 for c in collections) == n


# ---------------------------------------------------------------------------
# The summary
# ---------------------------------------------------------------------------


def test_summary_matches_the_files(run_dir):
    folder, files = run_dir
    r = sat_stats(folder, "--summary", "--out", folder / "f")
    assert r.returncode == 0, r.stderr
    (times, counters), total = summary_tables(r.stdout)
    assert sorted(times) == sorted(counters) == [0, 1, 2, 3, 4]
    for rank, data in files.items():
        row = times[rank]
        assert row["kind"] == data["kind"]
        assert row["role"] == str(data["role"])
        assert row["files"] == "1"
        assert row["duration_s"] == f"{data['duration_ns'] / 1e9:.3f}"
        whole = sum(data["time_ns"].values())
        for column, part in (("user%", "user"), ("sdsm%", "sdsm"), ("mp%", "message_passing"),
                             ("sleep%", "sleep")):
            assert row[column] == f"{100 * data['time_ns'][part] / whole:.1f}", (rank, column)
        assert row["messages"] == str(sum(s["messages"] for s in data["sent"]))
        assert row["MB_sent"] == f"{sum(s['bytes'] for s in data['sent']) / 1e6:.3f}"
        for name in COUNTERS:
            assert counters[rank][name] == str(data["counters"][name]), (rank, name)
    all_sent = [s for d in files.values() for s in d["sent"]]
    assert total[-2:] == [str(sum(s["messages"] for s in all_sent)),
                          f"{sum(s['bytes'] for s in all_sent) / 1e6:.3f}"]
    # The figures are still drawn.
    assert r.stdout.split()[-4:] == [str(folder / "f" / name) for name in FIGURES]


def test_files_of_one_rank_are_added_up(run_dir, tool):
    folder, files = run_dir
    # Service mode: a second process held slot 4 after the first.
    later = client_file(4, 3204, seed=44, own=range(3100, 3130), looked_up=[], scopes=90,
                        capacity=8)
    write(folder, later)
    first = files[4]
    r = sat_stats(folder, "--summary", "--rank", 4, "--out", folder / "f")
    assert r.returncode == 0, r.stderr
    (times, counters), _ = summary_tables(r.stdout)
    row = times[4]
    assert row["files"] == "2"
    assert row["duration_s"] == f"{(first['duration_ns'] + later['duration_ns']) / 1e9:.3f}"
    both = first["sent"] + later["sent"]
    assert row["messages"] == str(sum(s["messages"] for s in both))
    assert row["MB_sent"] == f"{sum(s['bytes'] for s in both) / 1e6:.3f}"
    for name in COUNTERS:
        assert counters[4][name] == str(first["counters"][name] + later["counters"][name]), name
    whole = sum(first["time_ns"].values()) + sum(later["time_ns"].values())
    assert row["sleep%"] == f"{100 * (first['time_ns']['sleep'] + later['time_ns']['sleep']) / whole:.1f}"
    # The heatmap adds them up too.
    order, m = tool.sent_matrix(tool.read_run(folder))
    assert m[order.index(4), order.index(1)] == pytest.approx(sum(s["bytes"] for s in both) / 1e6)
    # The chunk plots show one process: the one with the most events, or the one --pid names.
    assert "chunk plots of rank 4 from sat-stats.4.3204.json" in r.stderr
    r = sat_stats(folder, "--rank", 4, "--pid", 3104, "--out", folder / "f")
    assert r.returncode == 0, r.stderr
    assert "chunk plots of rank 4 from sat-stats.4.3104.json (--pid)" in r.stderr


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


def break_missing_counters(data):
    del data["counters"]


def break_access_kind(data):
    data["accesses"][5]["access"] = "execute"


def break_chunk_id(data):
    data["chunk_events"][2]["chunk"] = -1


def break_kind(data):
    data["kind"] = "peer"


@pytest.mark.parametrize("damage, message", [
    (break_missing_counters, 'the field "counters" is missing'),
    (break_access_kind, 'accesses[5]: "access" is "execute"'),
    (break_chunk_id, 'chunk_events[2]: "chunk" is -1'),
    (break_kind, '"kind" is "peer"'),
])
def test_a_malformed_file_is_named_with_its_problem(run_dir, damage, message):
    folder, files = run_dir
    damage(files[3])
    path = write(folder, files[3])
    r = sat_stats(folder)
    assert r.returncode == 2
    assert str(path) in r.stderr and message in r.stderr, r.stderr
    assert not (folder / "heatmap.png").exists()


def test_bad_json_exits_2(run_dir):
    folder, _ = run_dir
    path = folder / "sat-stats.3.3103.json"
    path.write_text(path.read_text()[:500])
    r = sat_stats(folder)
    assert r.returncode == 2
    assert str(path) in r.stderr and "not valid JSON" in r.stderr, r.stderr


def test_a_foreign_format_exits_2(run_dir):
    folder, files = run_dir
    files[2]["format"] = "sat-stats 2"
    path = write(folder, files[2])
    r = sat_stats(folder)
    assert r.returncode == 2
    assert str(path) in r.stderr and '"format" is "sat-stats 2"' in r.stderr, r.stderr
    path.write_text(json.dumps({"name": "something else"}))
    r = sat_stats(folder)
    assert r.returncode == 2
    assert str(path) in r.stderr and 'no "format" field' in r.stderr, r.stderr


def test_files_of_two_runs_exit_2(run_dir):
    folder, files = run_dir
    files[4]["size"] = 7
    path = write(folder, files[4])
    r = sat_stats(folder)
    assert r.returncode == 2
    assert str(path) in r.stderr and "different runs" in r.stderr, r.stderr


RUN_A = "5f0c" * 8
RUN_B = "9e21" * 8


def test_files_of_two_runs_of_one_shape_exit_2(run_dir):
    # Two runs of the same program: same size, same servers; only the run id tells them apart.
    folder, files = run_dir
    for data in files.values():
        data["run_id"] = RUN_A
        write(folder, data)
    files[4]["run_id"] = RUN_B
    path = write(folder, files[4])
    r = sat_stats(folder, "--summary")
    assert r.returncode == 2, r.stdout
    assert str(path) in r.stderr and "different runs" in r.stderr, r.stderr
    assert RUN_A in r.stderr and RUN_B in r.stderr, r.stderr
    assert not (folder / "heatmap.png").exists()


def test_two_files_of_one_server_exit_2(run_dir):
    # Files without a run id (written before it existed), of two runs: a run has one process per
    # server rank, so a second file of server 1 gives the second run away.
    folder, files = run_dir
    again = dict(files[1], pid=4101)
    path = write(folder, again)
    r = sat_stats(folder)
    assert r.returncode == 2
    assert str(path) in r.stderr and "server 1" in r.stderr, r.stderr
    assert str(folder / "sat-stats.1.3101.json") in r.stderr, r.stderr
    # The same with a run id: one run cannot have written both.
    for data in files.values():
        write(folder, dict(data, run_id=RUN_A))
    write(folder, dict(again, run_id=RUN_A))
    r = sat_stats(folder)
    assert r.returncode == 2
    assert "server 1" in r.stderr, r.stderr


def test_files_of_one_service_with_and_without_a_run_id_are_added_up(run_dir):
    # A service: its servers' files name the run; a process that attached twice to slot 4 wrote
    # sat-stats.4.<pid>.json and sat-stats.4.<pid>-2.json; files without a run id are accepted.
    folder, files = run_dir
    for rank in SERVERS + [2]:
        write(folder, dict(files[rank], run_id=RUN_A))
    second = client_file(4, 3104, seed=45, own=range(3200, 3204), looked_up=[], scopes=10,
                         capacity=8)
    (folder / "sat-stats.4.3104-2.json").write_text(json.dumps(dict(second, run_id=RUN_A)))
    r = sat_stats(folder, "--summary", "--out", folder / "f")
    assert r.returncode == 0, r.stderr
    (times, _), _ = summary_tables(r.stdout)
    assert times[4]["files"] == "2"
    assert times[4]["messages"] == str(files[4]["sent"][0]["messages"] +
                                       second["sent"][0]["messages"])


def test_a_run_id_that_is_not_a_string_is_named(run_dir):
    folder, files = run_dir
    files[2]["run_id"] = 12
    path = write(folder, files[2])
    r = sat_stats(folder)
    assert r.returncode == 2
    assert str(path) in r.stderr and '"run_id" is 12' in r.stderr, r.stderr


def test_an_empty_or_missing_folder_exits_2(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not statistics")
    r = sat_stats(empty)
    assert r.returncode == 2
    assert str(empty) in r.stderr and "no sat-stats.*.json file" in r.stderr, r.stderr
    r = sat_stats(tmp_path / "nowhere")
    assert r.returncode == 2
    assert "no such folder" in r.stderr, r.stderr


def test_an_unknown_rank_or_pid_exits_2(run_dir):
    folder, _ = run_dir
    r = sat_stats(folder, "--rank", 9)
    assert r.returncode == 2
    assert "--rank 9: no file for this rank" in r.stderr, r.stderr
    r = sat_stats(folder, "--rank", 2, "--pid", 3103)
    assert r.returncode == 2
    assert "--pid 3103: no file of rank 2 has this pid" in r.stderr, r.stderr
