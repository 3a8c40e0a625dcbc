"""Arrays in, results out: metrics, curves, intervals, class support, readouts."""
