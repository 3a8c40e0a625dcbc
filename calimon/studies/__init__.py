"""Studies: what calimon measures with scored readings (curve, spans, robustness, shift, head training, model checks)."""
