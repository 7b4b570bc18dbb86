"""What a node runs: its hosts, users and cohorts, the requests they serve, and the one release pipeline."""
