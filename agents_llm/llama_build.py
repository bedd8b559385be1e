"""Build llama.cpp's own C++ server (``llama-server``) from the llama.cpp source that the installed
llama-cpp-python ships (its sdist's ``vendor/llama.cpp``), for any x86-64 CPU::

    python -m agents_llm.llama_build            # ~10 min on 2 cores the first time; then returns at once
    python -m agents_llm.llama_build --print    # only the binary's path ('' and exit code 1 when not built)

The binary goes into a user cache folder, ``~/.cache/topomarl/llama-server/<version>/build/bin/llama-server``
(``$TOPOMARL_LLAMA_SERVER_DIR`` or ``--root`` instead of ``~/.cache/topomarl/llama-server``), next to
``build.json`` (how it was built) and ``build.log`` (the compiler's output). A second call finds the built
binary and returns at once.

The build is portable: no ``-march=native`` (``GGML_NATIVE=OFF``). Where the vendored llama.cpp has them it
uses ``GGML_BACKEND_DL`` + ``GGML_CPU_ALL_VARIANTS``: the CPU kernels are built once per x86-64 level (SSE4.2
... AVX-512, AMX) and the server loads the best one for the CPU it runs on; otherwise a baseline build
(AVX2/FMA/F16C off, so it runs everywhere). Nothing is downloaded besides the sdist (``pip download``): no
CURL, no OpenSSL, no web UI, no tests or examples.

The variant for Intel CPUs with AMX (``sapphirerapids``) has llama.cpp's AMX kernels, which segfault on
some Xeons (llama.cpp issue 20824): :mod:`agents_llm.local_server` starts this server with
``--no-repack`` on such CPUs (:func:`build_has_amx`, :func:`cpu_has_amx`).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

PROG = "python -m agents_llm.llama_build"
PACKAGE = "llama-cpp-python"
BINARY = "llama-server"
ROOT_ENV = "TOPOMARL_LLAMA_SERVER_DIR"
MANIFEST = "build.json"


class BuildError(RuntimeError):
    """The build could not run or failed (one-line message: what, and what to do)."""


def installed_version() -> str:
    """The installed llama-cpp-python's version (the sdist to build from)."""
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        raise BuildError("llama-cpp-python is not installed (its version picks the llama.cpp source): "
                         "pip install 'llama-cpp-python[server]', or give --version") from None


