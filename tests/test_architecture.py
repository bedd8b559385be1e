"""The house's floors hold: no product module imports a floor above its own, and no imports go
in a circle. Every import statement counts, module level or inside a function (a lazy import is
still a dependency); only ``if TYPE_CHECKING:`` blocks are left out (annotations, never run).

Floors, from the ground up (docs/architecture.md):
  1 engine       topo_env.engine
  2 backends     topo_env.sim, agents_llm
  3 front-ends   topo_env.frontends, and the package face topo_env/__init__.py
  4 references   topo_env.references, topo_env.fitting, topo_env.interop
  5 controllers  controllers, learners
  6 studies      studies, train_qmix.py
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS: dict[str, int] = {
    "topo_env.engine": 1,
    "topo_env.sim": 2, "agents_llm": 2,
    "topo_env.frontends": 3, "topo_env": 3,
    "topo_env.references": 4, "topo_env.fitting": 4, "topo_env.interop": 4,
    "controllers": 5, "learners": 5,
    "studies": 6, "train_qmix": 6,
}
PRODUCT = ("topo_env", "agents_llm", "controllers", "learners", "studies", "train_qmix.py")
MOVED_ALIASES: frozenset[str] = frozenset({
    "topo_env.leaderboard", "topo_env.oracle", "topo_env.score_baselines", "topo_env.sim.fit", "robustness",
})
"""Old module paths kept as thin aliases of their new homes for one release (documented commands
keep working); they are the only modules allowed to point up, and go in the next release."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def product_modules() -> dict[str, Path]:
    paths: list[Path] = []
    for entry in PRODUCT:
        p = ROOT / entry
        paths.extend([p] if p.is_file() else sorted(p.rglob("*.py")))
    paths.append(ROOT / "robustness.py")
    return {module_name(p): p for p in paths if p.exists()}


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The product modules ``name`` imports (resolved to the deepest existing module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def floor_of(name: str) -> int:
    best = max((key for key in FLOORS if name == key or name.startswith(key + ".")), key=len)
    return FLOORS[best]


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    modules = product_modules()
    g = nx.DiGraph()
    for name, path in modules.items():
        g.add_node(name)
        for target in imports_of(name, path, modules):
            g.add_edge(name, target)
    return g


def test_the_walk_sees_the_whole_product(graph):
    assert {"topo_env.engine.episode", "topo_env.sim.batch", "agents_llm.team", "topo_env.frontends.parallel_env",
            "topo_env.references.oracle", "controllers.base", "learners.learner", "studies.leaderboard",
            "train_qmix"} <= set(graph.nodes)
    assert graph.has_edge("topo_env.frontends.parallel_env", "topo_env.engine.episode")
    assert graph.number_of_edges() > 150


def test_no_import_climbs_a_floor(graph):
    upward = [f"{a} (floor {floor_of(a)}) imports {b} (floor {floor_of(b)})" for a, b in graph.edges
              if a not in MOVED_ALIASES and floor_of(b) > floor_of(a)]
    assert not upward, "imports that climb a floor:\n" + "\n".join(sorted(upward))


def test_no_import_circles(graph):
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    described = []
    for circle in circles:
        pairs = [f"{a} -> {b}" for a, b in graph.subgraph(circle).edges]
        described.append(", ".join(sorted(pairs)))
    assert not circles, "import circles:\n" + "\n".join(described)


def test_the_engine_never_imports_a_backend_or_front_end_package(graph):
    below = [f"{a} imports {b}" for a, b in graph.edges
             if a.startswith("topo_env.engine") and not b.startswith("topo_env.engine")]
    assert not below, "\n".join(below)


def test_the_walk_catches_an_upward_import_and_a_circle():
    """The checks themselves can fail: a planted upward import and a planted circle are found."""
    g = nx.DiGraph([("topo_env.engine.episode", "studies.leaderboard"), ("controllers.a", "controllers.b"),
                    ("controllers.b", "controllers.a")])
    with pytest.raises(AssertionError, match=r"topo_env.engine.episode \(floor 1\) imports studies.leaderboard"):
        test_no_import_climbs_a_floor(g)
    with pytest.raises(AssertionError, match="controllers.a -> controllers.b"):
        test_no_import_circles(g)


def test_a_lazy_import_counts_and_a_type_checking_one_does_not(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from studies import leaderboard\n"
                      "def f():\n    from controllers.base import Controller\n")
    modules = {"m": source, "studies.leaderboard": source, "controllers.base": source}
    assert imports_of("m", source, modules) == {"controllers.base"}


@pytest.mark.parametrize("command", [
    ["-m", "topo_env.oracle"], ["-m", "topo_env.leaderboard"], ["-m", "topo_env.score_baselines"],
    ["-m", "topo_env.sim.fit"], ["robustness.py"],
])
def test_the_old_commands_still_run(command):
    """The documented commands of the previous layout run their new modules for one more release."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, *command, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m ")


def test_an_old_import_path_is_the_new_module():
    import topo_env.oracle
    from topo_env.references import oracle_cli

    assert topo_env.oracle is oracle_cli
