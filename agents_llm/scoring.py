"""Scorers for the real LLM teams: multiple choice, math (math-verify) and code (sandbox).

* :func:`extract_choice` / :func:`score_multiple_choice`: the option letter the model
  committed to ("Answer: C", "the answer is (B)", "**D**", "\\boxed{C}", ...; the last
  commitment wins), never a stray capital in prose.
* :func:`extract_math_answer` / :func:`score_math`: the last ``\\boxed{...}`` (else an
  "answer: X" line; for a task whose ``metadata["answer_format"]`` is ``"number"``, else the last
  number in the reply), checked against the reference with ``math_verify`` in a worker
  process under our own wall-clock timeout (math-verify's own ``signal.alarm`` timeouts are
  off, so this works from any thread), with a numeric fallback.
* :func:`score_code`: prompt + completion + hidden tests run by
  :func:`agents_llm.sandbox.execute`.
* :func:`score`: dispatch on the task.

Every scorer returns 0.0 (never raises) for a model output with no usable answer.
"""
from __future__ import annotations

import ast
import atexit
import json
import math
import os
import re
import selectors
import subprocess
import sys
import textwrap
import threading
import time
from fractions import Fraction
from typing import TYPE_CHECKING

from topo_env.engine.tasks import Task

if TYPE_CHECKING:  # pragma: no cover
    from agents_llm.sandbox import ExecutionResult

__all__ = [
    "extract_choice",
    "score_multiple_choice",
    "extract_math_answer",
    "last_number",
    "wants_number",
    "math_equal",
    "score_math",
    "strip_code_fences",
    "build_program",
    "score_code",
    "score",
    "scorable",
    "shutdown_math_workers",
]


# =========================================================================== multiple choice
_MD = r"(?:\*\*|__|\*|_)?"  # optional markdown emphasis around a letter
_LEAD = (
    r"(?i:"
    r"(?:final|correct|right|best|my)\s+(?:answer|option|choice)(?:\s+(?:choice|option))?"
    r"|answer"
    r"|(?:I|we)\s*(?:would\s+|will\s+|'ll\s+|'d\s+)?(?:choose|select|pick|go\s+with)"
    r")"
)
_VERB = (
    r"(?i:\s*(?:\*\*|__)?\s*"
    r"(?:(?:is|would\s+be|will\s+be|should\s+be|must\s+be)"
    r"(?:\s+(?:therefore|thus|hence|clearly|definitely|indeed|then|probably|likely))?\s*:?"
    r"|:|=|-|\u2014|\u2013)?"
    r"\s*(?:\*\*|__)?\s*(?:\$\s*)?(?:(?:option|choice|letter)\s+)?)"
)
_TEXT_AROUND = r"(?:\\text(?:bf)?\{\s*)?"


def _letter_class(n_choices: int) -> str:
    n = max(1, min(int(n_choices), 26))
    return f"[A-{chr(ord('A') + n - 1)}]"


def _patterns(n_choices: int) -> list[tuple[str, re.Pattern[str]]]:
    L = _letter_class(n_choices)
    lower = L.lower()
    return [
        # "the answer is (B)", "Answer: C", "Final answer: **E**", "I choose D", "answer is $C$"
        (
            "phrase",
            re.compile(
                rf"\b{_LEAD}{_VERB}"
                rf"(?:(?P<open>[\(\[])\s*{_MD}(?P<L1>{L}|{lower}){_MD}\s*[\)\]]"
                rf"|{_MD}(?P<L2>{L})(?![A-Za-z0-9']){_MD})"
                rf"(?P<after>[^\n]{{0,30}})"
            ),
        ),
        # "**D**", "**(D)**", "**D.**", "__C__"
        ("bold", re.compile(rf"(?:\*\*|__)\s*\(?(?P<L2>{L})\)?[.:]?\s*(?:\*\*|__)(?P<after>[^\n]{{0,30}})")),
        # a line that is only the letter: "C", "(C)", "C.", "> **C**"
        ("alone", re.compile(rf"(?m)^[ \t>#*_-]*\(?(?P<L2>{L})\)?[.:]?[ \t*_]*$(?P<after>)")),
    ]


_CONNECTORS = {"because", "since", "as", "which", "and", "so", "for", "is", "was", "being", "here", "then"}


def _word_letter_ok(letter: str, after: str) -> bool:
    """``A`` and ``I`` are English words: after "the answer is A" accept only an end,
    punctuation, or a connector word ("because", "since", ...), not "A careful reading"."""
    if letter not in ("A", "I"):
        return True
    m = re.match(r"\s*([A-Za-z][\w'-]*)", after)
    if not m:
        return True  # end of line, punctuation, markdown, brackets
    if after[: m.start(1)].strip():
        return True  # punctuation between the letter and the next word ("A, because")
    return m.group(1).lower() in _CONNECTORS


