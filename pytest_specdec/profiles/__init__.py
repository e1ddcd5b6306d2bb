"""Profiles: the YAML schema, where the profile file is found, checkpoint headers."""