def default_root() -> Path:
    """Where builds go: ``$TOPOMARL_LLAMA_SERVER_DIR``, else ``$XDG_CACHE_HOME`` (``~/.cache``)
    ``/topomarl/llama-server``."""
    if os.environ.get(ROOT_ENV):
        return Path(os.environ[ROOT_ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "topomarl" / "llama-server"


def version_dir(version: str | None = None, root: str | Path | None = None) -> Path:
    return (Path(root).expanduser() if root else default_root()) / (version or installed_version())


def binary_path(version: str | None = None, root: str | Path | None = None) -> Path:
    """Where the build puts ``llama-server`` (it need not exist)."""
    return version_dir(version, root) / "build" / "bin" / BINARY


def read_manifest(version: str | None = None, root: str | Path | None = None) -> dict | None:
    """``build.json`` of a finished build, or None."""
    try:
        return json.loads((version_dir(version, root) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def built_server(version: str | None = None, root: str | Path | None = None) -> Path | None:
    """The built ``llama-server`` of that version, or None when no finished build is there."""
    path = binary_path(version, root)
    if read_manifest(version, root) is not None and path.is_file() and os.access(path, os.X_OK):
        return path
    return None


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX (Linux: ``amx_int8``/``amx_tile`` in /proc/cpuinfo; elsewhere False)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
            break
    return bool({"amx_int8", "amx_tile"} & flags)


def build_has_amx(binary: str | Path) -> bool:
    """Whether a ``llama-server`` may run llama.cpp's AMX kernels: our build says so in build.json
    (the all-variants build has the AMX one); for any other binary, True (not known, so assume it)."""
    binary = Path(binary)
    try:
        manifest = json.loads((binary.parent.parent.parent / MANIFEST).read_text())
        if Path(manifest["binary"]) == binary:
            return bool(manifest["amx"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if binary.parent.is_dir():
        if any(binary.parent.glob("libggml-cpu-sapphirerapids*")):
            return True
    return True


def missing_tools() -> str | None:
    """One line saying what to install when cmake or a C/C++ compiler is missing, else None."""
    if shutil.which("cmake") is None:
        return "cmake is missing: install it (apt-get install cmake, or pip install cmake)"
    cxx = os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    cc = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cxx is None or cc is None or shutil.which(cxx.split()[0]) is None or shutil.which(cc.split()[0]) is None:
        return ("a C/C++ compiler is missing: install one (apt-get install build-essential, i.e. gcc and g++; "
                "or set CC and CXX)")
    return None


def fetch_source(version: str, workdir: Path, sdist: str | Path | None = None, progress=print) -> Path:
    """The ``vendor/llama.cpp`` folder of llama-cpp-python's sdist ``version``, unpacked under
    ``workdir`` (``sdist``: a local ``.tar.gz`` instead of ``pip download``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if sdist is None:
        progress(f"downloading the {PACKAGE}=={version} sdist (pip download)")
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
               f"{PACKAGE}=={version}", "-d", str(workdir)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(workdir.glob("llama_cpp_python-*.tar.gz")) + sorted(workdir.glob("llama-cpp-python-*.tar.gz"))
        if result.returncode != 0 or not found:
            last = (result.stderr.strip().splitlines() or ["no sdist"])[-1]
            raise BuildError(f"could not download the {PACKAGE}=={version} sdist ({last}); download it elsewhere "
                             f"(pip download --no-binary :all: --no-deps {PACKAGE}=={version}) and give it with --sdist")
        sdist = found[0]
    sdist = Path(sdist)
    if not sdist.is_file():
        raise BuildError(f"no sdist at {sdist}: give the path of llama_cpp_python-{version}.tar.gz")
    progress(f"unpacking {sdist.name}")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        if sys.version_info >= (3, 12):
            tar.extractall(workdir, members=members, filter="data")
        else:
            tar.extractall(workdir, members=members)
    found = [p for p in workdir.glob("*/vendor/llama.cpp") if (p / "CMakeLists.txt").is_file()]
    if not found:
        raise BuildError(f"{sdist} has no vendor/llama.cpp: is it llama-cpp-python's sdist?")
    return found[0]


def supports_all_variants(src: Path) -> bool:
    """Whether the llama.cpp source can build every x86-64 CPU variant as loadable backends."""
    try:
        text = (src / "ggml" / "CMakeLists.txt").read_text()
    except OSError:
        return False
    return "GGML_CPU_ALL_VARIANTS" in text and "GGML_BACKEND_DL" in text


def cmake_configure_args(src: Path, build: Path, all_variants: bool, generator: str | None) -> list[str]:
    """cmake's configure command: portable (no -march=native), only what llama-server needs."""
    args = ["cmake", "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            "-DGGML_NATIVE=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
            "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
            "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
            "-DLLAMA_BUILD_APP=OFF", "-DGGML_RPC=OFF", "-DLLAMA_FATAL_WARNINGS=OFF"]
    if all_variants:
        args += ["-DBUILD_SHARED_LIBS=ON", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"]
    else:  # a baseline build: SSE4.2 at most, so any x86-64 CPU runs it
        args += ["-DBUILD_SHARED_LIBS=ON", "-DGGML_AVX=OFF", "-DGGML_AVX2=OFF", "-DGGML_FMA=OFF",
                 "-DGGML_F16C=OFF", "-DGGML_BMI2=OFF", "-DGGML_AVX512=OFF"]
    if generator:
        args += ["-G", generator]
    return args


_STEP = re.compile(r"^\[\s*(\d+)(?:/(\d+)|%)\]")


def _run_logged(cmd: list[str], log, progress, label: str, every_s: float = 15.0) -> int:
    """Run ``cmd`` with its output appended to ``log``; a progress line at most every ``every_s``."""
    log.write(("$ " + " ".join(cmd) + "\n").encode())
    log.flush()
    start = last = time.monotonic()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        for raw in proc.stdout:
            log.write(raw)
            now = time.monotonic()
            if now - last >= every_s:
                match = _STEP.match(raw.decode(errors="replace"))
                if match:
                    done, total = match.group(1), match.group(2)
                    where = f"step {done}/{total}" if total else f"{done}%"
                    progress(f"{label}: {where}, {now - start:.0f} s")
                    log.flush()
                    last = now
        log.flush()
        return proc.wait()


def _first_error(path: Path, limit: int = 200) -> str:
    """The first line of the build log that says what went wrong (a compiler's or cmake's error)."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    errors = [ln for ln in lines if re.search(r"error|failed", ln, re.IGNORECASE)]
    line = (errors or lines or ["no output"])[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def build(version: str | None = None, root: str | Path | None = None, jobs: int | None = None,
          sdist: str | Path | None = None, all_variants: bool | None = None, force: bool = False,
          progress=print) -> Path:
    """Build ``llama-server`` (if not built yet) and return its path. ``all_variants``: None picks
    GGML_CPU_ALL_VARIANTS where the source supports it. Raises :class:`BuildError` (one line)."""
    version = version or installed_version()
    if not force:
        found = built_server(version, root)
        if found is not None:
            return found
    problem = missing_tools()
    if problem:
        raise BuildError(problem)
    vdir = version_dir(version, root)
    vdir.mkdir(parents=True, exist_ok=True)
    (vdir / MANIFEST).unlink(missing_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="topomarl-llama-src-") as tmp:
        src_dir = vdir / "src"
        if not (src_dir / "CMakeLists.txt").is_file():
            unpacked = fetch_source(version, Path(tmp), sdist, progress)
            shutil.rmtree(src_dir, ignore_errors=True)
            shutil.copytree(unpacked, src_dir, symlinks=True)
    variants = supports_all_variants(src_dir) if all_variants is None else all_variants
    build_dir = vdir / "build"
    generator = "Ninja" if shutil.which("ninja") and not (build_dir / "Makefile").exists() else None
    jobs = jobs or os.cpu_count() or 2
    log_path = vdir / "build.log"
    progress(f"building {BINARY} of llama.cpp from {PACKAGE} {version} in {vdir} "
             f"({'every x86-64 CPU variant' if variants else 'baseline x86-64'}, {jobs} jobs; log: {log_path}); "
             "this takes minutes")
    with open(log_path, "wb") as log:
        rc = _run_logged(cmake_configure_args(src_dir, build_dir, variants, generator), log, progress, "configure")
        if rc == 0:
            rc = _run_logged(["cmake", "--build", str(build_dir), "--config", "Release", "--target", BINARY,
                              "-j", str(jobs)], log, progress, "compile")
    binary = build_dir / "bin" / BINARY
    if rc != 0 or not binary.is_file():
        raise BuildError(f"building {BINARY} failed (exit code {rc}: {_first_error(log_path)}); read {log_path}")
    seconds = time.monotonic() - started
    manifest = {"version": version, "binary": str(binary), "all_variants": variants,
                "amx": bool(variants and any(binary.parent.glob("libggml-cpu-sapphirerapids*"))),
                "cmake": cmake_configure_args(src_dir, build_dir, variants, generator), "seconds": round(seconds, 1),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (vdir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    progress(f"built {binary} in {seconds / 60:.1f} min")
    return binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=f"Build llama.cpp's {BINARY} from the installed "
                                     f"{PACKAGE}'s sdist, for any x86-64 CPU (idempotent).")
    parser.add_argument("--version", default=None, help=f"the {PACKAGE} version (default: the installed one)")
    parser.add_argument("--root", default=None, help=f"the cache folder (default: ${ROOT_ENV} or "
                        "~/.cache/topomarl/llama-server)")
    parser.add_argument("--sdist", default=None, help="a local llama_cpp_python-VERSION.tar.gz instead of pip download")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: the CPU count)")
    parser.add_argument("--baseline", action="store_true", help="one portable CPU backend instead of every variant")
    parser.add_argument("--force", action="store_true", help="build again even where a build exists")
    parser.add_argument("--print", action="store_true", help="only print the built binary's path (exit 1 if none)")
    args = parser.parse_args(argv)
    try:
        if args.print:
            found = built_server(args.version, args.root)
            print(found or "")
            return 0 if found else 1
        if args.jobs is not None and args.jobs < 1:
            raise BuildError(f"--jobs {args.jobs}: give a positive number of compile jobs")
        binary = build(args.version, args.root, args.jobs, args.sdist, False if args.baseline else None, args.force,
                       progress=lambda line: print(f"{PROG}: {line}", file=sys.stderr, flush=True))
    except BuildError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
