"""The README of the seed-003 reproduction (simulations/reproductions/seed003_snd.py) from its results.json.

Shows the seed's figures (Tables 1, 5 and 11) beside ours (mean and range over seeds), each eta
with the epsilon it implies under the seed's statement and under ldpfed's strict accounting, and
the differences that remain. A verdict is written only for the full setting with all units run
on at least three seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.simulations.reproductions._cells import fmt_range
from ldpfed.simulations.reproductions._seed003_strict import STRICT_COMMAND, strict_eta
from ldpfed.simulations.reproductions.seed003_snd import DIAGNOSTIC_COMMAND, GPU_COMMAND, METHODS

DELTA = 1e-5
BUDGET = 10.0
"""A per-record epsilon used to say what eta ldpfed's strict accounting would allow."""

SEED_TABLE1 = {  # task: {eta: (DistilBERT, Bert Base, Bert Large)}, accuracy; eta None = infinity
    "qqp": {100: (0.632, 0.667, 0.676), 500: (0.649, 0.688, 0.684), None: (0.683, 0.728, 0.706)},
    "mrpc": {100: (0.683, 0.689, 0.684), 500: (0.691, 0.725, 0.689), None: (0.695, 0.742, 0.701)},
    "rte": {100: (0.578, 0.592, 0.590), 500: (0.580, 0.610, 0.601), None: (0.592, 0.616, 0.621)},
}
"""Seed 003 Table 1: accuracies on downstream tasks for BERT (SnD; eta = infinity: no noise)."""
SEED_TABLE5 = {  # eta: {method: (DistilBERT, Bert Base, Bert Large)}, QQP AUC
    50: {"tokembpriv": (0.502, 0.511, 0.522), "snd": (0.583, 0.674, 0.639)},
    100: {"tokembpriv": (0.518, 0.535, 0.525), "snd": (0.600, 0.675, 0.655)},
    500: {"tokembpriv": (0.521, 0.557, 0.541), "snd": (0.610, 0.691, 0.657)},
}
"""Seed 003 Table 5: AUC for BERT models on QQP (TokEmbPriv and SnD rows)."""
SEED_TABLE11_COS = {50: {"tokembpriv": 0.097, "snd": 0.870}, 100: {"tokembpriv": 0.098, "snd": 0.862}, 500: {"tokembpriv": 0.105, "snd": 0.935}}
"""Seed 003 Table 11: cosine to the clean output embedding, Bert Base on QQP."""
METHOD_NAMES = {
    "snd": "SnD (denoised)", "snd_without_output": "denoiser without e_n", "server_output": "e_n (no denoiser)",
    "tokembpriv": "TokEmbPriv", "local": "encoder run locally",
}
SAMPLER_NAMES = {"coordinate": "authors' per-coordinate", "dchi": "text's d_chi"}


def _stat(values: list[float]) -> str:
    """mean [min, max] of ``values`` (3 decimals), or the one value."""
    return fmt_range(values, single=" (1 seed)")


def _values(results: dict[str, Any], sampler: str, eta: float, task: str, method: str, metric: str) -> list[float]:
    units = [u for u in results["units"].values() if u["sampler"] == sampler and u["eta"] == eta]
    return [u["tasks"][task]["methods"][method][metric] for u in units if task in u["tasks"]]


def _local(results: dict[str, Any], task: str, metric: str) -> list[float]:
    return [v[metric] for k, v in results["local"].items() if k.split("/")[0] == task]


def _epsilon_rows(results: dict[str, Any]) -> list[str]:
    from ldpfed.fed.privacy.composition import compose_epsilon
    from ldpfed.fed.randomizers.split_denoise import SplitDenoiseRandomizer

    bounds = results["bounds"]
    lines = [
        "| sampler | eta | seed's statement per token (eta x 2C) | true per token | per record, strict (tokens: mean / max) | eta for a per-record epsilon of 10 |",
        "|---|---|---|---|---|---|",
    ]
    seen = set()
    for unit in results["units"].values():
        key = (unit["sampler"], unit["eta"])
        if key in seen:
            continue
        seen.add(key)
        sampler, eta = key
        diameter = bounds["l2_diameter"] if sampler == "dchi" else bounds["l1_diameter"]

        def kind(eta: float, diameter: float, tokens: int, sampler: str = sampler) -> Any:
            return SplitDenoiseRandomizer.sampler_event(sampler, eta, diameter, tokens)

        tokens = [row["tokens_per_record"] for row in unit["tasks"].values()]
        mean_tokens = float(np.mean([t["mean"] for t in tokens]))
        most = max(t["max"] for t in tokens)
        record_mean = compose_epsilon({kind(eta, diameter, max(1, round(mean_tokens))): 1}, DELTA)
        record_max = compose_epsilon({kind(eta, diameter, most): 1}, DELTA)
        allowed = strict_eta(BUDGET, most, diameter, sampler, DELTA)
        lines.append(
            f"| {SAMPLER_NAMES[sampler]} | {eta:g} | {eta * bounds['l2_diameter']:.4g} | {eta * diameter:.4g} | "
            f"{record_mean:.4g} / {record_max:.4g} ({mean_tokens:.0f} / {most}) | {allowed:.2g} |"
        )
    return lines


