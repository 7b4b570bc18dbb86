"""A small study from Python: one privacy budget, one seed, the report and each run's figures.

    python simulations/examples/small_study.py

The study file is written next to the runs (runs/examples/small_study); a second call resumes it,
rerunning nothing that finished. Each run is an ``ldpfed simulate`` of four users on 200 generated records;
list more values on an axis (``epsilon = [1.0, 8.0]``) to compare them, one run per value and seed.
"""

from pathlib import Path

import ldpfed

folder = Path("runs/examples/small_study")
folder.mkdir(parents=True, exist_ok=True)
config = folder / "study.toml"
config.write_text(
    'title = "One budget"\n'
    "seeds = [0]\n"
    "[base]\n"
    'data = "generated:200"\n'
    "users = 4\n"
    "[axes]\n"
    "epsilon = [8.0]\n"
)

result = ldpfed.study(config, out=folder)
for name, run in result.results().items():
    print(f"{name}: accuracy {run.summary['accuracy_local']:.3f}, epsilon spent {run.summary['epsilon_sentence_max']:.3g}")
print(f"report: {result.report}")
