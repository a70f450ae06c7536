"""The test suite: one directory per package (journal, snapshot, replay, cli, examples), system/ for
whole-project checks, support/ for the helpers they share."""
