"""Mutation testing of the core modules with mutmut, one module at a time against its own tests.

    pip install -e '.[test,mutation]'
    nice -n 15 python tools/mutation.py                      # every module in MODULES
    nice -n 15 python tools/mutation.py topo_env/frontends/comm_graph.py    # one module

For each module, the working tree (tracked and untracked, not ignored files) is copied to
``WORKDIR/<module>/`` and mutmut runs there with the ``[tool.mutmut]`` settings of pyproject.toml,
narrowed to that module (``only_mutate``) and its test files (:data:`MODULES`); mutmut then runs,
per mutant, only the tests that call the mutated function. The checkout itself is never changed
(mutmut writes its mutants under the copy's ``mutants/``), so runs are safe next to other work.
Prints, per module, the mutants killed and surviving, and writes ``WORKDIR/survivors.md`` with the
diff of every survivor. Not part of CI: a full run takes about an hour on two cores.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODULES: dict[str, tuple[str, ...]] = {
    "learners/learner.py": ("tests/test_learner_td.py", "tests/test_learner_networks.py"),
    "learners/mixer.py": ("tests/test_learner_networks.py", "tests/test_learner_td.py"),
    "topo_env/frontends/comm_graph.py": ("tests/test_graph.py", "tests/test_executor.py"),
    "topo_env/engine/executor.py": ("tests/test_executor.py", "tests/test_engine.py"),
    "topo_env/engine/episode.py": ("tests/test_engine.py", "tests/test_env_api.py", "tests/test_orchestrator.py",
                           "tests/test_executor.py", "tests/test_traces.py"),
}
"""Each mutated module and the test files that hold it (fast ones: no training runs)."""


def working_tree_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                         capture_output=True).stdout.decode()
    return [p for p in out.split("\0") if p and (ROOT / p).is_file()]


def toml_array(items) -> str:
    return json.dumps(list(items))  # TOML arrays of plain strings read like JSON ones


def module_config(module: str, tests: tuple[str, ...]) -> str:
    """pyproject.toml's text with its ``[tool.mutmut]`` table narrowed to ``module`` and ``tests``."""
    text = (ROOT / "pyproject.toml").read_text()
    match = re.search(r"^\[tool\.mutmut\]\n(.*?)(?=^\[|\Z)", text, flags=re.S | re.M)
    if match is None:
        raise SystemExit("pyproject.toml has no [tool.mutmut] table")
    kept = [line for line in match.group(1).splitlines()
            if line.strip() and not line.startswith(("only_mutate", "pytest_add_cli_args_test_selection"))]
    table = "\n".join(["[tool.mutmut]", *kept, f"only_mutate = {toml_array([module])}",
                       f"pytest_add_cli_args_test_selection = {toml_array(tests)}", ""])
    return text[:match.start()] + table + "\n" + text[match.end():]


def mutmut(args: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=cwd, text=True, **kwargs)


def run_module(module: str, workdir: Path, children: int) -> dict[str, list[str]]:
    """Mutation-test one module in a fresh copy; returns mutant names by status."""
    copy = workdir / module.replace("/", "__").removesuffix(".py")
    shutil.rmtree(copy, ignore_errors=True)
    for rel in working_tree_files():
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, copy / rel)
    (copy / "pyproject.toml").write_text(module_config(module, MODULES[module]))
    run_mutmut(copy, children)
    survivors = statuses(copy).get("survived", [])
    if survivors:  # once more: a forked worker now and then reports a survivor that a rerun kills
        run_mutmut(copy, children, survivors)
    return statuses(copy)


def run_mutmut(copy: Path, children: int, names: list[str] = ()) -> None:
    done = mutmut(["run", "--max-children", str(children), *names], copy, stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"mutmut run failed in {copy} (exit {done.returncode}); rerun it there to see why")


def statuses(copy: Path) -> dict[str, list[str]]:
    """Mutant names by mutmut's status (killed, survived, no tests, timeout, ...)."""
    listing = mutmut(["results", "--all", "true"], copy, capture_output=True, check=True).stdout
    by_status: dict[str, list[str]] = {}
    for line in listing.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name:
            by_status.setdefault(status, []).append(name)
    return by_status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE",
                        help=f"modules to mutate (default: all of {list(MODULES)})")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/topomarl-mutation"),
                        help="where the copies and the report go (default: /tmp/topomarl-mutation)")
    parser.add_argument("--children", type=int, default=1, help="mutants tested at once (default 1)")
    args = parser.parse_args(argv)
    args.modules = args.modules or list(MODULES)
    unknown = sorted(set(args.modules) - set(MODULES))
    if unknown:
        parser.error(f"unknown module(s) {unknown}: choose from {list(MODULES)}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    report = ["# Surviving mutants", ""]
    print(f"{'module':<24}{'mutants':>9}{'killed':>8}{'survived':>10}{'other':>7}")
    for module in args.modules:
        by_status = run_module(module, args.workdir, args.children)
        total = sum(len(v) for v in by_status.values())
        killed, survived = len(by_status.get("killed", [])), by_status.get("survived", [])
        print(f"{module:<24}{total:>9}{killed:>8}{len(survived):>10}{total - killed - len(survived):>7}", flush=True)
        others = {k: v for k, v in by_status.items() if k not in ("killed", "survived")}
        report += [f"## {module}: {len(survived)} of {total} survive", ""]
        if others:
            report += [f"not killed, not surviving: {json.dumps(others)}", ""]
        copy = args.workdir / module.replace("/", "__").removesuffix(".py")
        for name in survived:
            diff = mutmut(["show", name], copy, capture_output=True).stdout
            body = [line for line in diff.splitlines() if line[:1] in "-+" and line[:3] not in ("---", "+++")]
            report += [f"### {name}", "```diff", *body, "```", ""]
    (args.workdir / "survivors.md").write_text("\n".join(report))
    print(f"diffs of the survivors: {args.workdir / 'survivors.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
