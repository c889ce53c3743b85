"""The stubs (python/sat/_sat.pyi) are honest: stubtest against the built module, mypy --strict
on a typed program that also runs, and both checks fail when a stub or a use is wrong."""

import importlib.resources
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import sat

TYPED_USAGE = Path(__file__).with_name("typed_usage.py")


@pytest.fixture(scope="session")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the session (the numpy stubs take a while to analyse), out of the tree."""
    return tmp_path_factory.mktemp("mypy-cache")


def python_m(*args: str, cwd: Path, env: "dict[str, str] | None" = None) -> subprocess.CompletedProcess:
    # cwd: a temporary directory, so that no .mypy_cache lands in the source tree.
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, **(env or {})),
    )


def test_the_package_ships_py_typed():
    assert importlib.resources.files("sat").joinpath("py.typed").is_file()


def test_stubtest_passes(tmp_path):
    done = python_m("mypy.stubtest", "sat", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_stubtest_fails_on_a_wrong_stub(tmp_path):
    """The same check on a copy of the stubs with two mistakes (MYPYPATH comes before the
    installed package)."""
    stubs = tmp_path / "stubs" / "sat"
    shutil.copytree(Path(sat.__file__).parent, stubs, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    pyi = stubs / "_sat.pyi"
    text = pyi.read_text()
    wrong = text.replace("nbchunks: int = 1, timeout: float = 10.0", "nbchunks: int = 1, timeout: float = 5.0")
    wrong = wrong.replace("def raise_signal(self, id: int)", "def raise_signal(self, id: int, now: bool)")
    assert wrong.count("timeout: float = 5.0") == 1 and "now: bool" in wrong
    pyi.write_text(wrong)
    done = python_m("mypy.stubtest", "sat", cwd=tmp_path, env={"MYPYPATH": str(stubs.parent)})
    assert done.returncode != 0, done.stdout
    assert 'sat._sat.Client.lookup is inconsistent, runtime parameter "timeout" has a default value of 10.0' in done.stdout
    assert 'sat._sat.Client.raise_signal is inconsistent, runtime does not have parameter "now"' in done.stdout


def test_mypy_strict_accepts_the_typed_usage(tmp_path, mypy_cache):
    done = python_m("mypy", "--strict", "--cache-dir", str(mypy_cache), str(TYPED_USAGE), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_rejects_wrong_usage(tmp_path, mypy_cache):
    """The stubs give real types (not Any): mistakes are caught."""
    bad = tmp_path / "bad_usage.py"
    bad.write_text(textwrap.dedent(
        """
        import sat

        def role(client: sat.Client) -> None:
            name: str = client.rank
            client.malloc("42", 8)
            client.subscribe(client.malloc(1, 8), lambda event: event.version + "1")
            with client.malloc(2, 8).read() as view:
                view.append(1)
            client.malloc(3, 8, protocol="msi")
            client.lookup_lst(5)
            client.map(6, [1, 2])
        """
    ))
    done = python_m("mypy", "--strict", "--cache-dir", str(mypy_cache), str(bad), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [l.split(": error: ")[0].rsplit(":", 1)[1] for l in done.stdout.splitlines() if ": error: " in l]
    assert errors == ["5", "6", "7", "9", "10", "11", "12"], done.stdout


def test_the_typed_usage_runs_with_the_types_it_declares(satrun):
    out = satrun(TYPED_USAGE.read_text())
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.lines(2) == ["typed usage ran"]


def test_the_readmes_way_to_tell_a_read_in_place_type_checks(tmp_path, mypy_cache):
    """The README's expression telling whether `chain.read(copy=False)` read in place passes
    `mypy --strict` (typeshed types `memoryview.obj` as any buffer, which has no `in_place`), and
    is the one the typed usage program runs."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    spans = sorted({s for s in readme.split("`")[1::2] if s.endswith(".in_place")})
    assert spans, "the README shows no way to tell a read in place"
    program = tmp_path / "in_place.py"
    program.write_text("import typing\n\nimport sat\n\n" + "".join(
        f"def way_{i}(chain: sat.Chain) -> bool:\n"
        f"    with chain.read(copy=False) as view:\n"
        f"        in_place: bool = {span}\n"
        f"    return in_place\n\n\n"
        for i, span in enumerate(spans)
    ))
    done = python_m("mypy", "--strict", "--cache-dir", str(mypy_cache), str(program), cwd=tmp_path)
    assert done.returncode == 0, program.read_text() + done.stdout + done.stderr
    for span in spans:
        assert span in TYPED_USAGE.read_text(), span