def _boxed_contents(text: str) -> list[tuple[int, str]]:
    """(start, content) of every ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces."""
    out = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
            i += 1
        if depth == 0:
            out.append((m.start(), text[m.end() : i - 1]))
    return out


def extract_choice(text: str | None, n_choices: int = 10) -> str | None:
    """The option letter the model committed to, or ``None``.

    Commitments: an answer phrase followed by the letter ("Answer: C", "the answer is (B)",
    "Final answer: **E**", "the correct option is D", "I choose B"), a bold letter
    ("**D**"), ``\\boxed{C}``, or a line holding only the letter. The last commitment in the
    text wins ("The answer is B. ... Actually, the answer is D." gives D). Only the first
    ``n_choices`` letters count; capitals in prose ("I think A careful reading ...") do not.
    """
    if not text:
        return None
    n = max(1, min(int(n_choices), 26))
    letters = {chr(ord("A") + i) for i in range(n)}
    found: list[tuple[int, str]] = []

    for kind, pat in _patterns(n_choices):
        for m in pat.finditer(text):
            letter = m.groupdict().get("L1") or m.group("L2")
            if letter is None:
                continue
            letter = letter.upper()
            after = m.group("after") or ""
            if kind == "phrase":
                bracketed = m.groupdict().get("L1") is not None
                if not bracketed and not _word_letter_ok(letter, after):
                    continue
            elif kind == "bold":
                # an option listing ("**A**: 3", "**B.** four") is not a commitment
                line_start = text.rfind("\n", 0, m.start()) + 1
                at_line_start = re.fullmatch(r"[ \t>*+-]*(?:\d+[.)])?[ \t]*", text[line_start : m.start()]) is not None
                if at_line_start and re.match(r"\s*[:.)\-\u2013\u2014]\s*\S", after):
                    continue
            found.append((m.start(), letter))

    for start, content in _boxed_contents(text):
        c = re.sub(r"\\text(?:bf)?\s*\{([^{}]*)\}", r"\1", content)
        c = re.sub(r"^\s*(?:option|choice)\s+", "", c.strip(), flags=re.I)
        m = re.fullmatch(r"\(?\s*([A-Za-z])\s*\)?\s*(?:[.:)]\s*.*)?", c, flags=re.S)
        if m and m.group(1).upper() in letters and (m.group(1).isupper() or c.startswith("(")):
            found.append((start, m.group(1).upper()))

    if not found:
        return None
    return max(found, key=lambda x: x[0])[1]


def score_multiple_choice(text: str | None, reference_letter: str, n_choices: int = 10) -> float:
    """1.0 when the committed letter (:func:`extract_choice`) is ``reference_letter``, else 0.0."""
    ref = str(reference_letter).strip().strip("()").upper()
    if len(ref) == 1 and "A" <= ref <= "Z":  # a reference beyond n_choices still counts
        n_choices = max(n_choices, ord(ref) - ord("A") + 1)
    return 1.0 if extract_choice(text, n_choices) == ref else 0.0


# =========================================================================== math
_ANSWER_LINE = re.compile(
    r"(?i)(?:final\s+answer|the\s+answer|answer)\s*(?:\*\*|__)?\s*"
    r"(?:is|would\s+be|should\s+be|=|:)\s*(?:\*\*|__)?\s*:?\s*(?P<ans>[^\n]+)"
)


def _clean_answer(ans: str) -> str:
    ans = ans.strip()
    for _ in range(3):
        ans = ans.strip().strip("*_`").strip()
        if ans.startswith("$$") and ans.endswith("$$") and len(ans) > 4:
            ans = ans[2:-2]
        elif ans.startswith("$") and ans.endswith("$") and len(ans) > 2:
            ans = ans[1:-1]
        elif ans.startswith("\\(") and ans.endswith("\\)"):
            ans = ans[2:-2]
        elif ans.startswith("\\[") and ans.endswith("\\]"):
            ans = ans[2:-2]
        ans = re.sub(r"[.\s]+$", "", ans) if not re.search(r"\d\.$", ans) else ans.rstrip(". ")
    return ans.strip()


_TEAM_FORMAT_LINE = re.compile(r"(?i)\b(?:confidence|need|offer)\s*[:=][^\n]*")
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")


