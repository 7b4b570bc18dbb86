"""One-off experiments and studies (not imported by the CLI)."""
