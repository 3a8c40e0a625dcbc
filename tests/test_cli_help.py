"""Every command's ``--help``, as a user sees it: flags show no value type (no ``<bool>``, on
``--help`` itself either), arguments are shown one way in every command (capitals, brackets
when optional), a two-way flag only where its default is on or unset (one ``--quiet``
everywhere), and help text is not broken where its source line ended."""

from __future__ import annotations

import re

import pytest
import typer._click as click
import typer.main
from typer.core import TyperArgument, TyperOption
from typer.testing import CliRunner

from calimon.cli import app
from calimon.cli.conventions import conform, unwrap

ANSI = re.compile(r"\x1b\[[0-9;]*m")
WIDE = 1000  # wide enough that nothing the terminal wraps is wrapped


def _commands(cmd, path=()):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _help(path, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", str(WIDE))
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, (path, result.output)
    return ANSI.sub("", result.output)


def _all_help(monkeypatch):
    root = typer.main.get_command(app)
    return [(path, cmd, _help(path, monkeypatch)) for path, cmd in _commands(root)]


def _panels(text: str) -> dict[str, list[str]]:
    """The rows of each boxed panel (Options, Arguments, Commands), by title."""
    panels, title = {}, None
    for line in text.splitlines():
        if line.startswith("╭─"):
            title = line.strip("╭─╮ ").split(" ")[0]
            panels[title] = []
        elif line.startswith("╰"):
            title = None
        elif title is not None:
            panels[title].append(line)
    return panels


def _prose(text: str) -> list[str]:
    """The help text outside the panels and the usage line, one string per rendered line."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("╭"):
            inside = True
        elif line.startswith("╰"):
            inside = False
        elif not inside and not line.strip().startswith("Usage:"):
            lines.append(line.strip())
    return lines


def test_no_flag_shows_a_value_type(monkeypatch):
    for path, _, text in _all_help(monkeypatch):
        assert "<bool>" not in text, (path, [ln for ln in text.splitlines() if "<bool>" in ln])


def test_arguments_are_shown_one_way_in_every_command(monkeypatch):
    shown = 0
    for _, cmd, text in _all_help(monkeypatch):
        (usage,) = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("Usage:")]
        assert "{" not in usage, usage
        for param in cmd.params:
            if not isinstance(param, TyperArgument):
                continue
            name = param.name.upper() + ("..." if param.nargs != 1 else "")
            expected = name if param.required else f"[{name}]"
            assert re.search(rf"(^| ){re.escape(expected)}( |$)", usage), (usage, expected)
            assert len([r for r in _panels(text)["Arguments"] if f" {name} " in r]) == 1, text
            shown += 1
    assert shown >= 10  # thresholds, shift, compare, models check, ...


def test_an_argument_error_names_it_as_help_does():
    r = CliRunner().invoke(app, ["thresholds"])
    assert r.exit_code == 2 and "Missing argument 'RUN_DIR'" in ANSI.sub("", r.output)


def test_two_way_flags_only_where_the_default_is_on_or_unset():
    two_way = {}
    for path, cmd in _commands(typer.main.get_command(app)):
        for p in cmd.params:
            if isinstance(p, TyperOption) and p.is_flag and p.secondary_opts:
                two_way[(*path, p.opts[0])] = p.default
    assert all(default is not False for default in two_way.values()), two_way
    assert not any(opt == "--quiet" for *_, opt in two_way)


def test_quiet_is_one_flag_in_every_command(monkeypatch):
    with_quiet = [(path, text) for path, _, text in _all_help(monkeypatch) if "--quiet" in text]
    assert len(with_quiet) >= 6
    for path, text in with_quiet:
        assert "--no-quiet" not in text, path


def test_help_text_is_not_hard_wrapped(monkeypatch):
    for path, cmd, text in _all_help(monkeypatch):
        panels = _panels(text)
        # one row per option, argument and command: a help text broken in its source would
        # take two rows even on a terminal this wide
        params = [p for p in cmd.get_params(click.Context(cmd)) if not p.hidden]
        expected = len(params) + len([c for c in getattr(cmd, "commands", {}).values()
                                      if not c.hidden])
        rows = sum(len(r) for r in panels.values())
        assert rows == expected, (path, panels)
        # the prose: paragraphs separated by blank lines, each on one line
        prose = _prose(text)
        for a, b in zip(prose, prose[1:], strict=False):
            assert not (a and b), (path, a, b)


def test_shift_recertify_and_compare_read_as_one_paragraph(monkeypatch):
    root = _help((), monkeypatch)
    (row,) = [r for r in _panels(root)["Commands"] if r.startswith("│ shift ")]
    assert "the difference move the certificate? One verdict" in row
    assert "from reviewed labels (the review band plus the audit slice)" in _help(
        ("recertify",), monkeypatch)
    assert "MR at fixed FAR, ECE" in _help(("compare",), monkeypatch)


def test_unwrap_joins_lines_and_keeps_paragraphs():
    assert unwrap("One sentence\n    broken here.\n\n    Two\n    lines.") == (
        "One sentence broken here.\n\nTwo lines.")
    assert unwrap("Kept:\n\n\b\na\nb") == "Kept:\n\n\b\na\nb"
    assert unwrap("Shown\nhere.\f\nhidden\nlines") == "Shown here.\f\nhidden\nlines"


@pytest.mark.parametrize("own", [True, False])
def test_a_plugin_command_is_rendered_the_same(own, monkeypatch):
    from typer.core import TyperCommand

    plugin = typer.Typer()

    class Own(TyperCommand):
        pass

    @plugin.command("tool", cls=Own if own else None)
    def tool(target: str, dry_run: bool = typer.Option(False, "--dry-run", help="Only say.")):
        """Do a thing
        over two lines."""

    conform(plugin)
    monkeypatch.setenv("COLUMNS", str(WIDE))
    text = ANSI.sub("", CliRunner().invoke(plugin, ["--help"]).output)
    if own:  # a command that chose its own class keeps it
        assert "{target}" in text
    else:
        assert "[OPTIONS] TARGET" in text and "<bool>" not in text
        assert "Do a thing over two lines." in text


@pytest.mark.parametrize(("command", "most"), [(("curve",), 100), (("serve",), 100)])
def test_a_scoring_command_help_fits_100_lines_at_80_columns_in_panels(command, most,
                                                                         monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = CliRunner().invoke(app, [*command, "--help"])
    text = ANSI.sub("", r.output)
    assert r.exit_code == 0 and len(text.splitlines()) <= most, len(text.splitlines())
    panels = _panels(text)
    assert {"Monitor", "Backend"} <= set(panels) and "Options" not in panels
    assert not re.search(r"<\w+(\[\w+\])?>", text)  # no <str>, <int>, <list[str]>


def test_every_help_fits_100_lines_at_80_columns(monkeypatch):
    """The project's rule for every command, plugins' aside: ``--help`` fits 100 lines on an
    80-column terminal (the longest ones, `serve`, `robustness` and `curve`, keep a few lines
    spare for the next flags)."""
    monkeypatch.setenv("COLUMNS", "80")
    lengths = {}
    for path, _ in _commands(typer.main.get_command(app)):
        r = CliRunner().invoke(app, [*path, "--help"])
        assert r.exit_code == 0, (path, r.output)
        lengths[" ".join(path)] = len(ANSI.sub("", r.output).splitlines())
    assert len(lengths) >= 30, sorted(lengths)
    assert max(lengths.values()) <= 100, sorted(lengths.items(), key=lambda kv: -kv[1])[:5]