def last_number(text: str | None) -> str | None:
    """The last number in ``text`` ("1,234" -> "1234"), leaving out the team's format lines
    (from ``Confidence:``, ``NEED:`` or ``OFFER:`` to the line's end); None when there is none. This is lm-evaluation-harness's
    GSM8K "flexible-extract" rule (the last number wins), for models that state a number without
    the requested format."""
    found = _NUMBER.findall(_TEAM_FORMAT_LINE.sub("", text or ""))
    return found[-1].replace(",", "") if found else None


def extract_math_answer(text: str | None, number_fallback: bool = False) -> str | None:
    """The model's final math answer: the content of the last ``\\boxed{...}`` (balanced
    braces), else the last "final answer: X" / "the answer is X" / "answer: X" (rest of
    the line, without markdown, ``$`` and a closing period), else with ``number_fallback``
    :func:`last_number`; ``None`` when none is there."""
    if not text:
        return None
    boxed = _boxed_contents(text)
    if boxed:
        ans = boxed[-1][1].strip()
        return ans or None
    matches = list(_ANSWER_LINE.finditer(text))
    for m in reversed(matches):
        ans = _clean_answer(m.group("ans"))
        if ans:
            return ans
    return last_number(text) if number_fallback else None


def wants_number(task: Task) -> bool:
    """Whether ``task`` asks for a bare number (``metadata["answer_format"] == "number"``), so an
    unformatted reply is read by :func:`last_number`."""
    return task.metadata.get("answer_format") == "number"


_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]+?)\s*\}\s*\{\s*([^{}]+?)\s*\}")
_LATEX_FRAC_SHORT = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)")


def _to_number(s: str) -> Fraction | float | None:
    """A number from a short answer string, without evaluating anything: ``"0.5"``,
    ``"1/2"``, ``"\\frac{1}{2}"``, ``"x = 3"``, ``"1,000"``, ``"50\\%"``, ``"-2.5e3"``."""
    s = s.strip()
    if len(s) > 200:
        return None
    s = re.sub(r"\\text\s*\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\(?:left|right|,|;|!|quad|qquad|displaystyle)", "", s)
    s = s.replace("$", "").replace("\\%", "").replace("%", "").replace("\\$", "")
    if "=" in s:
        s = s.rsplit("=", 1)[1]
    s = s.strip().rstrip(".").strip()
    s = _LATEX_FRAC.sub(r"(\1)/(\2)", s)
    s = _LATEX_FRAC_SHORT.sub(r"(\1)/(\2)", s)
    s = s.replace("{", "").replace("}", "").replace(" ", "")
    if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    neg = False
    if s.startswith("-(") or s.startswith("+("):
        neg, s = s[0] == "-", s[1:]
    m = re.fullmatch(r"\(?([-+]?[\d.]+(?:[eE][-+]?\d+)?)\)?/\(?([-+]?[\d.]+(?:[eE][-+]?\d+)?)\)?", s)
    try:
        if m:
            num, den = Fraction(m.group(1)), Fraction(m.group(2))
            if den == 0:
                return None
            value: Fraction | float = num / den
        elif re.fullmatch(r"\(?[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d{1,4})?\)?", s):
            value = Fraction(s.strip("()"))
        else:
            return None
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return -value if neg else value


def _numbers_close(a: str, b: str) -> bool:
    x, y = _to_number(a), _to_number(b)
    if x is None or y is None:
        return False
    if x == y:
        return True
    try:
        return math.isclose(float(x), float(y), rel_tol=1e-6, abs_tol=0.0)
    except OverflowError:
        return False


def _normalize_text(s: str) -> str:
    s = re.sub(r"\\text(?:bf|rm)?\s*\{([^{}]*)\}", r"\1", s)
    s = s.replace("$", "").replace("\\!", "").replace("\\,", "")
    return re.sub(r"\s+", " ", s).strip().strip(".").strip().lower()


# ---- math-verify in a worker process (agents_llm/math_verify_worker.py) -------------
# The worker runs with ``-m`` from the directory that holds this package, so it is the same code as this
# module's even when the package is used from a checkout that is not installed.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STARTUP_TIMEOUT_S = 120.0


