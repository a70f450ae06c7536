"""Tests of journal-inspect (replay.cli)."""
