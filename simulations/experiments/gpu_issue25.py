"""Issue 25's GPU parts in one device call, resumable, within one time budget; and the reports from its files.

``run`` (on the device; python3 with torch, transformers, numpy only), in order:

1. the stage-1 recipe search on public data only (simulations/experiments/stage1_recipe.py, every
   candidate; its rule is fixed in its docstring) -> OUT/recipe.json;
2. seed 000 stage 1 (SST-2 and MR, worst-case epsilon 1/3/8, 3 seeds, public-only / non-private /
   private / combined; _seed000_stage1_run.py) with the recipe, dimension and clip quantile the rule
   chose -> OUT/stage1/results.json; then the same recipe at the shipped dim 16, clip quantile 0.5
   (when the choice differs) -> OUT/stage1_dim16/results.json;
3. seed 004's Intent and MRPC cells (seed004_bits.py run: up to 20 runs, 50 epochs) with what is
   left -> OUT/seed004_bits/{results,run}.json.

Each step gets a share of the budget (steps that do not fit are skipped and say so in the log); a
rerun with the same OUT and WORK resumes. Checkpoints (tuned layers, encodings) live in WORK, not OUT.

    python3 simulations/experiments/gpu_issue25.py run --model .gpu/minilm --data .gpu/data \\
        --out $OUT --work /tmp/issue25 --device cuda --time-budget 450
    python -m ldpfed.simulations.experiments.gpu_issue25 report --results DIR --command "..."   # here, afterwards
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (the GPU command): make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ROOT = Path(__file__).resolve().parents[2]
FULL_INPUT = ROOT / "simulations" / "reproductions" / "seed000_stage1_full.json"
REPORTS = ROOT / "simulations" / "reports"
SHARES = {"recipe": 0.45, "stage1": 0.72, "stage1_dim16": 0.77}
"""Cumulative share of the budget by which each step must end (seed 004 gets the rest)."""


def stage1_input(chosen: dict[str, Any], dim: int, quantile: float) -> dict[str, Any]:
    """The full setting's runner input with the chosen recipe at ``dim`` and ``quantile``."""
    config = json.loads(FULL_INPUT.read_text())
    spec = chosen["spec"]
    config.update(setting="full, stage-1 recipe " + chosen["candidate"], dim=dim, clip_quantile=quantile)
    config["stage1"] = {**config["stage1"], "layers": spec["layers"], "epochs": spec["epochs"],
                        "learning_rate": spec["learning_rate"]}
    if spec["tweets"]:
        config["public_tweets"] = spec["tweets"]
    config["stage1_note"] = (
        f"The recipe ({chosen['candidate']}), dim and clip quantile were chosen on public data only by "
        "simulations/experiments/stage1_recipe.py's rule (report: simulations/reports/experiments/stage1_recipe/); "
        "seed 0's shipped layers are that search's seed-0 fine-tune (same recipe, public set and seed). ")
    return config


def step(name: str, log: list[str], fn: Any) -> Any:
    """Run one step; an exception is logged and the next step goes on."""
    began = time.monotonic()
    print(f"== {name}", flush=True)
    try:
        out = fn()
    except Exception:  # noqa: BLE001 - one failed step must not lose the others
        traceback.print_exc()
        log.append(f"{name}: FAILED after {time.monotonic() - began:.1f} s")
        return None
    log.append(f"{name}: {time.monotonic() - began:.1f} s")
    print(f"== {name} done in {time.monotonic() - began:.1f} s", flush=True)
    return out