class _MathWorker:
    """One ``python -m agents_llm.math_verify_worker`` child, spoken to by JSON lines."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agents_llm.math_verify_worker"],
            cwd=_PACKAGE_PARENT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        self._buf = b""
        hello = self._read_line(_STARTUP_TIMEOUT_S)
        if hello is None or not json.loads(hello).get("ready"):
            self.kill()
            raise RuntimeError("math-verify worker did not start (is math-verify installed?)")

    def _read_line(self, timeout_s: float) -> bytes | None:
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:  # epoll: no FD_SETSIZE limit, unlike select()
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None  # the worker died
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def verify(self, gold: str, pred: str, timeout_s: float) -> bool | None:
        """True / False from math-verify; None on error or timeout (then the worker is dead)."""
        try:
            self.proc.stdin.write((json.dumps({"gold": gold, "pred": pred}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            self.kill()
            return None
        line = self._read_line(timeout_s)
        if line is None:
            self.kill()
            return None
        try:
            reply = json.loads(line)
        except ValueError:
            self.kill()
            return None
        return bool(reply["result"]) if reply.get("ok") else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:  # pragma: no cover
                pass


class _WorkerPool:
    """Idle math workers shared by all threads; at most ``max_workers`` alive at once."""

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self._idle: list[_MathWorker] = []
        self._busy = 0
        self._cond = threading.Condition()
        self.unavailable = False  # math-verify could not be started: numeric fallback only

    def acquire(self) -> _MathWorker | None:
        with self._cond:
            while True:
                if self.unavailable:
                    return None
                while self._idle:
                    w = self._idle.pop()
                    if w.alive():
                        self._busy += 1
                        return w
                    w.kill()
                if self._busy < self.max_workers:
                    self._busy += 1
                    break
                self._cond.wait()
        try:
            return _MathWorker()
        except (RuntimeError, OSError):
            with self._cond:
                self._busy -= 1
                self.unavailable = True
                self._cond.notify_all()
            return None

    def release(self, w: _MathWorker) -> None:
        with self._cond:
            self._busy -= 1
            if w.alive():
                self._idle.append(w)
            self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
        for w in idle:
            w.kill()


_POOL = _WorkerPool(max_workers=max(2, min(8, os.cpu_count() or 2)))
atexit.register(_POOL.shutdown)


def shutdown_math_workers() -> None:
    """Stop the idle math-verify worker processes (they restart on demand)."""
    _POOL.shutdown()


def _as_latex(s: str) -> str:
    s = s.strip()
    if "\\boxed" in s or s.startswith("$"):
        return s
    return "\\boxed{" + s + "}"


def _math_verify(gold: str, pred: str, timeout_s: float) -> bool | None:
    w = _POOL.acquire()
    if w is None:
        return None
    try:
        return w.verify(_as_latex(gold), _as_latex(pred), timeout_s)
    finally:
        _POOL.release(w)


def math_equal(answer: str, reference: str, timeout_s: float = 5.0) -> bool:
    """Whether an extracted answer equals the reference: math-verify (in a worker process,
    at most ``timeout_s`` seconds of its work), else the same number (relative tolerance
    1e-6), else the same normalised text."""
    if _normalize_text(answer) == _normalize_text(reference):
        return True
    if _math_verify(reference, answer, timeout_s):
        return True
    return _numbers_close(answer, reference)


def score_math(text: str | None, reference: str | float | int, timeout_s: float = 5.0,
               number_fallback: bool = False) -> float:
    """1.0 when the model's final answer (:func:`extract_math_answer`) equals ``reference``
    (:func:`math_equal`), else 0.0. Safe to call from any thread: math-verify runs in a worker
    process with its signal timeouts off and is killed after ``timeout_s`` seconds."""
    if reference is None:
        return 0.0
    answer = extract_math_answer(text, number_fallback)
    if answer is None:
        return 0.0
    return 1.0 if math_equal(answer, str(reference), timeout_s) else 0.0


# =========================================================================== code
_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def strip_code_fences(text: str, entry_point: str | None = None) -> str:
    """The code in a markdown answer: the fenced block that defines ``entry_point`` (else
    the only block, else all Python blocks joined); the text unchanged when it has no fence."""
    if "```" not in text:
        return text
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    if not blocks:
        return text.replace("```", "")
    if entry_point:
        for _, body in blocks:
            if re.search(rf"(?m)^\s*(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", body):
                return body
    if len(blocks) == 1:
        return blocks[0][1]
    py = [body for lang, body in blocks if lang in ("", "python", "py", "python3")]
    return "\n\n".join(py or [b for _, b in blocks])


def _defines_top_level(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in tree.body
    )


def _is_python(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _entry_point(task: Task) -> str | None:
    ep = task.metadata.get("entry_point")
    if ep:
        return str(ep)
    try:
        tree = ast.parse(task.prompt)
    except (SyntaxError, ValueError):
        return None
    defs = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return defs[-1] if defs else None


def build_program(task: Task, completion: str) -> str:
    """The program :func:`score_code` runs: prompt, completion, then the task's tests.

    * Markdown fences are stripped from the completion.
    * The prompt is kept only when it is Python (HumanEval: imports, helpers, signature and
      docstring); a natural-language prompt is left out.
    * When the completion defines ``def <entry_point>`` at top level it comes after the
      whole prompt, so the model's definition replaces the prompt's stub while the prompt's
      imports and helper functions stay (the reference harness would drop them).
    * Otherwise the completion continues the prompt's function body; a body written flush
      left is indented to fit.
    """
    if task.tests is None:
        raise ValueError(f"task {task.id!r} has no tests")
    entry_point = _entry_point(task)
    code = strip_code_fences(completion or "", entry_point)
    prompt = task.prompt if _is_python(task.prompt) else ""
    if prompt and not (entry_point and _defines_top_level(code, entry_point)):
        # continuation of the prompt's last function: make sure the body is indented
        lines = [ln for ln in code.splitlines() if ln.strip()]
        if lines and not lines[0][0].isspace() and _ends_in_function(prompt):
            starts_block = re.match(r"(def|class|async|import|from|@|if __name__)\b", lines[0])
            if not starts_block:
                code = textwrap.indent(code, "    ")
        return prompt.rstrip("\n") + "\n" + code.rstrip() + "\n\n\n" + task.tests.strip("\n") + "\n"
    head = prompt.rstrip("\n") + "\n\n\n" if prompt else ""
    return head + code.strip("\n") + "\n\n\n" + task.tests.strip("\n") + "\n"


def _ends_in_function(prompt: str) -> bool:
    try:
        tree = ast.parse(prompt)
    except (SyntaxError, ValueError):
        return False
    return bool(tree.body) and isinstance(tree.body[-1], (ast.FunctionDef, ast.AsyncFunctionDef))


def score_code(completion: str | None, task: Task, timeout_s: float = 10.0) -> tuple[float, ExecutionResult]:
    """Run the candidate against the task's tests in the sandbox; 1.0 when the program exits
    cleanly in time, else 0.0. Function tasks (HumanEval style) use :func:`build_program`;
    LiveCodeBench tasks (stdin and call-based cases) feed the candidate to their harness,
    which limits every case itself; the sandbox's wall limit is then raised to cover all
    cases, ``(n_tests + 1) * per_case_timeout_s``, so that it only catches a stuck harness."""
    from agents_llm.sandbox import execute  # lazy: the sandbox is optional at import time

    if task.metadata.get("test_harness") == "livecodebench":
        program = build_test_program(task, completion or "")
        per_case = float(task.metadata.get("per_case_timeout_s", 0.0))
        timeout_s = max(timeout_s, (int(task.metadata.get("n_tests", 0)) + 1) * per_case)
    else:
        program = build_program(task, completion or "")
    result = execute(program, timeout_s=timeout_s)
    return (1.0 if result.ok else 0.0), result


# =========================================================================== dispatch
def scorable(task: Task) -> bool:
    """Whether :func:`score` can score ``task``: a code task needs its tests, any other its reference
    (a user's own question may have neither)."""
    return task.tests is not None if task.domain == "code" else task.reference is not None


def score(task: Task, text: str | None, *, math_timeout_s: float = 5.0, code_timeout_s: float = 10.0) -> float:
    """Score a model's final output on a task, in [0, 1].

    * ``code``: :func:`score_code` (the program must pass the task's tests);
    * a task with ``metadata["choices"]`` (multiple choice, usually ``reasoning``):
      :func:`score_multiple_choice` against the reference letter;
    * ``math``, and ``reasoning`` without choices: :func:`score_math` (math-verify, number
      or normalised text; the last number of an unformatted reply where :func:`wants_number`).

    An output with no stated answer scores 0.0.
    """
    if task.domain == "code":
        return score_code(text, task, timeout_s=code_timeout_s)[0]
    if task.reference is None:
        raise ValueError(f"task {task.id!r} ({task.domain}) has no reference answer")
    choices = task.metadata.get("choices")
    if choices:
        return score_multiple_choice(text, task.reference, n_choices=len(choices))
    if task.domain in ("math", "reasoning"):
        return score_math(text, task.reference, timeout_s=math_timeout_s, number_fallback=wants_number(task))
    raise ValueError(f"unknown domain {task.domain!r} for task {task.id!r}")


def build_test_program(task: Task, completion: str | None) -> str:
    """The program to run for a LiveCodeBench task: ``CANDIDATE_SOURCE = <code>`` (markdown
    fences stripped from ``completion``) followed by the task's harness (``task.tests``)."""
    if task.tests is None:
        raise ValueError(f"task {task.id!r} has no tests")
    code = strip_code_fences(completion or "")
    return f"CANDIDATE_SOURCE = {code!r}\n" + task.tests

