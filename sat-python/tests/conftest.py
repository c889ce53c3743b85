"""Runs Python scripts under the repository's satrun, as real multi-process runs."""
# A run that hangs is stopped after its timeout (SIGTERM to satrun, then SIGKILL to its process group).

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Rank 0 the server, rank 1 playing role 1, rank 2 role 2.
FIGURE11 = REPO / "sat-core" / "topologies" / "figure11.xml"
PROVIDERS = ["shm", "tcp"]


def satrun_path() -> Path:
    """satrun of the profile in SAT_PROFILE (release by default), in SAT_TARGET_DIR or target/."""
    target = Path(os.environ.get("SAT_TARGET_DIR", REPO / "target"))
    exe = target / os.environ.get("SAT_PROFILE", "release") / "satrun"
    if not exe.is_file():
        pytest.fail(f"{exe} is missing: build it with 'cargo build --release --bin satrun'")
    return exe


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    def lines(self, rank: int) -> list[str]:
        """The stdout lines of one rank, without satrun's '[rank] ' prefix."""
        prefix = f"[{rank}] "
        return [l[len(prefix):] for l in self.stdout.splitlines() if l.startswith(prefix)]

    def log_lines(self, rank: int) -> list[str]:
        """The debug stream's lines of one rank (SAT logs on stderr), without the prefix."""
        prefix = f"[{rank}] "
        return [l[len(prefix):] for l in self.stderr.splitlines() if l.startswith(prefix)]


class SatRunner:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.count = 0

    def __call__(self, script: str, *, n: int = 3, provider: str = "shm", timeout: float = 60,
                 env: "dict[str, str] | None" = None) -> Outcome:
        """Runs `script` (Python source) on n ranks, with figure11.xml's topology when n is 3
        (else one server and n - 1 clients of role 1); the process group is killed on timeout."""
        self.count += 1
        path = self.tmp_path / f"script{self.count}.py"
        path.write_text(textwrap.dedent(script))
        cmd = [str(satrun_path()), "-n", str(n), "--provider", provider]
        if n == 3:
            cmd += ["--topology", str(FIGURE11)]
        cmd += ["--", sys.executable, str(path)]
        env = dict(os.environ, SAT_BOOTSTRAP_TIMEOUT="30", **(env or {}))
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # satrun stops its ranks and cleans up on SIGTERM; SIGKILL the group if it does not.
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
            pytest.fail(f"satrun did not finish within {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return Outcome(proc.returncode, out, err)


@pytest.fixture
def satrun(tmp_path: Path) -> SatRunner:
    return SatRunner(tmp_path)


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    return request.param
