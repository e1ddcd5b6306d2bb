"""Reporting: lines for the terminal, markdown, plots, trends, merged runs, the pytest-benchmark bridge."""
