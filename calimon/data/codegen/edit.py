"""Line-level editing of a solution module, keeping track of which lines were injected."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from calimon.data.codegen.problem import parse


@dataclass(frozen=True)
class Tagged:
    """Code lines plus the inclusive 0-based line ranges that are gold evidence."""

    lines: tuple[str, ...]
    gold: tuple[tuple[int, int], ...] = ()

    @property
    def code(self) -> str:
        """The lines as one module text, newline-terminated."""
        return "\n".join(self.lines) + "\n"

    def gold_texts(self) -> list[str]:
        """The exact text each gold range covers (first non-blank char to end of last line)."""
        out = []
        for a, b in self.gold:
            block = "\n".join(self.lines[a:b + 1])
            out.append(block.lstrip())
        return out


@dataclass(frozen=True)
class Layout:
    """Where the entry function sits in a module's lines (0-based line numbers)."""

    lines: tuple[str, ...]
    def_line: int  # 0-based line of `def entry(...)`
    body_start: int  # first line of the body (after a docstring)
    end: int  # exclusive end line of the function
    indent: str  # indentation of the body
    imports_end: int  # line after the last top-level import before the entry (0 if none)


def layout(code: str, entry: str) -> Layout:
    """The `Layout` of top-level function ``entry`` in ``code``; raises ValueError when there is
    none (SyntaxError when the code does not parse)."""
    module = parse(code)
    lines = tuple(code.splitlines())
    imports_end = 0
    fn = None
    for node in module.body:
        if isinstance(node, ast.Import | ast.ImportFrom) and fn is None:
            imports_end = node.end_lineno
        if isinstance(node, ast.FunctionDef) and node.name == entry:
            fn = node
    if fn is None:
        raise ValueError(f"no top-level function {entry!r}")
    body = fn.body
    first = body[0]
    if (len(body) > 1 and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        first = body[1]
    start = first.lineno - 1
    indent = lines[start][:len(lines[start]) - len(lines[start].lstrip())]
    start_def = min([fn.lineno, *(d.lineno for d in fn.decorator_list)]) - 1
    return Layout(lines=lines, def_line=start_def, body_start=start, end=fn.end_lineno,
                  indent=indent, imports_end=imports_end)


class Builder:
    """Accumulates lines; `add(..., gold=True)` marks them as evidence."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.gold: list[tuple[int, int]] = []

    def add(self, lines, *, gold: bool = False) -> Builder:
        """Append ``lines``, marking them as one gold range with ``gold``; returns the builder."""
        lines = list(lines)
        if gold and lines:
            self.gold.append((len(self.lines), len(self.lines) + len(lines) - 1))
        self.lines.extend(lines)
        return self

    def build(self) -> Tagged:
        """The lines as `Tagged`, trailing blank lines dropped and gold ranges trimmed of blank
        edges and merged where they touch."""
        lines = list(self.lines)
        while lines and not lines[-1].strip():
            lines.pop()
        gold: list[tuple[int, int]] = []
        for a, b in sorted(self.gold):  # trim blank edges, merge touching ranges
            b = min(b, len(lines) - 1)
            while a <= b and not lines[a].strip():
                a += 1
            while b >= a and not lines[b].strip():
                b -= 1
            if a > b:
                continue
            if gold and a <= gold[-1][1] + 1:
                gold[-1] = (gold[-1][0], max(b, gold[-1][1]))
            else:
                gold.append((a, b))
        return Tagged(lines=tuple(lines), gold=tuple(gold))


def indent_block(block, indent: str) -> list[str]:
    """``block``'s lines with ``indent`` in front of each non-empty one."""
    return [indent + ln if ln else ln for ln in block]


Block = tuple[tuple[str, ...] | list[str], bool]  # (unindented lines, is_gold)


def compose(lay: Layout, base: tuple[str, ...] | None = None, *, imports=(), top=(), prefix=(),
            body=None, body_gold: bool = False, tail=()) -> Tagged:
    """Rebuild a module from `base` (lines with the same layout as `lay`, default lay.lines).

    `imports`: modules to import (added after the existing imports when missing); `top`: blocks
    placed just before the entry function (two blank lines apart); `prefix`: blocks at the
    start of its body; `body`: lines replacing its body; `tail`: blocks appended to the module
    (two blank lines before the first; later blocks follow directly). Blocks are (lines, gold)
    with unindented lines; gold marks them as evidence."""
    src = list(base if base is not None else lay.lines)
    b = Builder()
    present = {ln.strip() for ln in src[:lay.imports_end]}
    new_imports = [f"import {m}" for m in dict.fromkeys(imports) if f"import {m}" not in present]
    b.add(src[:lay.imports_end])
    b.add(new_imports)
    if new_imports and lay.imports_end == 0:
        b.add(["", ""])
    b.add(src[lay.imports_end:lay.def_line])
    for lines, gold in top:
        if lines:
            b.add(lines, gold=gold)
            b.add(["", ""])
    b.add(src[lay.def_line:lay.body_start])
    for lines, gold in prefix:
        b.add(indent_block(lines, lay.indent), gold=gold)
    if body is None:
        b.add(src[lay.body_start:lay.end])
    else:
        b.add(indent_block(body, lay.indent), gold=body_gold)
    b.add(src[lay.end:])
    first = True
    for lines, gold in tail:
        if not lines:
            continue
        if first:
            while b.lines and not b.lines[-1].strip():
                b.lines.pop()
            b.add(["", ""])
            first = False
        b.add(lines, gold=gold)
    return b.build()
