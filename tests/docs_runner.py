"""The docs runner: the code blocks of README.md and docs/*.md, read with markdown-it-py, run as a
user runs them, their shown outputs compared (tests/test_docs_run.py).

Every fenced block names its language. A ``python``, ``bash``, ``sh``, ``console`` or ``pycon``
block says, in an HTML comment right before it, how it is run or why not; nothing unmarked is
run (a new block must be looked at first). Other languages (``text``, ``yaml``, ``toml``,
``json``) are shown, not run. The comment is ``<!-- docs: DIRECTIVE -->``, one directive to a
comment (a block may have several comments):

- ``run``: run in make test's suite (seconds); ``slow``: in the slow suite (it needs minutes);
  ``integrations``: in the integrations suite (it needs inspect-scout or control-arena);
- ``setup``: on a ``slow`` block, a later tier's blocks read what it makes, so the integrations
  suite runs it too (its other slow blocks run only in the slow suite: the two suites share one
  Inspect version, and running them twice bought nothing but minutes);
- ``fixture NAME``: first make what the block reads (``FIXTURES``: ``demo-monitor`` runs
  ``make demo``'s monitor command, from the Makefile, into ``runs/demo-monitor``);
- ``file NAME``: the block is the file NAME, written into the document's working folder where it
  stands (a ``python`` file block is imported by later blocks, not run itself);
- ``background URL``: a ``bash`` block that starts a server: run in the background until the
  document's blocks are done, the next block run once URL answers;
- ``skip REASON``: not run, and why (the reason is required);
- ``tested-by tests/FILE.py``: run by that test, which must name the document;
- on an output block, ``not-compared REASON``.

Blocks run in document order, each in a fresh process in one working folder per document and
suite, or per ``## `` section in the integrations suite (test_docs_run.BY_SECTION: a section's
blocks, with the document's default, setup and file blocks; files written by one block are read
by the next; Inspect's and Scout's progress displays
off, so a block's stdout is what it prints): ``python`` as ``python BLOCK.py`` with
the working folder and the checkout on ``PYTHONPATH``, ``bash``/``sh`` with ``bash -e`` (a line
``export NAME=...``, a placeholder for a value of the reader's, keeps the runner's value: every
block runs with ``$CALIMON_API_KEY`` set to a fixed test key). A
``text`` or untagged block that follows a run block with nothing between them is that block's
expected output, compared with its stdout after this normalisation (both sides): trailing
spaces and blank lines dropped, Inspect's start-up lines (``inspect_ai vX`` and the hooks it
enabled) dropped, the working folder's path written ``.``, durations (``12.3 s``,
``4 min``) written ``<time>``, Inspect's 22-character message ids written ``<id>``; then an
expected line ``...`` matches any number of lines and ``...`` inside a line any text.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
RUN_LANGS = {"python", "bash", "sh", "console", "pycon"}
SHOWN_LANGS = {"text", "yaml", "toml", "json", "html", "diff"}
TIERS = ("default", "slow", "integrations")
DIRECTIVES = {"run", "slow", "integrations", "setup", "fixture", "file", "skip", "tested-by",
              "not-compared", "background"}
VALUED = {"fixture", "file", "skip", "tested-by", "not-compared", "background"}
API_KEY = "docs-runner-key-0123456789abcdef"  # $CALIMON_API_KEY of every block
MARKER = re.compile(r"<!--\s*docs:(.*?)-->", re.S)
TIMEOUT = 1800


class DocsError(Exception):
    """A block the runner cannot accept (bad marker, untagged fence): names the file and line."""


@dataclass
class Block:
    """One fenced block: where it is, its language and text, its directives and its output."""

    doc: str
    line: int
    lang: str
    text: str
    directives: dict[str, str] = field(default_factory=dict)
    output: Block | None = None
    section: str = ""  # the ``## `` heading the block stands under

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def tier(self) -> str:
        return next((t for t in reversed(TIERS) if t in self.directives), "default")

    @property
    def runs(self) -> bool:
        said = set(self.directives)
        return (self.lang in RUN_LANGS and bool({"run", *TIERS} & said)
                and not {"file", "skip", "tested-by"} & said)


def docs() -> list[Path]:
    """README.md and every docs/*.md, in a fixed order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _directive(comment: str, where: str) -> tuple[str, str]:
    word, _, rest = comment.strip().partition(" ")
    if word not in DIRECTIVES:
        raise DocsError(f"{where}: unknown docs directive {word!r} (known: "
                        f"{', '.join(sorted(DIRECTIVES))})")
    if word in VALUED and not rest.strip():
        raise DocsError(f"{where}: the docs directive {word!r} needs a value "
                        "(a name, a path or a reason)")
    return word, rest.strip()


def parse(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file with their directives; an output block is attached
    to the run block it follows (and not listed)."""
    doc = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    tokens = MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8"))
    blocks: list[Block] = []
    pending: dict[str, str] = {}
    previous, section = None, ""
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.tag == "h2":
            section = tokens[i + 1].content
        if tok.type == "html_block" and MARKER.search(tok.content):
            where = f"{doc}:{tok.map[0] + 1}"
            pending.update(_directive(c, where) for c in MARKER.findall(tok.content))
            continue
        if tok.type != "fence":
            previous = None  # prose between two blocks: the second is not the first's output
            continue
        block = Block(doc, tok.map[0] + 1, tok.info.split()[0] if tok.info.strip() else "",
                      tok.content, pending, section=section)
        pending = {}
        follows = previous
        if (follows is not None and follows.lang in ("python", "bash", "sh")
                and block.lang in ("", "text") and follows.output is None
                and "file" not in follows.directives):
            follows.output = block
        else:
            blocks.append(block)
        previous = block
    return blocks


def problems(block: Block) -> list[str]:
    """What is wrong with a block's tagging: an untagged fence, a skip without a reason, a
    tested-by naming a test that does not exist or does not read the document."""
    out = []
    if not block.lang:
        out.append(f"{block.where}: a fenced block without a language: tag it (bash, console, "
                   "python, text, ...) so the docs runner knows whether a user runs it")
    said = {"run", *TIERS, "file", "skip", "tested-by"} & set(block.directives)
    if block.lang in RUN_LANGS and len(said) != 1:
        out.append(f"{block.where}: a {block.lang} block needs one docs directive before it: "
                   "<!-- docs: run --> (or slow, integrations, file NAME, skip REASON, "
                   "tested-by TEST)" if not said else
                   f"{block.where}: docs directives {sorted(said)} contradict each other")
    if "setup" in block.directives and block.tier != "slow":
        out.append(f"{block.where}: setup marks a slow block that a later tier reads; this "
                   f"block is {block.tier}")
    test = block.directives.get("tested-by")
    if test:
        path = ROOT / test
        if not path.is_file():
            out.append(f"{block.where}: tested-by {test}: no such file")
        elif Path(block.doc).name not in path.read_text(encoding="utf-8"):
            out.append(f"{block.where}: tested-by {test}: that test does not name "
                       f"{Path(block.doc).name}")
    return out


_TIME = re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s|min|h)\b")
_ID = re.compile(r"\b[0-9A-Za-z]{22}\b")


# Inspect's start-up lines (its version and the hooks enabled, calimon's among them), printed
# once per process before the first eval whatever the display: not the block's own output.
_INSPECT_BANNER = re.compile(r"^inspect_ai v\S+\n(?:- .*\n(?:  .*\n)*)+\n+", re.M)


def normalise(text: str, work: Path) -> list[str]:
    """The stated normalisation of an output, line by line (see the module docstring)."""
    text = _INSPECT_BANNER.sub("", text.replace(str(work), "."))
    lines = [_ID.sub("<id>", _TIME.sub("<time>", ln.rstrip())) for ln in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _line_matches(expected: str, got: str) -> bool:
    if "..." not in expected:
        return expected == got
    pattern = ".*".join(re.escape(p) for p in expected.split("..."))
    return re.fullmatch(pattern, got) is not None


def matches(expected: list[str], got: list[str]) -> bool:
    """Does ``got`` match ``expected``, where an expected line ``...`` stands for any lines?"""
    if not expected:
        return not got
    if expected[0] == "...":
        return any(matches(expected[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and _line_matches(expected[0], got[0]) and matches(expected[1:], got[1:])


def environment(work: Path) -> dict[str, str]:
    """What a block runs with: the checkout's calimon and the working folder importable, the
    venv's commands first on PATH, no network for models, Inspect's and Scout's displays off
    (what a block prints is its own output) and Inspect's logs inside the working folder."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CALIMON_API_KEY=API_KEY,
               INSPECT_DISPLAY="none", SCOUT_DISPLAY="none", INSPECT_LOG_DIR=str(work / "logs"),
               PYTHONPATH=os.pathsep.join([str(work), *_checkout_path(),
                                           os.environ.get("PYTHONPATH", "")]),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    return env


def _source_key(line: str) -> str | None:
    """A key of ``line`` and the checkout's code and heads (their committed blobs and any
    uncommitted change), or None outside a git checkout: a fixture made from one tree is
    reused only by the same tree."""
    parts = [line.encode()]
    for args in (["ls-files", "-s", "calimon", "heads", "configs"],
                 ["diff", "HEAD", "--", "calimon", "heads", "configs"]):
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True)
        if r.returncode != 0:
            return None
        parts.append(r.stdout)
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:20]


@functools.lru_cache(maxsize=1)
def _checkout_path() -> tuple[str, ...]:
    """The checkout on the blocks' path only where the environment's calimon is another one:
    with the checkout on PYTHONPATH, its ``calimon.egg-info`` hides the editable install's
    record from Inspect, which then registers calimon's scorer and approver without their
    ``calimon/`` prefix."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", "import calimon; print(calimon.__file__)"],
                       cwd=Path(sys.executable).parent, env=env, capture_output=True, text=True)
    here = r.returncode == 0 and Path(r.stdout.strip()).resolve().is_relative_to(ROOT.resolve())
    return () if here else (str(ROOT),)


def _demo_monitor(work: Path) -> None:
    """``make demo``'s monitor run in ``work/runs/demo-monitor``, made once per tree: the slow
    and integrations tiers (two environments, one machine) copy it from calimon's cache folder
    (``$CALIMON_HOME/docs-fixtures``) rather than score the demo's samples twice."""
    out = work / "runs" / "demo-monitor"
    if (out / "curve.csv").is_file():
        return
    from tests.test_readme import demo_lines  # make demo's commands, as the README test reads them

    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    line = next(ln for ln in demo_lines(makefile) if "--out runs/demo-monitor" in ln)
    key = _source_key(line)
    home = Path(os.environ.get("CALIMON_HOME") or Path.home() / ".cache" / "calimon")
    cached = home / "docs-fixtures" / f"demo-monitor-{key}"
    if key is not None and (cached / "demo-monitor" / "curve.csv").is_file():
        shutil.copytree(cached / "demo-monitor", out)
        if (cached / "store.sqlite").is_file() and not (out.parent / "store.sqlite").exists():
            shutil.copy2(cached / "store.sqlite", out.parent / "store.sqlite")
        return
    _check(subprocess.run(["bash", "-ec", line], cwd=work, env=environment(work), text=True,
                          capture_output=True, timeout=TIMEOUT), f"fixture demo-monitor: {line}")
    if key is not None:
        tmp = cached.with_name(cached.name + f".{os.getpid()}")
        shutil.copytree(out, tmp / "demo-monitor")
        if (out.parent / "store.sqlite").is_file():  # the readings, for blocks that rescore
            shutil.copy2(out.parent / "store.sqlite", tmp / "store.sqlite")
        shutil.rmtree(cached, ignore_errors=True)
        try:
            tmp.rename(cached)  # whole or absent: a run stopped half way leaves no fixture
        except OSError:  # another worker put the same tree's fixture there first
            shutil.rmtree(tmp, ignore_errors=True)


FIXTURES = {"demo-monitor": _demo_monitor}


def _check(result: subprocess.CompletedProcess, what: str) -> None:
    if result.returncode != 0:
        raise AssertionError(f"{what}: exit {result.returncode}\n--- stdout\n"
                             f"{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}")


def write_file(block: Block, work: Path) -> None:
    """A ``file NAME`` block written into the working folder."""
    target = work / block.directives["file"]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(block.text, encoding="utf-8")


def _start(command, block: Block, work: Path, env: dict, background: list) -> None:
    """Start a server block and wait until its URL answers (any HTTP status)."""
    log = open(work / f"_docs_background_{block.line}.log", "w")  # noqa: SIM115 (kept open)
    proc = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    background.append(proc)
    url, deadline = block.directives["background"], time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{block.where}: exited {proc.returncode}\n"
                                 + (work / log.name).read_text()[-4000:])
        try:
            urllib.request.urlopen(url, timeout=5).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"{block.where}: {url} did not answer in 600 s")


def _stop(background: list) -> None:
    for proc in background:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def run_block(block: Block, work: Path, background: list) -> None:
    """Run one block in ``work`` and compare its output where the document shows one."""
    fixture = block.directives.get("fixture")
    if fixture:
        if fixture not in FIXTURES:
            raise DocsError(f"{block.where}: unknown fixture {fixture!r} (known: "
                            f"{', '.join(FIXTURES)})")
        FIXTURES[fixture](work)
    env = environment(work)
    if block.lang == "python":
        script = work / f"_docs_block_{block.line}.py"
        script.write_text(block.text, encoding="utf-8")
        command = [sys.executable, script.name]
    elif block.lang in ("bash", "sh"):
        command = ["bash", "-ec", re.sub(r"^export \w+=\.\.\.(?=\s|$)", ":", block.text,
                                         flags=re.M)]
    else:
        raise DocsError(f"{block.where}: the runner runs python and bash blocks; mark this "
                        f"{block.lang} block tested-by or skip, with the reason")
    if "background" in block.directives:
        return _start(command, block, work, env, background)
    result = subprocess.run(command, cwd=work, env=env, text=True, capture_output=True,
                            timeout=TIMEOUT)
    _check(result, block.where)
    if block.output is None or "not-compared" in block.output.directives:
        return
    expected = normalise(block.output.text, work)
    got = normalise(result.stdout, work)
    assert matches(expected, got), (
        f"{block.where}: the output shown at line {block.output.line} is not what it prints"
        "\n--- shown\n" + "\n".join(expected) + "\n--- printed\n" + "\n".join(got))


def tiers_of(tier: str) -> set[str]:
    """The tiers a document's run in ``tier``'s suite runs: ``default`` always; a slow run
    its slow blocks too; an integrations run the slow blocks marked ``setup`` only."""
    return {"default", tier} | ({"setup"} if tier == "integrations" else set())


def run_document(path: Path, tiers: set[str], work: Path, section: str | None = None) -> int:
    """Run a document's blocks of the given tiers in order (files written where they stand;
    with ``setup`` in ``tiers``, the slow blocks marked setup too); how many ran. ``section``:
    of the slow and integrations blocks not marked setup, only those under that ``## `` heading
    (a part of the document that stands on its setup alone, run beside the other parts)."""
    ran, background = 0, []
    try:
        for block in parse(path):
            chosen = block.tier in tiers or ("setup" in tiers and "setup" in block.directives)
            if (section not in (None, block.section) and block.runs and block.tier != "default"
                    and "setup" not in block.directives):
                continue  # another section's own block
            if "file" in block.directives and chosen:
                write_file(block, work)
            elif block.runs and chosen:
                run_block(block, work, background)
                ran += 1
    finally:
        _stop(background)
    return ran


def defined_names(source: str) -> set[str]:
    """The names a module defines at its top level (assignments, defs, classes, imports)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def imports_from(source: str, modules: set[str]) -> list[tuple[str, str]]:
    """(module, name) for every ``from MODULE import name`` of one of ``modules``."""
    return [(node.module, a.name) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.module in modules for a in node.names]
