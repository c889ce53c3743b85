"""A SAT service (`satrun --serve`) for the tests, and the processes that attach to it."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, satrun_path  # noqa: F401 (REPO is re-exported)


class Service:
    """`satrun --serve` on a free port; `stop()` ends it the way an operator does (SIGTERM)."""

    def __init__(self, tmp_path: Path, provider: str, servers: int = 2, slots: int = 4) -> None:
        self.tmp_path = tmp_path
        address_file = tmp_path / "service.address"
        self.log_path = tmp_path / "service.log"
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(satrun_path()), "--serve", "--servers", str(servers), "--slots", str(slots),
             "--provider", provider, "--address-file", str(address_file)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 30
        # The file appears whole (written, then renamed) once the service listens.
        while not address_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the service did not start:\n{self.log()}")
            time.sleep(0.02)
        self.address = address_file.read_text().strip()
        self.count = 0

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def server_pids(self) -> "list[int]":
        """The server processes: satrun's children."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                pids.append(int(entry))
        return pids

    def attach(self, script: str, *args: str, timeout: float = 120, env: "dict[str, str] | None" = None):
        """Runs `script` (Python source) in a new process; SAT_ADDRESS holds the service's address."""
        self.count += 1
        path = self.tmp_path / f"attach{self.count}.py"
        path.write_text(textwrap.dedent(script))
        env = dict(os.environ, SAT_ADDRESS=self.address, **(env or {}))
        return run_bounded([sys.executable, str(path), *args], timeout, env)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                pytest.fail(f"the service did not stop on SIGTERM:\n{self.log()}")
        return self.proc.returncode


def run_bounded(cmd: "list[str]", timeout: float, env: "dict[str, str] | None" = None):
    """Runs a command to its end; one that hangs is killed and fails the test."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{cmd} did not finish within {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def shm_files_of(pid: int) -> "list[str]":
    """The /dev/shm files libfabric's shm provider made for process `pid`."""
    return [n for n in os.listdir("/dev/shm") if str(pid) in n.replace("_", ":").split(":")]


@pytest.fixture
def service(tmp_path: Path, provider: str):
    s = Service(tmp_path, provider)
    yield s
    code = s.stop()
    assert code == 0, f"the service's stop:\n{s.log()}"
