"""Benchmark builders and loaders. See `calimon.data.registry` for the available benchmarks."""
