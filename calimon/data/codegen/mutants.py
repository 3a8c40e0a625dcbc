"""Small single-token mutants of a reference solution (the sycophancy cell's "agreeing" code).

Each mutant replaces one token in the body of a function (never in an import or a ``def`` line):
an integer constant moved by one, a comparison flipped, an arithmetic operator swapped, a boolean
operator or constant flipped, ``not`` dropped, or ``min``/``max``, ``any``/``all`` swapped. The
formatting of the rest of the code is kept, so exactly one line differs from the reference.
"""

from __future__ import annotations

import ast
import io
import keyword
import random
import tokenize
from dataclasses import dataclass

from calimon.data.codegen.problem import parse

_COMPARE = {"<": ("<=", ">"), "<=": ("<",), ">": (">=", "<"), ">=": (">",), "==": ("!=",),
            "!=": ("==",)}
_ARITH = {"+": ("-",), "-": ("+",), "*": ("+",), "//": ("/",), "%": ("//",), "**": ("*",),
          "+=": ("-=",), "-=": ("+=",)}
_NAMES = {"and": ("or", "wrong_boolean"), "or": ("and", "wrong_boolean"),
          "True": ("False", "wrong_boolean"), "False": ("True", "wrong_boolean"),
          "min": ("max", "swapped_builtin"), "max": ("min", "swapped_builtin"),
          "any": ("all", "swapped_builtin"), "all": ("any", "swapped_builtin")}
KINDS = ("off_by_one", "flipped_comparison", "wrong_operator", "wrong_boolean", "swapped_builtin")


@dataclass(frozen=True)
class Mutant:
    """A reference with one token replaced: the code, the mutation's kind and the changed line."""

    code: str
    kind: str
    line: int  # 0-based index of the changed line in code.splitlines()
    before: str  # the original token
    after: str  # its replacement ("" when a token was dropped)


def mutable_lines(code: str) -> set[int]:
    """0-based lines inside function bodies, minus def lines, decorators, docstrings, imports."""
    module = parse(code)
    allowed: set[int] = set()
    blocked: set[int] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            start = body[0].lineno
            if (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                blocked.update(range(body[0].lineno - 1, body[0].end_lineno))
            allowed.update(range(start - 1, node.end_lineno))
            blocked.update(range(node.lineno - 1, start - 1))
            for dec in node.decorator_list:
                blocked.update(range(dec.lineno - 1, dec.end_lineno))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            blocked.update(range(node.lineno - 1, node.end_lineno))
    return allowed - blocked


def _binary_context(prev: tokenize.TokenInfo | None) -> bool:
    if prev is None:
        return False
    if prev.type == tokenize.NUMBER or prev.type == tokenize.STRING:
        return True
    if prev.type == tokenize.NAME:
        return not keyword.iskeyword(prev.string) or prev.string in ("True", "False", "None")
    return prev.type == tokenize.OP and prev.string in (")", "]", "}")


def _sites(code: str, allowed: set[int]):
    toks = list(tokenize.generate_tokens(io.StringIO(code).readline))
    prev = None
    for i, tok in enumerate(toks):
        if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT,
                        tokenize.DEDENT):
            continue
        row = tok.start[0] - 1
        if row in allowed and tok.start[0] == tok.end[0]:
            s = tok.string
            if tok.type == tokenize.NUMBER and s.isdigit():
                v = int(s)
                yield tok, str(v + 1), "off_by_one"
                if v > 0:
                    yield tok, str(v - 1), "off_by_one"
            elif tok.type == tokenize.OP and s in _COMPARE:
                for r in _COMPARE[s]:
                    yield tok, r, "flipped_comparison"
            elif tok.type == tokenize.OP and s in _ARITH and (
                    s.endswith("=") or _binary_context(prev)):
                for r in _ARITH[s]:
                    yield tok, r, "wrong_operator"
            elif tok.type == tokenize.NAME and s in _NAMES:
                nxt = toks[i + 1] if i + 1 < len(toks) else None
                is_call = nxt is not None and nxt.string == "("
                if s in ("min", "max", "any", "all") and not is_call:
                    pass
                else:
                    r, kind = _NAMES[s]
                    yield tok, r, kind
            elif tok.type == tokenize.NAME and s == "not":
                nxt = toks[i + 1] if i + 1 < len(toks) else None
                if nxt is not None and nxt.start[0] == tok.start[0]:
                    yield tok, "", "wrong_boolean"
        prev = tok


def all_mutants(code: str) -> list[Mutant]:
    """Every valid single-token mutant of `code` (parses, and differs from it as an AST)."""
    lines = code.splitlines(keepends=True)
    base = ast.dump(parse(code))
    out = []
    for tok, repl, kind in _sites(code, mutable_lines(code)):
        row, col = tok.start
        line = lines[row - 1]
        end = tok.end[1]
        if repl == "":  # dropping `not`: also drop the space after it
            while end < len(line) and line[end] == " ":
                end += 1
        new_line = line[:col] + repl + line[end:]
        new_code = "".join(lines[:row - 1]) + new_line + "".join(lines[row:])
        try:
            if ast.dump(parse(new_code)) == base:
                continue
        except SyntaxError:
            continue
        out.append(Mutant(code=new_code, kind=kind, line=row - 1, before=tok.string, after=repl))
    return out


def sample_mutants(code: str, rng: random.Random, limit: int = 24) -> list[Mutant]:
    """Up to `limit` mutants, spread over the kinds (round robin over a seeded shuffle)."""
    by_kind: dict[str, list[Mutant]] = {k: [] for k in KINDS}
    for m in all_mutants(code):
        by_kind[m.kind].append(m)
    for k in KINDS:
        rng.shuffle(by_kind[k])
    out: list[Mutant] = []
    while len(out) < limit and any(by_kind.values()):
        for k in KINDS:
            if by_kind[k] and len(out) < limit:
                out.append(by_kind[k].pop())
    return out
