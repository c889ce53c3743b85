"""The example notebooks run in two real Jupyter kernels, one after the other: the producer
attaches to a service, shares an array and detaches; the consumer's kernel attaches later and
finds the same bytes."""

import hashlib
from pathlib import Path

import nbformat
import numpy as np
from nbclient import NotebookClient

from _service import REPO, service  # noqa: F401 (fixture)

NOTEBOOKS = REPO / "sat-python" / "examples" / "notebooks"


def execute(name: str, cwd: Path) -> "list[str]":
    """Runs a notebook in a new kernel working in `cwd`; returns the text its cells printed."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return [
        line
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "stream"
        for line in out.text.splitlines()
    ]


def test_two_kernels_share_a_numpy_array_through_a_service(service, monkeypatch, tmp_path):
    # The kernels inherit the environment: this is how they find the service.
    monkeypatch.setenv("SAT_ADDRESS", service.address)
    produced = execute("producer.ipynb", tmp_path)
    assert any(l.startswith("attached in slot") for l in produced), produced
    consumed = execute("consumer.ipynb", tmp_path)
    y, x = np.mgrid[0:1080, 0:1920]
    image = (np.sin(x / 40.0) * np.cos(y / 25.0)).astype(np.float32)
    assert "identical: True" in consumed, consumed
    assert f"sha256 {hashlib.sha256(image).hexdigest()}" in consumed, consumed
