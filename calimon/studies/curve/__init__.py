"""The curve study: score, calibrate, compute the MR/FAR curve and its operating points, write the run folder."""
