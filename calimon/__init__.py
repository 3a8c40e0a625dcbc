"""calimon: calibrated, span-level LLM misbehavior monitors."""

__version__ = "0.1.0"
