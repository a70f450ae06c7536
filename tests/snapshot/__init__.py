"""Tests of the snapshot package."""
