"""``python -m ldpfed.simulations.benchmarks.device_costs``: measure what a device pays, on this machine."""

from ldpfed.simulations.benchmarks.device_costs.benchmark import main

raise SystemExit(main())
