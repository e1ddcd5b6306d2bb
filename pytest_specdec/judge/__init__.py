"""Judging: thresholds, stored compares, sweeps, the statistics that decide them."""
