"""Tests of the replay package."""
