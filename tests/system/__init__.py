"""Whole-project checks: crash states, I/O error sweep, fuzzing, soak, packaging, CI, dependencies."""
