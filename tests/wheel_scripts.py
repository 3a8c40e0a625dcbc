"""The scripts the package suite (tests/test_wheel.py) runs with the Python of a venv made from
the wheel, outside the checkout: each prints one JSON document (or lines) the test reads.

- `LOOKUPS` (argument: a folder with ``c/`` configs and ``h/`` heads): every shipped config and
  head looked up by name, the amb-open source table, where new heads go, an unknown name's
  error; then the same with $CALIMON_CONFIGS and $CALIMON_HEADS_DIR set to that folder.
- `EXTRAS` (arguments: modules to hide from the import system, then one JSON check each:
  ``[extra, "cli", ARGS...]``, ``[extra, "import", MODULE]`` or ``[extra, "call", FOLDER]``, the
  LoRA baseline's loader): each check's exit code, last line and exception.
- `INSPECT` (argument: an approval policy file): where calimon is imported from, the approvers
  Inspect built, and whether its registry finds calimon's scorer and scanner by name.
"""

LOOKUPS = r'''
import json, os, sys
from pathlib import Path
from calimon import resources
from calimon.config import config_names, named_config_path
from calimon.data.amb_open import SOURCE_TABLE
from calimon.data.amb_open.frames import SOURCE_TABLE as FRAMES_TABLE
from calimon.errors import CalimonError
from calimon.scoring.probes.artifacts import find_head_card, heads_dir
from calimon.scoring.probes.bundle import find_bundle

shipped = resources.SHIPPED
ref = lambda model: type("Ref", (), {"name": model})()
def lookups():
    out = {}
    for p in sorted((shipped / "configs").glob("*/*.yaml")):
        out[f"configs/{p.parent.name}/{p.name}"] = str(named_config_path(p.parent.name, p.stem))
    for p in sorted((shipped / "heads").glob("*/*.card.yaml")):
        name = p.name.removesuffix(".card.yaml")
        out[f"heads/{p.parent.name}/{p.name}"] = str(find_head_card(name, ref(p.parent.name), None))
    for p in sorted((shipped / "heads").glob("*/*.bundle.yaml")):
        name = p.name.removesuffix(".bundle.yaml")
        out[f"heads/{p.parent.name}/{p.name}"] = str(find_bundle(name, p.parent.name))
    return out
def error(call):
    try:
        call()
    except CalimonError as exc:
        return str(exc)
result = {"shipped": str(shipped), "checkout": resources.checkout_root(),
          "files": sorted(p.relative_to(shipped).as_posix() for p in shipped.rglob("*")
                          if p.is_file()),
          "package": lookups(), "sources": [str(SOURCE_TABLE), str(FRAMES_TABLE)],
          "write": str(heads_dir()),
          "no_model": error(lambda: named_config_path("models", "nope")),
          "no_head": error(lambda: find_head_card("nope", ref("smollm2-135m"), None))}
mine = Path(sys.argv[1])
os.environ["CALIMON_CONFIGS"], os.environ["CALIMON_HEADS_DIR"] = str(mine / "c"), str(mine / "h")
result["told"] = {"model": str(named_config_path("models", "smollm2-135m")),
                  "prompt": str(named_config_path("prompts", "direct")),
                  "head": str(find_head_card("amb-open-seq", ref("smollm2-135m"), None)),
                  "user-model": str(named_config_path("models", "my-model")),
                  "listed": "my-model" in config_names("models"), "write": str(heads_dir()),
                  "no_model": error(lambda: named_config_path("models", "nope"))}
print(json.dumps(result))
'''


EXTRAS = r'''
import importlib, json, sys
for name in filter(None, sys.argv[1].split(",")):
    sys.modules[name] = None  # as if the extra were not installed
from typer.testing import CliRunner
from calimon.cli import app
from calimon.errors import MissingExtraError
result = {}
for spec in sys.argv[2:]:
    extra, how, *args = json.loads(spec)
    if how == "cli":
        r = CliRunner().invoke(app, args)
        result[extra] = [r.exit_code, [ln for ln in r.output.splitlines() if ln.strip()][-1:],
                         type(r.exception).__name__]
        continue
    try:
        if how == "import":
            importlib.import_module(args[0])
        else:
            from calimon.studies.heads.lora import load_lora_verdict
            load_lora_verdict(None, args[0])
    except MissingExtraError as exc:
        result[extra] = [exc.exit_code, [f"calimon: error: {exc}"], "SystemExit"]
print(json.dumps(result))
'''


INSPECT = r'''
import sys
import calimon
from inspect_ai._util.registry import registry_info, registry_lookup
from inspect_ai.approval import read_approval_policies
first, second = read_approval_policies(sys.argv[1])
print(calimon.__file__)
print(registry_info(first.approver).name, registry_info(second.approver).name)
import inspect_scout
print(registry_lookup("scorer", "calimon/monitor_scorer") is not None,
      registry_lookup("scanner", "calimon/monitor_scanner") is not None)
'''
