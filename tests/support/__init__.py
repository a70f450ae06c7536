"""Helpers the tests share: models, drivers, comparisons, fault-injecting file systems."""
