"""tools/sat-stats on the files of a real SAT run: satrun starts two servers, a writer and a reader
(sat-core/examples/stats_workload.rs, sat-core/topologies/stats.xml) over shm with SAT_STATS set,
and the tool draws Figure 15's four plots from what they wrote.

The workload's counts are known (see the example): the tool's summary must show them.
"""

import os
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "sat-stats"
TARGET = Path(os.environ.get("SAT_TARGET_DIR", REPO / "target"))
FIGURES = ["heatmap.png", "time.png", "chunk-allocation.png", "chunk-access.png"]


def program(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: `make test` builds it (cargo build --workspace --all-targets)")
    return path


def test_the_four_figures_come_from_a_real_runs_statistics(tmp_path):
    stats = tmp_path / "stats"
    satrun = program(TARGET / "release" / "satrun")
    workload = program(TARGET / "debug" / "examples" / "stats_workload")
    run = subprocess.run(
        [str(satrun), "-n", "4", "--provider", "shm", "--topology",
         str(REPO / "sat-core" / "topologies" / "stats.xml"), "--", str(workload),
         "--compute-ms", "20"],
        env=dict(os.environ, SAT_STATS=str(stats)), capture_output=True, text=True, timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(list(stats.glob("sat-stats.*.json"))) == 4

    figures = tmp_path / "figures"
    drawn = subprocess.run(
        [sys.executable, str(TOOL), str(stats), "--out", str(figures), "--summary", "--rank", "3"],
        capture_output=True, text=True, timeout=180,
    )
    assert drawn.returncode == 0, drawn.stdout + drawn.stderr
    for name in FIGURES:
        path = figures / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        image = matplotlib.image.imread(path)
        assert image.shape[0] > 200 and image.shape[1] > 200, name
        # Not a blank canvas: several colours drawn.
        assert len({tuple(px) for px in image.reshape(-1, image.shape[-1])[::97]}) > 5, name
        assert str(path) in drawn.stdout

    # The counters table: rank, alloc, lookup, free, read hit/miss, write hit/miss, readwrite
    # hit/miss, truncated. The writer (rank 2) allocated 7 chunks and opened 19 write scopes; the
    # reader (rank 3) looked up 7, freed the chain's 3, opened 16 read scopes
    # (examples/stats_workload.rs).
    counters = {}
    for line in drawn.stdout.splitlines():
        cells = line.split()
        if len(cells) == 11 and cells[0].isdigit() and cells[-1] in ("yes", "no"):
            counters[int(cells[0])] = [int(c) for c in cells[1:10]]
    assert set(counters) == {0, 1, 2, 3}, drawn.stdout
    alloc, lookup, free, rh, rm, wh, wm, rwh, rwm = counters[2]
    assert (alloc, lookup, free, rh + rm, wh + wm, rwh + rwm) == (7, 0, 0, 0, 19, 0)
    alloc, lookup, free, rh, rm, wh, wm, rwh, rwm = counters[3]
    assert (alloc, lookup, free, rh + rm, wh + wm, rwh + rwm) == (0, 7, 3, 16, 0, 0)
    assert counters[0] == [0] * 9 and counters[1] == [0] * 9
    assert "chunk plots of rank 3" in drawn.stderr
