"""Seed 000, stage 1 for a transformer encoder: SST-2 and Movie Review polarity at worst-case epsilon 1, 3, 8.

The server fine-tunes MiniLM's top layers on its public labelled sentences (Sentiment Labelled
Sentences: the 2,400 of the train split that ``--public`` reads) and ships them (fed.encoders.tuned); the experiment itself is
``_seed000_stage1_run.py`` (self-contained, for a GPU). This module writes its input (the noise
multipliers from ldpfed's own calibration), runs it on the CPU here in a reduced setting, and
turns a results.json (from here or from the GPU) into the report:

    ldpfed reproduce seed000_stage1 [--setting reduced|full]      # run here, then the report
    ldpfed reproduce seed000_stage1 --write-input FILE --setting full  # the GPU run's input
    ldpfed reproduce seed000_stage1 --report RESULTS.json [--command "..."]   # report only
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.simulations.report_file import write_report
from ldpfed.simulations.reproductions._cells import fmt_range

DESCRIPTION = "Seed 000 stage 1 (MiniLM fine-tuned on public data, shipped by fingerprint): SST-2 and MR at epsilon 1, 3, 8"
ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
REPORT_DIR = ROOT / "simulations" / "reports" / "reproductions" / "seed000_stage1"
EPSILONS = (1.0, 3.0, 8.0)
DELTA = 1e-5
STAGE1 = {"layers": 6, "epochs": 2, "batch_size": 32, "learning_rate": 5e-5}
"""Stage 1: all six transformer layers (word embeddings frozen: 42.6 MB shipped), 2 epochs, as the issue's quick experiment."""
SETTINGS: dict[str, dict[str, Any]] = {
    "full": {
        "seeds": 3,
        "tasks": {"sst2": {"folder": "sst2"}, "mr": {"folder": "mr"}},
    },
    "reduced": {
        "seeds": 1,
        "stage1": {**STAGE1, "layers": 2, "epochs": 1},
        "tasks": {
            "sst2": {"folder": "sst2", "train_limit": 4000},
            "mr": {"folder": "mr", "train_limit": 3000, "dev_limit": 1000},
        },
    },
}
"""full: every training record reports (SST-2 67,349; MR 8,530 of the 80/20 split), all dev records.
reduced (2 shared CPU cores here): seeded samples of the training (and MR dev) records, one seed, and a
cheaper stage 1 (the top 2 layers, 1 epoch: 14.2 MB shipped)."""
ISSUE_QUICK = {
    "public_only": (0.766, 0.791),
    "nonprivate": (0.764, 0.795),
    "private 1": (0.649, 0.779),
    "private 3": (0.667, 0.788),
}
"""Issue 25's quick experiment (20,000 SST-2 reports, base -> stage 1), for comparison."""
GOAL = {"1": 0.78, "3": 0.80}
"""Issue 25's goal on SST-2, worst case, all 67k reports."""
NAMES = {"sst2": "SST-2", "mr": "Movie Review polarity"}


def noise_multipliers() -> dict[str, float]:
    """sigma / sensitivity of the Gaussian randomizer calibrated by ldpfed to each epsilon for one release."""
    from ldpfed.fed.randomizers.gaussian import GaussianRandomizer

    out = {}
    for eps in EPSILONS:
        randomizer = GaussianRandomizer.calibrated(eps, DELTA, 1, {"clip": 1.0})
        out[f"{eps:g}"] = float(randomizer.sigma / randomizer.event.sensitivity)
    return out


def make_input(setting: str) -> dict[str, Any]:
    """The runner's input JSON for ``setting``."""
    return {
        "setting": setting,
        "public": "sentiment_labelled_sentences",
        "dim": 16,
        "clip_quantile": 0.5,
        "delta": DELTA,
        "noise_multiplier": noise_multipliers(),
        "stage1": STAGE1,
        **SETTINGS[setting],
    }


