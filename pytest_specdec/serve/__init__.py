"""Serving: launch, wait for readiness, supervise, share across xdist workers, stop."""
