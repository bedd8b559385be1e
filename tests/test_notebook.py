"""notebooks/quickstart.ipynb runs top to bottom (nbclient, a real Jupyter kernel) in a temporary
directory, shows its tables and figures, and is stored without outputs."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_is_stored_clean():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "no code cells"
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebook's run directory (tempfile) lands here
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, naming the cell, if any cell fails

    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                     if o.output_type == "stream" and o.get("name") == "stdout")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert "== round 1/2" in text and "decision (FinalRefer)" in text  # the episode transcript
    assert "Held-out comparison" in text
    for policy in ("qmix", "solo", "full", "chain", "star", "debate", "random"):
        assert f"\n{policy} " in text, policy  # a table row per policy
    assert "accuracy attacked" in text
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 6, f"{len(images)} figures displayed"

    runs = list(tmp_path.glob("topomarl-quickstart-*"))
    assert len(runs) == 1
    results = json.loads((runs[0] / "results.json").read_text())
    assert results["config"]["train"]["episodes"] == 400 and results["eval"]["qmix"]["episodes"] == 200
    for name in ("learning_curves.png", "action_distribution.png", "topology_examples.png"):
        assert (runs[0] / name).stat().st_size > 10_000, name
    assert not list(tmp_path.glob("runs")), "the notebook wrote a default run directory"
