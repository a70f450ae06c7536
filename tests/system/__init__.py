"""Whole-project checks: crash states, I/O error sweep, fuzzing, packaging, CI, dependencies."""
