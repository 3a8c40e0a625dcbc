"""The wheel's package data (pyproject.toml holds everything else): the build copies the
checkout's top-level configs/, heads/ and benchmarks/amb-open/sources.json, which stay the source
of truth, into calimon/shipped/, where an installed calimon reads them (calimon/resources.py).
An editable install copies nothing: calimon then reads the checkout's folders themselves."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("configs", "heads", "benchmarks/amb-open/sources.json")  # MANIFEST.in: the sdist


class BuildPyWithShipped(build_py):
    """build_py, then the SHIPPED files into <build_lib>/calimon/shipped/."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "calimon" / "shipped"
        shutil.rmtree(target, ignore_errors=True)  # nothing left over from an earlier build
        for rel in SHIPPED:
            src = Path(rel)
            if not src.exists():
                raise FileNotFoundError(f"{rel}: missing from the source tree (MANIFEST.in "
                                        "puts it in the sdist)")
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", ".*"))
            else:
                shutil.copy2(src, dest)


setup(cmdclass={"build_py": BuildPyWithShipped})
