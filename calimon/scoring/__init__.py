"""Scoring: backends, prompted and probe monitors, engines, the run store."""
