"""The house's floors hold: no product module imports a floor above its own, and no imports go
in a circle. Every import statement counts, module level or inside a function (a lazy import is
still a dependency); only ``if TYPE_CHECKING:`` blocks are left out (annotations, never run). No
product module starts a program of a floor above its own either (a script's file name, or a module
after ``-m``, in its code: a dependency the imports do not show).

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


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of the docstring constants of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def programs_started_by(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The product modules ``name``'s code names as a program to start: a string that is a
    module's file path (``"train_qmix.py"``, ``"studies/leaderboard.py"``), or a module name right
    after a ``"-m"`` in a list, tuple or call. Docstrings and messages (strings with more in them)
    do not count."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = _docstring_nodes(tree)
    in_repo = {m: p for m, p in modules.items() if p.is_relative_to(ROOT)}
    by_file = {str(p.relative_to(ROOT)): m for m, p in in_repo.items()} | \
              {p.name: m for m, p in in_repo.items() if p.parent == ROOT}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value in by_file and by_file[node.value] != name:
                found.add(by_file[node.value])
        items = node.elts if isinstance(node, (ast.List, ast.Tuple)) else node.args if isinstance(node, ast.Call) else []
        for flag, target in zip(items, items[1:]):
            if (isinstance(flag, ast.Constant) and flag.value == "-m" and isinstance(target, ast.Constant)
                    and target.value in modules and target.value != name):
                found.add(target.value)
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
              if floor_of(b) > floor_of(a)]
    assert not upward, "imports that climb a floor:\n" + "\n".join(sorted(upward))


def test_no_module_starts_a_program_of_a_higher_floor():
    modules = product_modules()
    upward = [f"{name} (floor {floor_of(name)}) starts {target} (floor {floor_of(target)})"
              for name, path in modules.items() for target in programs_started_by(name, path, modules)
              if floor_of(target) > floor_of(name)]
    assert not upward, "programs started a floor up (call them as library functions):\n" + "\n".join(sorted(upward))


def test_a_started_program_is_found_and_a_docstring_or_message_is_not(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""Run python train_qmix.py."""\nimport subprocess, sys\nSCRIPT = "train_qmix.py"\n'
                      'def f():\n    """train_qmix.py"""\n    subprocess.run([sys.executable, "-m", "studies.leaderboard"])\n'
                      '    print("continue with python -m studies.robustness --checkpoint x")\n')
    modules = {"learners.m": source, "train_qmix": ROOT / "train_qmix.py", "studies.leaderboard": source,
               "studies.robustness": source}
    assert programs_started_by("learners.m", source, modules) == {"train_qmix", "studies.leaderboard"}


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
