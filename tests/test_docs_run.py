"""The docs as tests (tests/docs_runner.py): every block of README.md and docs/*.md that a user
runs is run, or says why not, and what a document shows it prints is what it prints.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/test_docs_run.py              # make test's
    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q -m slow tests/test_docs_run.py      # minutes
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from ports import free_port

from tests.docs_runner import (
    API_KEY,
    ROOT,
    TIERS,
    DocsError,
    defined_names,
    docs,
    environment,
    imports_from,
    matches,
    normalise,
    parse,
    problems,
    run_document,
    tiers_of,
    write_file,
)

MARKS = {"default": [], "slow": [pytest.mark.slow, pytest.mark.model],
         "integrations": [pytest.mark.integrations, pytest.mark.model]}


# The tiers whose documents run one ``## `` section to a test, so that a suite's workers share
# a long document (the integrations suite's: docs/integrations.md's sections take about a minute
# each); a section stands on the document's setup and file blocks alone.
BY_SECTION = {"integrations"}


def _cases():
    for path in docs():
        blocks = [b for b in parse(path) if b.runs]
        name = str(path.relative_to(ROOT))
        for tier in TIERS:
            sections = list(dict.fromkeys(b.section for b in blocks if b.tier == tier))
            if not sections:
                continue
            if tier not in BY_SECTION:
                yield pytest.param(path, tier, None, id=f"{name}-{tier}", marks=MARKS[tier])
                continue
            for section in sections:
                slug = re.sub(r"[^a-z0-9]+", "-", section.lower()).strip("-")[:32]
                yield pytest.param(path, tier, section, id=f"{name}-{tier}-{slug}",
                                   marks=MARKS[tier])


def test_every_block_is_run_or_says_why():
    found = [p for path in docs() for b in parse(path) for p in problems(b)]
    assert not found, "\n".join(found)
    blocks = [b for path in docs() for b in parse(path)]
    assert sum(b.runs for b in blocks) >= 10  # the runner found the docs' blocks


@pytest.mark.parametrize("path", docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_name_only_what_they_define(path, tmp_path):
    """Each python block stands alone: it imports what it uses (ruff's undefined-name check),
    and what it imports from a file block (``<!-- docs: file agent.py -->``) that file
    defines. Cheap, so make test catches a NameError that only the slow run would meet."""
    blocks = [b for b in parse(path) if b.lang == "python" and "skip" not in b.directives]
    files = {b.directives["file"].removesuffix(".py"): b.text
             for b in blocks if "file" in b.directives}
    where = {}
    for b in blocks:
        name = b.directives.get("file") or f"block_{b.line}.py"
        (tmp_path / name).write_text(b.text, encoding="utf-8")
        where[name] = b.where
        for module, imported in imports_from(b.text, set(files)):
            assert imported in defined_names(files[module]), \
                f"{b.where}: imports {imported!r} from {module}.py, which does not define it"
    if not blocks:
        return
    r = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", "--isolated",
                        "--select", "F821,F822,F823", "--output-format", "concise", "."],
                       cwd=tmp_path, capture_output=True, text=True)
    said = [ln for ln in r.stdout.splitlines() if ".py:" in ln]
    found = [f"{where[ln.split(':')[0]]} (block line {ln.split(':')[1]}): "
             f"{ln.split(': ', 1)[1]}" for ln in said]
    assert r.returncode == 0 and not found, "\n".join(found) or r.stdout + r.stderr


@pytest.mark.parametrize("path", [p for p in docs() if any(
    b.lang == "python" and "file" in b.directives for b in parse(p))],
    ids=lambda p: str(p.relative_to(ROOT)))
def test_python_files_of_a_doc_import(path, tmp_path):
    """Each ``file NAME.py`` block imports (beside the document's other files) where the
    packages it imports are installed: the slow runs' modules load in make test."""
    blocks = [b for b in parse(path) if b.lang == "python" and "file" in b.directives]
    for b in blocks:
        write_file(b, tmp_path)
    modules = [b.directives["file"].removesuffix(".py") for b in blocks]
    # one process: inspect_ai, which they import, takes seconds to import
    r = subprocess.run([sys.executable, "-c", f"import {', '.join(modules)}"], cwd=tmp_path,
                       env=environment(tmp_path), capture_output=True, text=True)
    assert r.returncode == 0, f"{path.name}: import {', '.join(modules)}\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("path, tier, section", list(_cases()))
def test_doc_blocks_run_and_print_what_they_show(path, tier, section, tmp_path):
    ran = run_document(path, tiers_of(tier), tmp_path, section)
    assert ran >= 1


def test_untagged_unmarked_and_bad_markers_are_refused(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("text\n\n```\ncalimon curve\n```\n\n```bash\ntouch ran\n```\n"
                   "<!-- docs: run -->\n<!-- docs: skip why -->\n```bash\nls\n```\n",
                   encoding="utf-8")
    untagged, unmarked, both = parse(doc)
    assert "doc.md:3: a fenced block without a language" in problems(untagged)[0]
    assert "doc.md:7: a bash block needs one docs directive" in problems(unmarked)[0]
    assert "doc.md:12: docs directives ['run', 'skip'] contradict" in problems(both)[0]
    assert run_document(doc, set(TIERS), tmp_path) == 0 and not (tmp_path / "ran").exists()
    doc.write_text("<!-- docs: skip -->\n```bash\nls\n```\n", encoding="utf-8")
    with pytest.raises(DocsError, match=r"doc.md:1: the docs directive 'skip' needs a value"):
        parse(doc)
    doc.write_text("<!-- docs: slwo -->\n```bash\nls\n```\n", encoding="utf-8")
    with pytest.raises(DocsError, match=r"doc.md:1: unknown docs directive 'slwo'"):
        parse(doc)


def test_an_integrations_run_runs_only_the_slow_blocks_marked_setup(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- docs: slow -->\n<!-- docs: setup -->\n```bash\ntouch made\n```\n"
                   "<!-- docs: slow -->\n```bash\ntouch slow\n```\n"
                   "<!-- docs: integrations -->\n```bash\ntest -e made; touch ran\n```\n",
                   encoding="utf-8")
    assert run_document(doc, tiers_of("integrations"), tmp_path) == 2
    assert (tmp_path / "ran").exists() and not (tmp_path / "slow").exists()
    assert run_document(doc, tiers_of("slow"), tmp_path) == 2 and (tmp_path / "slow").exists()
    doc.write_text("<!-- docs: run -->\n<!-- docs: setup -->\n```bash\nls\n```\n",
                   encoding="utf-8")
    assert "setup marks a slow block" in problems(parse(doc)[0])[0]


def test_a_section_run_runs_its_own_blocks_on_the_setup_and_files_of_the_others(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("## A\n\n<!-- docs: slow -->\n<!-- docs: setup -->\n```bash\ntouch made\n```\n"
                   "<!-- docs: file f.py -->\n```python\nX = 1\n```\n"
                   "<!-- docs: integrations -->\n```bash\ntouch a\n```\n"
                   "## B\n\n<!-- docs: run -->\n```bash\ntouch default\n```\n"
                   "<!-- docs: integrations -->\n```bash\ntest -e made; test -e f.py; touch b\n"
                   "```\n", encoding="utf-8")
    assert [b.section for b in parse(doc)] == ["A", "A", "A", "B", "B"]
    (tmp_path / "b").mkdir()
    (tmp_path / "all").mkdir()
    assert run_document(doc, tiers_of("integrations"), tmp_path / "b", "B") == 3
    assert {p.name for p in (tmp_path / "b").iterdir()} >= {"made", "f.py", "default", "b"}
    assert not (tmp_path / "b" / "a").exists()
    assert run_document(doc, tiers_of("integrations"), tmp_path / "all") == 4


def test_outputs_are_attached_compared_and_mismatches_named(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- docs: run -->\n```bash\necho a; echo 'took 1.5 s in' $PWD\n```\n"
                   "```\na\ntook 2 s in .\n```\n\nprose\n\n<!-- docs: run -->\n"
                   "```python\nprint(1)\n```\n```\n2\n```\n", encoding="utf-8")
    first, second = parse(doc)
    assert first.output is not None and first.output.line == 5
    assert second.output is not None and second.output.text == "2\n"
    with pytest.raises(AssertionError, match=r"doc.md:13: the output shown at line 16 is not"):
        run_document(doc, {"default"}, tmp_path)  # the first matches, the second prints 1


def test_a_background_server_answers_the_next_block_and_is_stopped(tmp_path):
    port = free_port()
    doc = tmp_path / "doc.md"
    doc.write_text(f"<!-- docs: run -->\n<!-- docs: background http://127.0.0.1:{port}/ -->\n"
                   "```bash\nexport CALIMON_API_KEY=...\necho $CALIMON_API_KEY > key\n"
                   f"exec python -m http.server {port} --bind 127.0.0.1\n```\n\n"
                   "<!-- docs: run -->\n```bash\ncurl -s -o /dev/null -w '%{http_code}' "
                   f"http://127.0.0.1:{port}/key\n```\n```\n200\n```\n", encoding="utf-8")
    assert run_document(doc, {"default"}, tmp_path) == 2
    assert (tmp_path / "key").read_text().strip() == API_KEY  # the placeholder kept the key
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)


def test_ellipsis_and_normalisation():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a ... z"], ["a to z"]) and not matches(["a", "b"], ["a"])
    assert not matches(["a", "...", "d"], ["a", "b"])
    work = Path("/tmp/work-x")
    assert normalise("in /tmp/work-x/runs  \nid PB55PCucmaVbCENxKNuayW 3.2 s\n\n", work) == \
        ["in ./runs", "id <id> <time>"]


def test_inspects_start_up_lines_are_not_the_blocks_output():
    banner = ("inspect_ai v0.3.285\n- hooks enabled: 1\n  calimon/calimon_sessions: ends the "
              "sample's monitor sessions\n\n")
    work = Path("/tmp/work-x")
    assert normalise(banner + "t0 0.483 review\n", work) == ["t0 0.483 review"]
    assert normalise("- hooks enabled: 1\nt0\n", work) == ["- hooks enabled: 1", "t0"]
