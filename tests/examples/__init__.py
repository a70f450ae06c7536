"""Tests of the example trainers."""
