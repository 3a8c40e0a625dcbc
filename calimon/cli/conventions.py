"""How every command's ``--help`` looks, in one place (typer's defaults differ per case):

- a flag (``--json``, ``--force``, ``--help`` itself) shows no value type: it takes none
  (typer's rich help prints ``<bool>`` for it);
- an option's or argument's value is a word, not a Python type: ``N``, ``NUMBER``, ``TEXT``,
  ``PATH`` (typer prints ``<int>``, ``<list[str]>``); a repeated one shows its element's word;
- an option's default ends its help text, "(default: X)", wrapped with it (typer gives it a
  line of its own);
- ``--help`` sits in the last panel of a command whose options are grouped in panels (typer
  leaves it alone in an "Options" panel);
- an argument is its name in capitals everywhere: ``RUN_DIR`` when required, ``[MODEL]`` when
  optional, ``RUNS...`` when repeated, in the usage line, the Arguments panel and the errors
  (typer mixes ``{run_dir}`` and ``[model]``);
- help text is one line per paragraph, wrapped by the terminal, not where the docstring's
  source line happened to end (typer keeps those breaks in the command list and in a
  command's later paragraphs). A paragraph starting with ``\\b`` keeps its lines.

`conform` applies them to an app and everything mounted on it (plugins included), by giving
each command and group the classes below unless it chose its own.
"""

from __future__ import annotations

import inspect

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import DefaultPlaceholder


def unwrap(text: str | None) -> str | None:
    """``text`` with each paragraph's single line breaks joined into spaces (paragraphs are
    separated by blank lines; one starting with ``\\b`` and anything after ``\\f`` are kept)."""
    if not text:
        return text
    body, sep, tail = inspect.cleandoc(text).partition("\f")
    paragraphs = [p if p.startswith("\b") else " ".join(ln.strip() for ln in p.splitlines())
                  for p in body.split("\n\n")]
    return "\n\n".join(paragraphs) + sep + tail


def argument_name(param: TyperArgument) -> str:
    """An argument as shown everywhere: its name in capitals, ``...`` when repeated."""
    return (param.name or "").upper() + ("..." if param.nargs != 1 else "")


PLACEHOLDERS = {"int": "N", "float": "NUMBER", "str": "TEXT", "Path": "PATH"}


def placeholder(param: TyperOption | TyperArgument) -> str:
    """The word shown for an option's value (module docstring)."""
    bare = param.bare_type()
    while bare.startswith("list[") and bare.endswith("]"):
        bare = bare[5:-1]
    return PLACEHOLDERS.get(bare, bare.upper())


def _default_text(value) -> str | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or None
    return str(value)


class _CoerceWhenGiven:
    """A parameter's coercion built only for a value to coerce: typer builds it (a pydantic
    TypeAdapter, pydantic imported) even for an option left out, which would cost every help
    and usage error that import. A missing value stays None (``()`` when repeatable), as
    typer's own coercion leaves it."""

    def __init__(self, param):
        self.param, self.built = param, None

    def coerce(self, value, param, ctx):
        """``value`` coerced as typer would; a missing one as it is."""
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        if self.built is None:
            from typer._coercion import build_runtime_param

            self.built = build_runtime_param(self.param.type_descriptor)
        return self.built.coerce(value, param=param, ctx=ctx)


def _conform_param(param) -> None:
    if getattr(param, "_runtime_param", False) is None:
        param._runtime_param = _CoerceWhenGiven(param)
    if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
        param.metavar = ""  # rich help prints the metavar, when set, in place of <bool>
    elif isinstance(param, TyperOption) and param.metavar is None:
        param.metavar = placeholder(param)
    if isinstance(param, TyperOption) and param.show_default is True and not param.is_flag:
        shown = _default_text(param.default)
        if shown is not None:
            param.help = f"{param.help or ''} (default: {shown})".strip()
        param.show_default = False  # once: get_params runs on every rendering
    elif isinstance(param, TyperArgument) and param.metavar is None:
        param.metavar = argument_name(param)
        word = placeholder(param)
        param.display_type_rich = lambda ctx: word  # its value's word, as for an option


class _Conventions:
    """What `CalimonCommand` and `CalimonGroup` add to typer's classes."""

    def _conform(self) -> None:
        self.help = unwrap(self.help)
        self.short_help = unwrap(self.short_help)

    def get_params(self, ctx):
        """The parameters, ``--help`` and any added after construction (typer's completion
        flags) included, each conformed."""
        params = super().get_params(ctx)
        for param in params:
            _conform_param(param)
        panels = [p.rich_help_panel for p in params if getattr(p, "rich_help_panel", None)]
        if panels:
            help_option = self.get_help_option(ctx)
            for param in params:
                if help_option is not None and param.name == help_option.name:
                    param.rich_help_panel = panels[-1]
        return params


class CalimonCommand(_Conventions, TyperCommand):
    """A command rendered by the conventions of this module."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._conform()

    def collect_usage_pieces(self, ctx) -> list[str]:
        """``[OPTIONS]``, then each argument: ``NAME`` when required, ``[NAME]`` when not."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                pieces.append(param.metavar if param.required else f"[{param.metavar}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


class CalimonGroup(_Conventions, TyperGroup):
    """A command group rendered by the conventions of this module."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._conform()


def conform(app: typer.Typer) -> None:
    """Render ``app``'s commands and groups, recursively, with `CalimonCommand` and
    `CalimonGroup` (where a command or group names a class of its own, it is kept)."""
    if isinstance(app.info.cls, DefaultPlaceholder) or app.info.cls in (None, TyperGroup):
        app.info.cls = CalimonGroup
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = CalimonCommand
    for group in app.registered_groups:
        if isinstance(group.cls, DefaultPlaceholder) or group.cls in (None, TyperGroup):
            group.cls = CalimonGroup
        if group.typer_instance is not None:
            conform(group.typer_instance)
