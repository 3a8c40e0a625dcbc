from __future__ import annotations

import re

import pytest

from calimon.data.amb_open import line_rewrites as lr
from calimon.data.amb_open import safety_code as sc
from calimon.data.paths import sources_dir
from calimon.errors import DataSourceError


def _sources():
    try:
        return sources_dir()
    except DataSourceError:
        return None


SOURCES = _sources()
needs_sources = pytest.mark.skipif(
    SOURCES is None, reason="public source files not found (../shared/sources or $CALIMON_SOURCES)")

# --- one-line rewrites on hand-written snippets ------------------------------------------------

C_CODE = "void f(const char *src) {\n    char name[32];\n    char *p;\n}\n"


@pytest.mark.parametrize("lang,rule,line,code,want", [
    ("python", "PY-R-002", "    h = hashlib.md5(data).hexdigest()", "", "hashlib.sha256(data)"),
    ("python", "x.unsafe-pickle-use", "obj = pickle.loads(blob)", "", "json.loads(blob)"),
    ("python", "x.unsafe-yaml-use", "cfg = yaml.load(fh)", "", "yaml.safe_load(fh)"),
    ("python", "x.insecure-subprocess-using-shell", "subprocess.call(cmd, shell=True)", "",
     "subprocess.call(shlex.split(cmd), shell=False)"),
    ("python", "x.insecure-subprocess-using-shell", "run('ls -l /tmp', shell=True)", "",
     "run(['ls', '-l', '/tmp'], shell=False)"),
    ("python", "x.insecure-eval-use", "n = eval(options.count)", "",
     "n = ast.literal_eval(options.count)"),
    ("python", "x.insecure-os-system-use", "if os.system(cmd) != 0:", "",
     "subprocess.run(shlex.split(cmd)).returncode != 0"),
    ("python", "python.third-party.sql_injection",
     "cur.execute(\"SELECT a FROM t WHERE b = '%s' AND c = %d\" % (x, y))", "",
     "cur.execute(\"SELECT a FROM t WHERE b = %s AND c = %s\", (x, y))"),
    ("c", "C-R-002", "    strcpy(name, src);", C_CODE, 'snprintf(name, sizeof(name), "%s", src);'),
    ("c", "C-R-003", "strcat(name, src);", C_CODE,
     "strncat(name, src, sizeof(name) - strlen(name) - 1);"),
    ("c", "C-W-001", 'sprintf(name, "%d", n);', C_CODE, 'snprintf(name, sizeof(name), "%d", n);'),
    ("c", "C-R-012", "gets(name);", C_CODE, "fgets(name, sizeof(name), stdin);"),
    ("c", "C-R-001", 'scanf("%s", name);', C_CODE, 'scanf("%31s", name);'),
    ("c", "C-W-004", "q = (int *)malloc(n * sizeof(int));", "", "calloc(n, sizeof(int))"),
    ("cpp", "CPP-R-001", "std::auto_ptr<Node> node(make());", "", "std::unique_ptr<Node>"),
    ("csharp", "x.csharp.third-party.csrf", "        [HttpPost]", "",
     "        [HttpPost, ValidateAntiForgeryToken]"),
    ("java", "JAVA-R-015", 'md = MessageDigest.getInstance("MD5");', "",
     'getInstance("SHA-256")'),
    ("javascript", "x.post-message-origin", "frame.postMessage(msg, '*');", "",
     "frame.postMessage(msg, window.location.origin);"),
    ("javascript", "x.unsafe-alloc", "var b = Buffer.allocUnsafe(n);", "", "Buffer.alloc(n)"),
    ("php", "PHP-R-015", "$k = md5($v);", "", "$k = hash('sha256', $v);"),
    ("php", "PHP-R-010", "$c = unserialize($_COOKIE['c']);", "",
     "$c = json_decode($_COOKIE['c'], true);"),
    ("rust", "RUST-R-007", "let mut h = Sha1::new();", "", "Sha256::new()"),
])
def test_rewrite_makes_the_line_safe(lang, rule, line, code, want):
    got = lr.rewrite_line(lang, line, code, "Write a function that does the task.", rule)
    assert got is not None
    new, name = got
    assert want in new and new != line and "\n" not in new
    assert name


@pytest.mark.parametrize("lang,rule,line,code,prompt", [
    # the destination is a pointer, so sizeof would not bound the copy
    ("c", "C-R-002", "strcpy(p, src);", C_CODE, "Write a function."),
    # the request itself asks for the flagged construct
    ("python", "PY-R-002", "h = hashlib.md5(x)", "", "Compute an MD5 digest of the input."),
    # a placeholder that names a table is not a bindable value
    ("python", "python.third-party.sql_injection", "cur.execute('SELECT * FROM %s' % t)", "",
     "Write a function."),
    # weak random numbers are only a problem where the value guards something
    ("python", "x.insecure-crypto-prng-random", "x = random.randint(0, 9)", "speed = 3\n",
     "Write a game loop."),
    # comment lines are not code
    ("python", "PY-R-002", "# h = hashlib.md5(x)", "", "Write a function."),
    # a rule for one detector pattern does not fire on another
    ("c", "C-W-017", "strcpy(name, src);", C_CODE, "Write a function."),
    # the weak name would remain in a string literal
    ("csharp", "x.crypto-weak-hashing-function", 'var a = new Algo("MD5", MD5.Create());', "",
     "Write a function."),
])
def test_rewrite_declines(lang, rule, line, code, prompt):
    assert lr.rewrite_line(lang, line, code, prompt, rule) is None


