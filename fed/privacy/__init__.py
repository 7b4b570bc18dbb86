"""Privacy events, composition, ledgers and calibration."""