def run(args: argparse.Namespace) -> int:
    """The device call."""
    from ldpfed.simulations.experiments import stage1_recipe
    from ldpfed.simulations.reproductions import _seed000_stage1_run as runner
    from ldpfed.simulations.reproductions import seed004_bits

    started, total = time.monotonic(), args.time_budget
    left = lambda share: started + share * total - time.monotonic()  # noqa: E731
    args.out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    recipe = step("recipe search", log, lambda: stage1_recipe.run_all(
        args.model, args.data, args.work / "recipe", args.device, args.out / "recipe.json", left(SHARES["recipe"]),
        args.smoke))
    chosen = (recipe or {}).get("chosen")
    if chosen is None:
        print("no recipe chosen: stage 1 not run", flush=True)
    else:
        print(f"chosen: {json.dumps(chosen)}", flush=True)
        checkpoint = args.work / "stage1"
        checkpoint.mkdir(parents=True, exist_ok=True)
        seed0 = checkpoint / "stage1-seed0.safetensors"
        if not seed0.is_file() and not args.smoke:  # the search's seed-0 fine-tune is the runner's seed 0
            shutil.copyfile(args.work / "recipe" / f"{chosen['candidate']}.safetensors", seed0)
        units = [("stage1", chosen["dim"], chosen["clip_quantile"])]
        if (chosen["dim"], chosen["clip_quantile"]) != (16, 0.5):
            units.append(("stage1_dim16", 16, 0.5))
        for unit, dim, quantile in units:
            config = stage1_input(chosen, dim, quantile)
            if args.smoke:
                config.update(seeds=1, stage1_note="SMOKE TEST of the code path, no result. ", stage1={**config["stage1"], "layers": 1, "epochs": 1}, public_limit=200,
                              tasks={t: {**s, "train_limit": 300, "dev_limit": 100} for t, s in config["tasks"].items()})
            path = args.work / f"{unit}-input.json"
            path.write_text(json.dumps(config, indent=1) + "\n")
            step(unit, log, lambda: runner.main([
                "--input", str(path), "--model", str(args.model), "--data", str(args.data), "--out", str(args.out / unit),
                "--checkpoint", str(checkpoint), "--time-budget", str(max(1.0, left(SHARES[unit]))), "--device", args.device,
            ]))
    budget = total - (time.monotonic() - started) - 5
    extra = ["--train-limit", "400", "--test-limit", "100", "--seeds", "2", "--epochs", "1", "--chunk", "1"] if args.smoke else []
    step("seed004 intent mrpc", log, lambda: seed004_bits.main([
        "run", "--model", str(args.model), "--data", str(args.data), "--out", str(args.out / "seed004_bits"),
        "--device", args.device, "--time-budget", str(max(1.0, budget)), "--threads", str(args.threads), *extra,
    ]))
    print("== summary\n" + "\n".join(log) + f"\ntotal {time.monotonic() - started:.1f} s", flush=True)
    return 0


def report(args: argparse.Namespace) -> int:
    """Every report from a device call's files (here: needs the full environment)."""
    python = sys.executable
    res = args.results
    commands = []
    if (res / "recipe.json").is_file():
        commands.append([python, "-m", "ldpfed.simulations.experiments.stage1_recipe", "--report", "--results", str(res / "recipe.json"),
                         "--command", f"{args.command or 'gpu_issue25.py run'} (its step 1)"])
    for unit, folder in (("stage1", "recipe"), ("stage1_dim16", "recipe_dim16")):
        if (res / unit / "results.json").is_file():
            commands.append([python, "-m", "ldpfed.simulations.reproductions.seed000_stage1", "--report", str(res / unit / "results.json"),
                             "--out", str(REPORTS / "reproductions" / "seed000_stage1" / folder),
                             "--command", f"{args.command or 'gpu_issue25.py run'} (its step 2: {unit})"])
    if (res / "seed004_bits" / "results.json").is_file():
        commands.append([python, "-m", "ldpfed.simulations.reproductions.seed004_bits", "report", "--results", str(res / "seed004_bits"),
                         "--command", args.command or "gpu_issue25.py run (its step 3)"])
    for command in commands:
        print("+", " ".join(command[:4]), flush=True)
        subprocess.run(command, check=True, cwd=ROOT)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command_name", required=True)
    go = sub.add_parser("run", help="the device call")
    go.add_argument("--model", type=Path, required=True)
    go.add_argument("--data", type=Path, required=True)
    go.add_argument("--out", type=Path, required=True)
    go.add_argument("--work", type=Path, required=True, help="checkpoints (not copied back)")
    go.add_argument("--device", default="cuda")
    go.add_argument("--time-budget", type=float, default=450.0)
    go.add_argument("--threads", type=int, default=12)
    go.add_argument("--smoke", action="store_true", help="a tiny CPU test of the whole path (no result)")
    rep = sub.add_parser("report", help="write every report from a device call's files")
    rep.add_argument("--results", type=Path, required=True, help="the folder the device call's OUT came back to")
    rep.add_argument("--command", default="", help="the device command as run, and the device (shown in the reports)")
    args = parser.parse_args(argv)
    return run(args) if args.command_name == "run" else report(args)


if __name__ == "__main__":
    raise SystemExit(main())