def test_prng_rewrite_needs_a_security_hint():
    line = "    code = random.choice(ALPHABET)"
    assert lr.rewrite_line("python", line, "def make_token():\n" + line, "Write a function.",
                           "x.insecure-crypto-prng-random")[0].endswith(
        "random.SystemRandom().choice(ALPHABET)")


def test_deleted_spans_slice_trimmed_lines_and_merge_neighbours():
    src = "def f(a):\n    x = g(a)\n    y = h(x)\n    z = 1\n    return y\n"
    lines = src.splitlines(keepends=True)
    starts = [sum(len(x) for x in lines[:i]) for i in range(len(lines))]
    deleted = [{"line_no": n + 1, "char_start": starts[n], "char_end": starts[n] + len(lines[n]),
                "line": lines[n]} for n in (1, 2, 4)]
    spans = sc._deleted_spans(src, deleted)
    assert [src[s:e] for s, e in spans] == ["x = g(a)\n    y = h(x)", "return y"]


def test_signature_stops_at_the_body():
    assert sc._signature("int f(int a,\n      int b) {\n  return a;\n}") == "int f(int a,\n      int b)"
    assert sc._signature("    def m(self, x):\n        return x\n") == "def m(self, x):"


# --- the cell built from the real files ---------------------------------------------------------

@pytest.fixture(scope="module")
def cell():
    if SOURCES is None:
        pytest.skip("public source files not found")
    return sc.safety_code_cells(SOURCES, 0)


def _pairs(samples):
    pairs: dict[str, dict] = {}
    for s in samples:
        pairs.setdefault(s.pair_id, {})[s.label] = s
    return pairs


@needs_sources
def test_cell_pairs_share_request_and_spans_slice(cell):
    pairs = _pairs(cell)
    assert len(pairs) >= 150
    for pid, p in pairs.items():
        bad, good = p[True], p[False]
        assert (bad.id, good.id) == (f"{pid}-m", f"{pid}-b")
        assert bad.request == good.request and bad.response != good.response
        assert bad.gold_spans and not good.gold_spans
        assert (bad.category, bad.task) == ("safety", "code")
        assert bad.meta["language"] and bad.meta["label_quality"] in ("gold", "semi-synthetic")
        for s, e in bad.gold_spans:
            text = bad.response[s:e]
            assert text == text.strip() and text
        assert not re.search(r"(?i)\bCWE-?\d|vulnerab", bad.request)


@needs_sources
def test_sven_spans_are_the_deleted_lines(cell):
    import json

    rows = {}
    for rel in sc.SVEN_FILES:
        cwe = rel.rsplit("/", 1)[1].removesuffix(".jsonl")
        for i, line in enumerate((SOURCES / rel).read_text().splitlines()):
            rows[f"sc-sven-{cwe}-{i:03d}"] = json.loads(line)
    for pid, p in _pairs(cell).items():
        if not pid.startswith("sc-sven-"):
            continue
        row, bad = rows[pid], p[True]
        want = [d["line"].strip() for d in row["line_changes"]["deleted"] if d["line"].strip()]
        got = [ln.strip() for s, e in bad.gold_spans for ln in bad.response[s:e].split("\n")]
        assert got == want
        assert row["func_src_before"] in bad.response and row["func_src_after"] in p[False].response


@needs_sources
def test_cyberseceval_rewrite_changes_exactly_the_flagged_line(cell):
    import json

    rows = {int(r["prompt_id"]): r for r in json.loads((SOURCES / sc.CSE_FILE).read_text())}
    n = 0
    for pid, p in _pairs(cell).items():
        if not pid.startswith("sc-cse-"):
            continue
        n += 1
        bad, good = p[True], p[False]
        row = rows[bad.meta["prompt_id"]]
        assert bad.request == row["test_case_prompt"] and row["origin_code"] in bad.response
        assert [bad.response[s:e] for s, e in bad.gold_spans] == [row["line_text"].strip()]
        changed = [(a, b) for a, b in zip(bad.response.split("\n"), good.response.split("\n"),
                                          strict=True) if a != b]
        assert len(changed) == 1 and changed[0][0] == row["line_text"]
        assert bad.meta["label_quality"] == "semi-synthetic" and bad.meta["rewrite_rule"]
    assert n > 0


@needs_sources
def test_cell_is_deterministic_and_seed_changes_frames(cell):
    again = sc.safety_code_cells(SOURCES, 0)
    assert [s.to_dict() for s in again] == [s.to_dict() for s in cell]
    other = sc.safety_code_cells(SOURCES, 1)
    assert [s.pair_id for s in other] == [s.pair_id for s in cell]
    assert [s.response for s in other] != [s.response for s in cell]
