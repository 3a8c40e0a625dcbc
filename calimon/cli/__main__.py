"""``python -m calimon.cli ...`` runs the same commands as ``calimon ...``."""

from calimon.cli import app

app(prog_name="calimon")
