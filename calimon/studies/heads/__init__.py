"""Training and evaluating probe heads (the monitors they make are read in calimon.scoring.probes)."""
