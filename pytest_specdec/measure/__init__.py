"""Measuring: workloads, the streaming client, per-request records to metrics, repeats, paired arms, result records."""
