"""The pytest run's wiring: options, markers, the session, the per-test verdict, the summary."""