def _verdict_ready(results: dict[str, Any]) -> tuple[bool, str]:
    seeds = {u["seed"] for u in results["units"].values()}
    if results.get("setting") != "full":
        return False, "Reduced setting on a CPU: these figures check the pipeline only; no verdict is drawn from them."
    if not results.get("complete") or len(seeds) < 3:
        return False, (f"The full run is incomplete ({len(results['units'])} units, seeds {sorted(seeds)}): "
                       "no verdict until every unit has run on at least three seeds.")
    return True, ""


def render(results: dict[str, Any], results_path: str, diagnostic: tuple[dict[str, Any], str] | None = None,
           strict_run: tuple[dict[str, Any], str] | None = None) -> str:
    """The README text for ``results`` (and, when given, a longer-training run's and a strict run's results and paths)."""
    config = results["config"]
    setting = config["setting"]
    ready, why = _verdict_ready(results)
    seeds = sorted({u["seed"] for u in results["units"].values()})
    lines = [
        "# Seed 003 (Split-N-Denoise), Tables 1 and 5: QQP, MRPC, RTE at the seed's eta values",
        "",
        f"Setting **{results['setting']}** on {config.get('gpu') or config['device']}; seeds {seeds}; "
        f"{'all units run' if results.get('complete') else 'not all units run'}; {results.get('elapsed_seconds', '?')} s. "
        f"Results: `{results_path}`. Commands: `python -m ldpfed.simulations.reproductions.seed003_snd` (reduced, CPU); "
        f"`{GPU_COMMAND}` (full, GPU); "
        "`python -m ldpfed.simulations.reproductions.seed003_snd report --results <folder>` (this file).",
        "",
    ]
    if not ready:
        lines += [f"**{why}**", ""]
    if results["setting"] != "full":
        from ldpfed.simulations.reproductions.seed003_snd import SETTINGS

        full = SETTINGS["full"]
        lines += [
            f"Reductions against the full setting: {setting['public']} public sentences (full: {full['public']}); "
            f"denoiser {setting['denoiser']} (full, the seed's shape: {full['denoiser']}) for {setting['epochs']} epochs; "
            f"training/test pairs {setting['tasks']} (full: {full['tasks']}, None = the whole split); sentences cut to "
            f"{setting['task_length']} tokens (public {setting['public_length']}; full: {full['task_length']} / "
            f"{full['public_length']}); eta groups {[g['eval_etas'] for g in config['groups']]} only.",
            "",
        ]
    lines += [
        "What runs (simulations/reproductions/seed003_snd.py, fed/randomizers/split_denoise.py: the mechanism `--mechanism snd` runs, fed/learning/denoiser.py): the user "
        "noises the raw word-embedding rows of its real tokens (MiniLM, d = 384, before position embeddings and "
        f"LayerNorm; rows' bound C = {results['bounds']['clip']:.3f}), clips each noisy row to C and sends the rows; "
        "padding is neither noised nor sent, and the token count is public. The server runs MiniLM on them as "
        "inputs_embeds with the attention mask and mean-pools over the mask (e_n). The user's denoiser takes "
        f"[e_n; X~; Z] with a mask, shape {setting['denoiser']}, one per eta group, trained on "
        f"{sum(config['public_sources'].values())} public sentences ({config['public_sources']}). Each sentence of a "
        f"pair is encoded separately and the two are concatenated; the seed's MLP (two hidden layers of the input's "
        f"width) is trained on the training pairs and scored on the test pairs ({config['task_sizes']}). Figures are "
        "mean [min, max] over the seeds (noise and classifier; the denoisers are trained once).",
        "",
        "## Privacy: each eta and the epsilon it implies",
        "",
        f"Per token the seed states eta x 2C (Theorem 3.3, L2 metric). That holds for the text's d_chi sampler. The "
        f"authors' code draws Gamma(d, eta) x U(-1, 1) per coordinate, which is eta-private in the L1 metric: its true "
        f"per-token epsilon is eta x the table's L1 diameter (bound {results['bounds']['l1_diameter']:.2f}, against "
        f"2C = {results['bounds']['l2_diameter']:.3f}). A record (a pair) is every real token of both sentences, "
        f"composed (ldpfed's strict accounting, pure, delta {DELTA:g}; [CLS] and [SEP] rows are noised and charged too). "
        f"The last column is the largest eta whose longest record stays within epsilon {BUDGET:g}.",
        "",
        *_epsilon_rows(results),
        "",
        "## Seed Table 1: accuracy (SnD with the authors' sampler; eta = inf: the encoder run locally)",
        "",
        "| task | eta | seed DistilBERT | seed Bert Base | seed Bert Large | ours, MiniLM | ours, e_n only (a server-side classifier) | epsilon per record under ldpfed's strict accounting (mean tokens) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    from ldpfed.fed.randomizers.split_denoise import SplitDenoiseRandomizer

    for task, rows in SEED_TABLE1.items():
        for eta, seed in rows.items():
            if eta is None:
                ours, strict = _stat(_local(results, task, "accuracy")), "none (no noise)"
                server = ours
            else:
                ours = _stat(_values(results, "coordinate", float(eta), task, "snd", "accuracy"))
                server = _stat(_values(results, "coordinate", float(eta), task, "server_output", "accuracy"))
                units = [u for u in results["units"].values() if u["sampler"] == "coordinate" and u["eta"] == eta and task in u["tasks"]]
                strict = "-"
                if units:
                    tokens = units[0]["tasks"][task]["tokens_per_record"]["mean"]
                    strict = f"{SplitDenoiseRandomizer.sampler_event('coordinate', float(eta), results['bounds']['l1_diameter'], round(tokens)).epsilon:.4g}"
            label = "inf" if eta is None else f"{eta:g}"
            lines.append(f"| {task.upper()} | {label} | {seed[0]:.3f} | {seed[1]:.3f} | {seed[2]:.3f} | {ours} | {server} | {strict} |")
    lines += [
        "",
        "Under ldpfed's trust model (design.md 2) the denoised vector depends on the clean rows, so it never leaves "
        "the user: the seed's classifier on denoised vectors is the users' own. A classifier on the server can train "
        "only on e_n (the e_n column), or on X~.",
        "",
        "## Seed Table 5: QQP AUC, TokEmbPriv and SnD (authors' sampler), with seed Table 11's cosine to the clean embedding",
        "",
        "| eta | seed TokEmbPriv (Distil / Base / Large) | ours TokEmbPriv | seed SnD (Distil / Base / Large) | ours SnD | cosine to clean, seed Bert Base (TokEmbPriv / SnD) | ours (TokEmbPriv / SnD) |",
        "|---|---|---|---|---|---|---|",
    ]
    for eta, seed in SEED_TABLE5.items():
        cos = [u["tasks"]["qqp"]["cosine_to_local"] for u in results["units"].values()
               if u["sampler"] == "coordinate" and u["eta"] == eta and "qqp" in u["tasks"]]
        ours_cos = f"{np.mean([c['tokembpriv'] for c in cos]):.3f} / {np.mean([c['snd'] for c in cos]):.3f}" if cos else "-"
        lines.append(
            f"| {eta} | {' / '.join(f'{v:.3f}' for v in seed['tokembpriv'])} | {_stat(_values(results, 'coordinate', float(eta), 'qqp', 'tokembpriv', 'auc'))} | "
            f"{' / '.join(f'{v:.3f}' for v in seed['snd'])} | {_stat(_values(results, 'coordinate', float(eta), 'qqp', 'snd', 'auc'))} | "
            f"{SEED_TABLE11_COS[eta]['tokembpriv']:.3f} / {SEED_TABLE11_COS[eta]['snd']:.3f} | {ours_cos} |"
        )
    lines += ["", "## Every unit: accuracy / AUC per method, with the ablations", ""]
    tasks = list(config["task_sizes"])
    for task in tasks:
        lines += [f"### {task.upper()}", "",
                  "| sampler | eta | " + " | ".join(METHOD_NAMES[m] for m in ("snd", "snd_without_output", "server_output", "tokembpriv")) + " | cosine to clean: TokEmbPriv / e_n / SnD |",
                  "|---|---|---|---|---|---|---|"]
        pairs = sorted({(u["sampler"], u["eta"]) for u in results["units"].values()})
        for sampler, eta in pairs:
            cells = []
            for method in ("snd", "snd_without_output", "server_output", "tokembpriv"):
                acc, auc = _values(results, sampler, eta, task, method, "accuracy"), _values(results, sampler, eta, task, method, "auc")
                cells.append(f"{_stat(acc)} / {_stat(auc)}")
            cos = [u["tasks"][task]["cosine_to_local"] for u in results["units"].values() if (u["sampler"], u["eta"]) == (sampler, eta) and task in u["tasks"]]
            cos_cell = " / ".join(f"{np.mean([c[m] for c in cos]):.3f}" for m in ("tokembpriv", "server_output", "snd")) if cos else "-"
            lines.append(f"| {SAMPLER_NAMES[sampler]} | {eta:g} | " + " | ".join(cells) + f" | {cos_cell} |")
        lines.append(f"| (no noise) | inf | {METHOD_NAMES['local']}: {_stat(_local(results, task, 'accuracy'))} / {_stat(_local(results, task, 'auc'))} | | | | |")
        lines.append("")
    lines += ["## Denoisers", "", "| group | with e_n | steps (planned) | seconds | last losses (per 50 steps) |", "|---|---|---|---|---|"]
    for key, info in results["denoisers"].items():
        lines.append(f"| {key.split('/')[0]} | {info['with_output']} | {info['steps']} ({info['planned_steps']}) | {info['seconds']} | {info['loss_per_50_steps'][-3:]} |")
    if diagnostic is not None:
        lines += ["", *_training_length(results, *diagnostic)]
    if strict_run is not None:
        lines += ["", *_strict(*strict_run)]
    lines += ["", "## What the figures say", ""]
    if ready:
        lines += _findings(results)
    else:
        lines.append(f"Nothing yet: {why}")
    lines += ["", "## Differences from the seed that remain", "", *DIFFERENCES, ""]
    return "\n".join(lines)


def _training_length(results: dict[str, Any], longer: dict[str, Any], longer_path: str) -> list[str]:
    """The seed's denoiser schedule against a run of the same groups with more passes (mean over seeds)."""
    passes = {id(r): r["config"]["setting"]["epochs"] for r in (results, longer)}
    lines = [
        "## Denoiser training length (a diagnostic beyond the seed's schedule)",
        "",
        f"The same eta groups, data, seeds and noise draws, with the denoisers trained for {passes[id(longer)]} passes over "
        f"the public sentences instead of {passes[id(results)]} (the seed's 2 noise draws per sentence for 2 epochs). "
        f"Command: `{DIAGNOSTIC_COMMAND}`; results: `{longer_path}`.",
        "",
        "| sampler | eta | passes | denoiser steps (with / without e_n) | last loss (with / without) | QQP AUC: SnD / without e_n | MRPC AUC: SnD / without e_n | cosine to clean, mean over tasks: SnD / without e_n |",
        "|---|---|---|---|---|---|---|---|",
    ]
    pairs = sorted({(u["sampler"], u["eta"], u["group"]) for u in longer["units"].values()})
    for sampler, eta, group in pairs:
        for run in (results, longer):
            dens = [run["denoisers"].get(f"{group}/{w}_output") for w in ("with", "without")]
            if None in dens:
                continue
            units = [u for u in run["units"].values() if (u["sampler"], u["eta"]) == (sampler, eta)]
            cos = {m: np.mean([c for u in units for c in [u["tasks"][t]["cosine_to_local"][m] for t in u["tasks"]]])
                   for m in ("snd", "snd_without_output")}
            auc = {t: " / ".join(_stat(_values(run, sampler, eta, t, m, "auc")) for m in ("snd", "snd_without_output"))
                   for t in ("qqp", "mrpc")}
            lines.append(
                f"| {SAMPLER_NAMES[sampler]} | {eta:g} | {passes[id(run)]} | {dens[0]['steps']} / {dens[1]['steps']} | "
                f"{dens[0]['loss_per_50_steps'][-1]:.4f} / {dens[1]['loss_per_50_steps'][-1]:.4f} | {auc['qqp']} | {auc['mrpc']} | "
                f"{cos['snd']:.3f} / {cos['snd_without_output']:.3f} |")
    return lines


def _strict(strict: dict[str, Any], strict_path: str) -> list[str]:
    """The rows at the etas ldpfed's strict ledger allows (mean [min, max] over the seeds)."""
    budget = strict["config"]["strict_epsilon"]
    lines = [
        f"## The same rows under ldpfed's strict accounting (per-record epsilon {budget:g})",
        "",
        f"One eta group per sampler at the largest eta (3 significant digits) whose per-token events, composed over a "
        f"record's tokens (the longest pair in the data), give a per-record epsilon of at most {budget:g}; denoisers "
        f"trained at that eta, the rest as above. Command: `{STRICT_COMMAND}`; results: `{strict_path}`"
        + ("" if strict.get("complete") else " (**not all units ran**)") + ".",
        "",
        *_epsilon_rows(strict),
        "",
        "| sampler | eta | task | metric | " + " | ".join(METHOD_NAMES[m] for m in METHODS) + " | encoder run locally |",
        "|---|---|---|---|" + "---|" * (len(METHODS) + 1),
    ]
    for sampler, eta in sorted({(u["sampler"], u["eta"]) for u in strict["units"].values()}):
        for task in strict["config"]["task_sizes"]:
            for metric in ("auc", "accuracy"):
                cells = [_stat(_values(strict, sampler, eta, task, m, metric)) for m in METHODS]
                lines.append(f"| {SAMPLER_NAMES[sampler]} | {eta:g} | {task.upper()} | {metric} | " + " | ".join(cells)
                             + f" | {_stat(_local(strict, task, metric))} |")
    return lines


def _findings(results: dict[str, Any]) -> list[str]:
    """Factual comparisons, one line each (full setting only)."""
    out = []
    for (sampler, eta) in sorted({(u["sampler"], u["eta"]) for u in results["units"].values()}):
        for task in results["config"]["task_sizes"]:
            snd = _values(results, sampler, eta, task, "snd", "auc")
            tok = _values(results, sampler, eta, task, "tokembpriv", "auc")
            no_out = _values(results, sampler, eta, task, "snd_without_output", "auc")
            local = _local(results, task, "auc")
            if not snd:
                continue
            order = "above" if min(snd) > max(tok) else ("below" if max(snd) < min(tok) else "overlapping")
            out.append(
                f"- {SAMPLER_NAMES[sampler]}, eta {eta:g}, {task.upper()} (AUC): SnD {np.mean(snd):.3f}, TokEmbPriv {np.mean(tok):.3f} "
                f"(SnD {order} in the seeds' ranges); denoiser without e_n {np.mean(no_out):.3f}; encoder run locally {np.mean(local):.3f}."
            )
    return out


DIFFERENCES = [
    "- **Model.** MiniLM-L6 (all-MiniLM-L6-v2, d = 384, mean pooling over the mask) instead of DistilBERT / BERT "
    "(CLS output). Eta does not carry across models (seed 4.4.3); the d_chi rows use the etas where MiniLM's "
    "TokEmbPriv cosine matches the seed's (about 0.1), the authors'-sampler rows use the seed's own etas.",
    "- **Public data.** MR and SST-2 training sentences (movie reviews) instead of the seed's mix of 20 datasets "
    "(about 100,000 sentences); seed A.13 shows the public set's domain moves AUC.",
    "- **Denoiser training.** Fresh noise at every step (the group's two etas in turn) for as many steps as 2 noise "
    "draws per sentence for 2 epochs take (4 passes over the public sentences; the Denoisers table shows whether a run "
    "finished them), instead of 2 fixed draws per sentence; inputs "
    "pass a linear layer with learned segment and position vectors, and e_d is read from e_n's position after the last layer through a linear read-out (seed eq. 10, e_d = h_0^L).",
    "- **Tasks.** QQP is a 9,000-pair subset of GLUE QQP train (training pairs and the 1,000 test pairs come from "
    "disjoint files); MRPC's test split is the labelled MSRP test; RTE is scored on GLUE dev (277 pairs; GLUE test "
    "labels are not public). Sentences are cut to 128 tokens (seed: 512).",
    "- **Classifier.** The seed gives layers and widths only; ours trains with Adam and picks the epoch on 10% of "
    "the training pairs.",
    "- **Baselines.** Text2Text and RAPT are not run here (simulations/experiments/snd_table.py runs Text2Text in the earlier setup).",
    "- **Seeds.** The seed states no number of runs; ours vary the noise and the classifier, not the denoiser or "
    "the data sample.",
    "- **Privacy statement.** The seed reports eta only. The per-coordinate sampler's true epsilon is eta times the "
    "L1 diameter, about 15 times the seed's eta x 2C; both are shown above, per token and per record.",
]


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(__file__).resolve().parents[2]))
    except ValueError:
        return str(path)


def write_report(results_path: Path, out: Path, diagnostic_path: Path | None = None, strict_path: Path | None = None) -> Path:
    """Write ``out``/README.md from ``results_path`` (and a longer-training run's and a strict run's, where they exist)."""
    results = json.loads(Path(results_path).read_text())
    extra = []
    for path in (diagnostic_path, strict_path):
        ok = path is not None and Path(path).exists() and results.get("setting") == "full"
        extra.append((json.loads(Path(path).read_text()), _shown(path)) if ok else None)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "README.md"
    path.write_text(render(results, _shown(results_path), *extra))
    return path
