"""``python -m calimon.cli ...`` runs the same commands as ``calimon ...``."""

from calimon.__main__ import main

main()
