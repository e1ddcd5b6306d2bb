"""Bisect: which difference between a good and a bad profile caused a regression."""