def report_lines(results: dict[str, Any], command: str) -> list[str]:
    """The report's markdown from a runner's results.json."""
    config = results["config"]
    cells = results["cells"]
    seeds = sorted({int(key.split("/")[2]) for key in cells})
    epsilons = list(config["noise_multiplier"])
    public = next(iter(cells.values()))["public"] if cells else 0
    tweets = config.get("public_tweets", 0)
    lines = [
        "# Seed 000, stage 1 for a transformer encoder (issue 25)",
        "",
        f"Setting: **{config['setting']}**"
        + ("" if results.get("complete") else " (INCOMPLETE: cells " + ", ".join(results.get("skipped", [])) + " not run)")
        + f"; device: {results.get('device')}; {results.get('elapsed_s')} s of wall time in its last run (a resumed run "
        f"counts only its own). Seeds: {len(seeds)} "
        "(mean [min, max]). Command:",
        "",
        "```bash",
        command,
        "```",
        "",
        f"What runs. The server fine-tunes MiniLM's top {config['stage1']['layers']} transformer layers (word embeddings "
        f"frozen) with a linear head on its public sentences only ({config['public']}, the {public - tweets:,} of its train "
        "split, as `--public` reads it"
        + (f", plus {tweets:,} positive/negative TweetEval sentiment tweets, a seeded sample of its test split" if tweets else "")
        + f"; {config['stage1']['epochs']} epoch(s), lr {config['stage1']['learning_rate']:g}) "
        "and ships the layers as one safetensors file; the users' encoder is "
        "rebuilt from that file as a device loads it. " + config.get("stage1_note", "") + "Base: MiniLM as shipped. Both: PCA to "
        f"{config['dim']} dims on the public encodings, L2 clip C at the {config['clip_quantile']:g}-quantile of the "
        "public rows' norms, one report per training record with Gaussian noise of std z * 2C, z from ldpfed's "
        f"worst-case calibration for one release at delta {config['delta']:g} (z: "
        + ", ".join(f"epsilon {e} -> {z:.3f}" for e, z in config["noise_multiplier"].items())
        + "); sentence-level worst-case epsilon, no amplification; labels public. The noise is drawn by numpy with "
        "that sigma inside the runner (not through ldpfed's randomizer objects). The server's noise-aware "
        "discriminant is scored on the clean dev encodings (local inference). Combined: the reports plus the public "
        "data as one more inverse-variance group, its domain shift (squared gap of public and report class means, "
        "less both sampling variances, averaged over coordinates) added to its class means' variance.",
        "",
    ]
    for task, spec in config["tasks"].items():
        rows = [cells[k] for k in cells if k.startswith(f"{task}/")]
        if not rows:
            continue
        first = rows[0]
        lines += [
            f"## {NAMES.get(task, task)}",
            "",
            f"{first['train']:,} training reports, {first['dev']:,} dev records, {first['public']:,} public records.",
            "",
            f"| encoder | public only | non-private (shipped {config['dim']}-d) | "
            + " | ".join(f"private eps {e}" for e in epsilons)
            + " | "
            + " | ".join(f"combined eps {e}" for e in epsilons)
            + " | clip C |",
            "|---" * (4 + 2 * len(epsilons)) + "|",
        ]
        for encoder, label in (("base", "MiniLM (no stage 1)"), ("stage1", "stage 1 (shipped)")):
            got = [cells[k] for k in sorted(cells) if k.startswith(f"{task}/{encoder}/")]
            if not got:
                continue
            parts = [fmt_range([g["public_only"] for g in got]), fmt_range([g["nonprivate"] for g in got])]
            parts += [fmt_range([g["private"][e] for g in got]) for e in epsilons]
            parts += [fmt_range([g["combined"][e] for g in got]) for e in epsilons]
            parts.append(fmt_range([g["clip"] for g in got]))
            lines.append(f"| {label} | " + " | ".join(parts) + " |")
        lines.append("")
        best = []
        for e in epsilons:
            for g in [cells[k] for k in sorted(cells) if k.startswith(f"{task}/stage1/")]:
                best.append(g["combined"][e] > max(g["public_only"], g["private"][e]))
        if best:
            lines.append(
                f"Combined above both public-only and private-only (stage 1): {sum(best)} of {len(best)} (epsilon, seed) cells."
            )
            lines.append("")
    stage1 = results.get("stage1", {})
    if stage1:
        lines += ["## Shipped weights", "", "| seed | bytes | fingerprint (sha256) | fine-tune seconds |", "|---|---|---|---|"]
        for seed, info in sorted(stage1.items()):
            lines.append(f"| {seed} | {info.get('bytes', 0):,} | `{info.get('fingerprint', '')}` | {info.get('seconds', '-')} |")
        lines.append("")
    goal = " and ".join(f">= {v} at epsilon {e}" for e, v in GOAL.items())
    lines += [
        "## Against the issue",
        "",
        f"Goal (issue 25): SST-2, worst case, all 67k reports, {goal}. "
        + (
            "This run is the reduced setting, so it says nothing about the goal."
            if not config["setting"].startswith("full")
            else "Compare the SST-2 stage-1 private and combined columns above."
        )
        + " The issue's quick experiment (20,000 SST-2 reports, 16-d PCA, plain noisy LDA, MiniLM fine-tuned "
        "with a linear head for 2 epochs), base -> stage 1: "
        + "; ".join(f"{k} {a:.3f} -> {b:.3f}" for k, (a, b) in ISSUE_QUICK.items())
        + ".",
        "",
        "Differences from the paper (seed 000): the paper's stage 1 pre-trains on the server's own data without "
        "fixing how; here it is a supervised fine-tune on public sentences from other sources (Sentiment Labelled "
        "Sentences: Amazon, Yelp, IMDB" + (", and TweetEval tweets" if tweets else "") + "). The paper's encoders are a BiLSTM "
        "and BERT with 128-d outputs and its epsilon is the amplified GDP-CLT estimate at sensitivity C; here MiniLM "
        f"projected to {config['dim']} dims and worst-case epsilon at sensitivity 2C "
        "(no amplification), one release per record.",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    """Write the input, run it here, or write the report from a results.json."""
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="reduced")
    parser.add_argument("--write-input", type=Path, help="only write the runner's input JSON here")
    parser.add_argument("--report", type=Path, help="only write the report from this results.json")
    parser.add_argument("--command", default="", help="the command that made --report's results (shown in the report)")
    parser.add_argument("--work", type=Path, default=Path("runs/reproductions/seed000_stage1"), help="run folder (resumes)")
    parser.add_argument("--out", type=Path, default=REPORT_DIR, help="report folder")
    parser.add_argument("--time-budget", type=float, default=3600.0)
    parser.add_argument("--data", type=Path, default=SHARED, help="folder of the task and public data folders")
    args = parser.parse_args(argv)
    if args.write_input:
        args.write_input.parent.mkdir(parents=True, exist_ok=True)
        args.write_input.write_text(json.dumps(make_input(args.setting), indent=1) + "\n")
        print(f"wrote {args.write_input}")
        return 0
    if args.report:
        results = json.loads(args.report.read_text())
        command = args.command or f"ldpfed reproduce seed000_stage1 --report {args.report}"
    else:
        from ldpfed.fed.encoders.hf import minilm_path
        from ldpfed.simulations.reproductions import _seed000_stage1_run as runner

        args.work.mkdir(parents=True, exist_ok=True)
        path = args.work / "input.json"
        path.write_text(json.dumps(make_input(args.setting), indent=1) + "\n")
        results = runner.main([
            "--input", str(path), "--model", str(minilm_path()), "--data", str(args.data), "--out", str(args.work),
            "--time-budget", str(args.time_budget),
        ])
        command = "ldpfed reproduce seed000_stage1 " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(args.out / "README.md", report_lines(results, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
