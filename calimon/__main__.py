"""``python -m calimon ...`` runs the same commands as ``calimon ...``."""

from calimon.cli import app

app(prog_name="calimon")
