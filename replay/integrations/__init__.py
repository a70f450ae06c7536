"""Integrations of the session with trainers that no one here wrote.

- `replay.integrations.trl`: TRL's `AsyncGRPOTrainer` (TRL 1.16.0), journaled where TRL moves
  each prompt group (the `trl` extra); `replay.integrations.trl_cpu`: what stands in for the
  GPU and the vLLM server when it runs on a CPU (tests only). See docs/trl.md.
- `replay.integrations.verl`: verl's fully_async trainer (verl 0.9.1), journaled where verl
  moves each prompt (the `verl` extra); its CPU stand-ins live under tests/. See docs/verl.md.

Nothing is imported here: `import replay` and `import replay.integrations` never import trl,
verl, transformers or torch; importing one integration module imports its framework.
"""
