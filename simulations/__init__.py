"""Entry points, experiment configs, sweeps, reports and plots."""
