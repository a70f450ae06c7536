"""Integrations of the session with trainers that no one here wrote.

- `replay.integrations.trl`: TRL's `AsyncGRPOTrainer` (TRL 1.16.0), journaled where TRL moves
  each prompt group (the `trl` extra). See docs/trl.md.
- `replay.integrations.verl`: verl's fully_async trainer (verl 0.9.1), journaled where verl
  moves each prompt (the `verl` extra). See docs/verl.md.

What every integration shares imports no framework: `pipeline` (the journal's side of a rollout
loop, and a pipeline generating groups in a thread) and `checkpoint_folders` (a framework's
checkpoint folders sealed, verified, set aside). Each framework's modules hold only what is that
framework's; each checks the framework's version as it is imported. The CPU stand-ins the tests
run them with live under tests/support/.

Nothing is imported here: `import replay` and `import replay.integrations` never import trl,
verl, transformers or torch; importing one integration module imports its framework.
"""
