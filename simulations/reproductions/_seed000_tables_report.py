"""Seed 000 Tables 4-5's report (README.md of ``ldpfed reproduce seed000_tables``): the tables beside the paper, the
token rows' servers, the encoder's ceiling, and the differences that remain, from the recorded cells."""

from __future__ import annotations

import argparse
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.simulations.reproductions._cells import Results, Setting, fmt_number, fmt_spread, table
from ldpfed.simulations.reproductions.seed000_tables import (
    CEILING_FILE, DIMS, LENGTH, NAME, PAPER, PLD_INTERVAL, Context, token_setting,
)


@cache
def _pld_at_paper_sensitivity(epsilon: float, delta: float, p: float, steps: int) -> float:
    """PLD upper bound of eq. 8's noise multiplier at the paper's sensitivity C (the same z for token and latent rows)."""
    from ldpfed.fed.privacy.accountants import amplified
    from ldpfed.fed.privacy.accountants.base import Schedule
    from ldpfed.fed.privacy.accountants.calibration import calibrate_noise_multiplier

    z = calibrate_noise_multiplier("clt", epsilon, delta, steps, p).noise_multiplier
    return amplified.pld_epsilon(Schedule(z, p, steps, delta), PLD_INTERVAL)


def clt_note(table4: dict[float, Any], pld_c: Any) -> str:
    """The differences list's line on the CLT figure against the PLD bound at sensitivity C, from the figures."""
    pairs = [(eps, pld_c(eps)) for eps in table4]
    pairs = [(eps, bound) for eps, bound in pairs if bound is not None]
    if not pairs:
        return "- The paper's CLT figure is an estimate, not a bound; both PLD columns assume unlinkable reports."
    under = [(eps, 1 - eps / bound) for eps, bound in pairs if eps < bound]
    over = [(eps, eps / bound - 1) for eps, bound in pairs if eps >= bound]
    figures = " / ".join(fmt_number(b) for _, b in pairs)
    epsilons = " / ".join(f"{eps:g}" for eps, _ in pairs)
    parts = []
    if under:
        parts.append(f"below the bound at epsilon {', '.join(f'{e:g}' for e, _ in under)} "
                     f"(under-states it by at most {max(g for _, g in under):.0%})")
    if over:
        parts.append(f"at or above it at {', '.join(f'{e:g}' for e, _ in over)} "
                     f"(over-states it by up to {max(g for _, g in over):.0%})")
    return (
        "- The paper's CLT figure is an estimate, not a bound. At the paper's own sensitivity C the PLD upper bound "
        f"for the same noise and schedule ('PLD C') is {figures} for its epsilon {epsilons}: the CLT figure is "
        f"{' and '.join(parts)}. The larger 'PLD 2C' figures come from ldpfed's sensitivity 2C (local DP: any two "
        "inputs, the diameter of the clip ball), not from the CLT. Both PLD columns assume unlinkable reports."
    )


def token_table(results: Results, args: argparse.Namespace, context: Context, n: int, full: int, cell: Any,
                first: Any) -> list[str]:
    """Table 4's token rows: each server trained on the noisy reports, beside its own-data-only baseline."""
    from ldpfed.simulations.reproductions._seed000_tokens import BILSTM_BATCH

    paper_figures, name = PAPER[context.dataset], PAPER[context.dataset]["name"]
    once = "strict-once" in args.accountings
    units = [c["sensitivity_unit"] / np.sqrt(LENGTH) for c in results.cells.values()
             if c["setting"]["position"] == "token" and "sensitivity_unit" in c]
    clip = fmt_number(units[0]) if units else "-"
    note = "" if n == full else f" REDUCED: {n:,} of the {full:,} users' records."
    lines = [
        f"## Table 4 ({name}), token rows: the server trains on the noisy reports{note}", "",
        f"Each user's report is its sentence's {LENGTH} token embeddings (the server's pre-trained BiLSTM's word "
        f"embeddings, size 64; padding noised too), each clipped to C_tok = {clip} (the median token norm on the "
        f"server's data) plus N(0, sigma^2) on every coordinate; sensitivity C_tok sqrt({LENGTH}) in the paper row "
        f"and 2 C_tok sqrt({LENGTH}) in the strict rows (the same noise multipliers and privacy costs as the latent "
        "row of the same epsilon). Servers, each told sigma:",
        "",
        f"- mean-LDA: the server averages each report's {LENGTH} positions (noise sigma / sqrt({LENGTH}) per "
        "coordinate) and fits NoiseAwareLDA told that noise, shrunk towards its own data; beside it a softmax head "
        "trained one Adam step per sampled batch on the same averages (head / LDA).",
        "- mean-LDA + own: the same LDA with the server's own clean averages added as one more group "
        "(inverse-variance weighting), so the reports can only add to its own data (LDA only).",
        "- BiLSTM: the paper's server: the layers after the DP layer (the BiLSTM, started from the server's "
        "pre-trained one, mean-pooled over all positions, and a linear head) trained by Adam, one step per sampled "
        f"batch. REDUCED: each step trains on {BILSTM_BATCH} of the batch's reports (about "
        f"{args.p * n:,.0f} are sampled; the rest go unused), for CPU time; no strict-once row.",
        "- own data only: each server trained on its own clean 10% slice alone, no reports (for the BiLSTM: "
        f"{args.steps} Adam steps of {BILSTM_BATCH} sentences from the pre-trained BiLSTM). A row above it is "
        "what the users' reports add.",
        "",
    ]

    def server_cell(server: str, accounting: str, eps: float) -> str:
        setting = token_setting(server, n, accounting, eps)
        if server == "bilstm":
            return cell(setting, "accuracy_bilstm")
        if server == "mean-lda-own":
            return cell(setting, "accuracy_lda")
        return cell(setting, "accuracy_head") + " / " + cell(setting, "accuracy_lda")

    accountings = ("paper", "strict", "strict-once") if once else ("paper", "strict")
    blank = ["-"] * len(accountings)
    rows = [
        ["token, server's own data only", "-", server_cell("mean-lda", "own-only", 0.0), *blank[1:], *blank,
         server_cell("bilstm", "own-only", 0.0), "-", "-"],
        ["token, null privacy", f"{paper_figures['null']}", server_cell("mean-lda", "clean", 0.0), *blank[1:], *blank,
         "-", "-", "-"],
    ]
    for eps, figures in paper_figures["table4"].items():
        rows.append([
            f"token, eps {eps:g}", f"{figures[0]}",
            *(server_cell(server, a, eps) for server in ("mean-lda", "mean-lda-own") for a in accountings),
            server_cell("bilstm", "paper", eps), server_cell("bilstm", "strict", eps),
            " / ".join(first(token_setting("mean-lda", n, a, eps), "sigma") for a in accountings),
        ])
    names = {"paper": "paper accounting", "strict": "strict", "strict-once": "strict-once"}
    header = ["row (training eps)", "paper", *(f"mean-LDA, {names[a]} (head / LDA)" for a in accountings),
              *(f"mean-LDA + own, {names[a]}" for a in accountings),
              "BiLSTM server, paper accounting", "BiLSTM server, strict", "sigma: " + " / ".join(accountings)]
    return lines + table(header, rows) + [""]


def sigma_note(context: Context, p: float, n: int) -> str:
    """The differences list's line on eq. 7's sigma_t = |x^t| C / mu against ldpfed's C / mu, with its factors."""
    from ldpfed.fed.encoders.vocab import tokenize

    users, _ = context.users(n)
    second = users.texts2 or [None] * len(users)  # a pair is read as a <sep> b
    length = float(np.median([min(len(tokenize(a)) + (len(tokenize(b)) + 1 if b is not None else 0), LENGTH)
                              for a, b in zip(users.texts, second)]))
    return (
        "- Noise per step: the paper's eq. 7 and Algorithm 2 set sigma_t = |x^t| C / mu_train, with |x^t| in its words "
        "'the number of sentences' sampled at step t. Taken literally that multiplies every row's sigma (latent and "
        f"token) by the batch size, about p n = {p * n:,.0f} here. ldpfed sets sigma = C / mu_train per report "
        "(its ``calibrate_noise_multiplier('clt', ...)``): each report is one user's sentence, released by that user "
        "alone, and eq. 8 already composes one sentence's releases over the T steps. Read instead as a sentence's "
        f"token count |x|, the token rows' sigma would be |x| C_tok / mu against ours sqrt({LENGTH}) C_tok / mu "
        f"(all {LENGTH} positions, padding noised): a factor |x| / sqrt({LENGTH}), {length / np.sqrt(LENGTH):.2f} "
        f"at the users' median length of {length:g} tokens (cut at {LENGTH}) and {LENGTH / np.sqrt(LENGTH):.2f} at "
        f"{LENGTH}; a sigma set per sentence length would also reveal the length, which the fixed {LENGTH} positions hide."
    )


def read_ceiling(path: Path) -> dict[str, Any]:
    """The ceiling entries written by ``--ceiling`` (empty when not measured)."""
    import json

    return json.loads(path.read_text()) if path.exists() else {}


def ceiling_section(ceiling: dict[str, Any], null: float, name: str, data_option: str, epochs: int) -> list[str]:
    """The report's 'Encoder ceiling' section: dev accuracy by pre-training data and epochs, and the gap it explains."""
    from ldpfed.simulations.reproductions._seed000_ceiling import CONFIGS

    rows, best = [], {}
    for data, e in CONFIGS:
        entry = ceiling.get(f"{data}-{e}")
        if entry is None:
            continue
        label = f"server's 10% slice ({entry['records']:,})" if data == "own" else f"all of {name} train ({entry['records']:,})"
        rows.append([label, str(e), f"{100 * entry['lda']:.2f}", f"{100 * entry['logistic']:.2f}",
                     f"{100 * entry['oov']:.1f}% ({entry['vocab']:,} words)", f"{entry['pretrain_seconds']:g}"])
        best[data] = max(best.get(data, 0.0), entry["lda"])
    lines = [
        "## Encoder ceiling (non-private)", "",
        f"Command: the command above with `--ceiling` added (each entry measured once and kept in {CEILING_FILE}). "
        "Each row pre-trains the BiLSTM (dimension 128, embedding 64, seed 0) on the named data and measures dev "
        "accuracy of NoiseAwareLDA on the clean clipped latent rows of the users' 90% (the latent null-privacy row's "
        f"classifier; the row with {epochs} epochs on the slice is that row's encoder) and of scikit-learn's logistic "
        "regression on the unclipped rows; OOV is the share of dev tokens outside the encoder's vocabulary. No "
        "pretrained word vectors (GloVe or other) are in ../shared/data or the venv, so every encoder learns its "
        "embeddings from its pre-training data.", "",
        *table(["pre-training data", "epochs", "LDA %", "logistic %", "dev OOV", "pre-training s (shared CPU)"], rows), "",
    ]
    base = ceiling.get(f"own-{epochs}")
    if base and "own" in best and "all" in best:
        gap = null / 100 - base["lda"]
        parts = [("more epochs on the slice", best["own"] - base["lda"]), ("all of train instead of the slice", best["all"] - best["own"]),
                 ("remains with all of train", null / 100 - best["all"])]
        shares = "; ".join(f"{label} {100 * points:.1f} points ({points / gap:.0%})" for label, points in parts)
        lines += [
            f"LDA: the report's encoder ({epochs} epochs on the slice) {100 * base['lda']:.2f}%, best on the slice "
            f"{100 * best['own']:.2f}%, best on all of train {100 * best['all']:.2f}%, paper {null}%. Of the "
            f"{100 * gap:.1f}-point gap: {shares}. The rest is not measured here (no pretrained word vectors; the "
            "paper's BiLSTM, its training and its classifier are not given). The rows above keep the slice's encoder: "
            f"pre-training on all of train would use the users' records, which the reproduction keeps private.", "",
        ]
    return lines


def report(results: Results, args: argparse.Namespace, context: Context) -> list[str]:
    """README.md: Table 4 and Table 5 beside the paper, and the differences."""
    latent_n, token_n = context.users_size(args.latent_records), context.users_size(args.token_records)
    full = context.users_size(0)
    paper_figures = PAPER[context.dataset]
    name, dev = paper_figures["name"], context.splits()[2]
    majority = 100 * float(np.bincount(dev.labels).max()) / len(dev)
    data_option = "" if context.dataset == "sst2" else f" --dataset {context.dataset}"

    def cell(setting: Setting, field: str) -> str:
        return fmt_spread(results.values(setting, field))

    def first(setting: Setting, field: str) -> str:
        values = results.values(setting, field)
        return fmt_number(max(values)) if values else "-"

    def pld_c(setting: Setting) -> float | None:
        """The PLD bound of the paper row's sigma at the paper's own sensitivity C (its z; what eq. 8 estimates)."""
        deltas = results.values(setting, "delta")
        return _pld_at_paper_sensitivity(setting["epsilon"], deltas[0], args.p, args.steps) if deltas else None

    lines = [
        f"# Seed 000, Tables 4 and 5: token versus latent DP layer, and the latent dimension ({name})",
        "",
        f"Command: `ldpfed reproduce {NAME}{data_option} --seeds {args.seeds} --p {args.p} --steps {args.steps} "
        f"--token-records {args.token_records} --latent-records {args.latent_records} --tables {' '.join(args.tables)} "
        f"--accountings {' '.join(args.accountings)} --dims {' '.join(map(str, args.dims))}` (resumes from results.json).",
        "",
        f"Accuracy in % on {paper_figures['dev']}, mean [min, max] over seeds (n). Each cell shows the softmax head "
        "trained one Adam step per sampled batch (the paper's server-side training) / ldpfed's NoiseAwareLDA on "
        f"the same reports. Schedule: Poisson sampling p = {args.p}, T = {args.steps} steps, delta = 1 / (users' "
        f"records). Encoder: ldpfed's BiLSTM pre-trained on a 10% slice of {name} train (the server's own data), "
        f"users hold the other 90% ({full:,} records).",
        "",
        "- paper: sigma from eq. 8 (GDP + CLT, an estimate, not a bound) at sensitivity C. 'PLD C' is the "
        "numerical upper bound for that same sigma and amplified schedule at the paper's sensitivity C (what its "
        "CLT figure estimates), 'PLD 2C' the same at ldpfed's sensitivity 2C (both still assume the server "
        "cannot link a report to its record); 'worst case' what ldpfed's ledger charges for it (the most "
        "releases of one record, 2C, no amplification).",
        "- strict: same schedule, sigma calibrated on the worst-case ledger (2C, k = (1-delta)-quantile of "
        "Binomial(T, p) releases; a record at k is not released again). strict-once: each record released once.",
        "",
    ]
    if "4" in args.tables:
        note = "" if latent_n == full else f" REDUCED: latent rows use {latent_n:,} of the {full:,} records."
        lines += [f"## Table 4 ({name}, dimension 128), latent rows{note}", ""]
        with_once = "strict-once" in args.accountings
        rows = []
        base = {"position": "latent", "dim": 128, "n": latent_n}
        clean = {**base, "accounting": "clean", "epsilon": 0.0}
        rows.append(["latent, null privacy", f"{paper_figures['null']}", cell(clean, "accuracy_head") + " / " + cell(clean, "accuracy_lda"),
                     *["-"] * (4 if with_once else 3)])
        for eps, figures in paper_figures["table4"].items():
            paper = {**base, "accounting": "paper", "epsilon": eps}
            strict = {**base, "accounting": "strict", "epsilon": eps}
            once = {**base, "accounting": "strict-once", "epsilon": eps}
            row = [
                f"latent, eps {eps:g}", f"{figures[1]}",
                cell(paper, "accuracy_head") + " / " + cell(paper, "accuracy_lda"),
                f"{fmt_number(pld_c(paper))} / {first(paper, 'epsilon_pld_2c')} / {first(paper, 'epsilon_worst_case')}",
                cell(strict, "accuracy_head") + " / " + cell(strict, "accuracy_lda"),
            ]
            if with_once:
                row.append(cell(once, "accuracy_head") + " / " + cell(once, "accuracy_lda"))
            rows.append(row + [f"{first(paper, 'sigma')} / {first(strict, 'sigma')}" + (f" / {first(once, 'sigma')}" if with_once else "")])
        header = ["row (training eps)", "paper", "ldpfed, paper accounting (head / LDA)",
                  "paper's sigma costs: PLD C / PLD 2C / worst case", "ldpfed, strict (head / LDA)"]
        header += ["ldpfed, strict-once (head / LDA)", "sigma: paper / strict / once"] if with_once else ["sigma: paper / strict"]
        lines += table(header, rows)
        lines += ["", *token_table(results, args, context, token_n, full, cell, first)]
    if "5" in args.tables:
        note = "" if latent_n == full else f" REDUCED: {latent_n:,} of the {full:,} records."
        if set(args.dims) != set(DIMS):
            note += f" REDUCED: dimensions {', '.join(map(str, args.dims))} of the paper's {', '.join(map(str, DIMS))}."
        lines += [f"## Table 5 ({name}, latent, by dimension){note}", ""]
        rows = []
        for dim in args.dims:
            base = {"position": "latent", "dim": dim, "n": latent_n}
            clean = {**base, "accounting": "clean", "epsilon": 0.0}
            rows.append([f"dim {dim}, null privacy", "-", cell(clean, "accuracy_head") + " / " + cell(clean, "accuracy_lda"), "-"])
            for eps, figures in paper_figures["table5"].items():
                paper = {**base, "accounting": "paper", "epsilon": eps}
                strict = {**base, "accounting": "strict", "epsilon": eps}
                rows.append([
                    f"dim {dim}, eps {eps:g}", f"{figures[DIMS.index(dim)]}",
                    cell(paper, "accuracy_head") + " / " + cell(paper, "accuracy_lda"),
                    cell(strict, "accuracy_head") + " / " + cell(strict, "accuracy_lda"),
                ])
        lines += table(["row", "paper", "ldpfed, paper accounting (head / LDA)", "ldpfed, strict (head / LDA)"], rows)
        lines.append("")
    ceiling = read_ceiling(args.out / CEILING_FILE)
    if ceiling:
        lines += ceiling_section(ceiling, paper_figures["null"], name, data_option, args.pretrain_epochs)
    lines += [
        "## Differences that remain",
        "",
        "- Encoder training: the paper does not say what its BiLSTM was trained on; its null-privacy accuracy "
        f"({paper_figures['null']}) is that of a BiLSTM trained on {name} itself. Here the encoder is pre-trained on the server's "
        f"own 10% slice of {name} train and frozen, so null privacy is lower and every row inherits that ceiling: "
        "compare each row with its own null-privacy row" + (" (see 'Encoder ceiling')." if ceiling else "."),
        "- p_train and T are not given in the paper (its Fig. 6 varies p_train); every row here uses the same "
        f"p = {args.p}, T = {args.steps}.",
        f"- The users hold 90% of {name} train (the paper: all of it), and delta = 1 / (their records).",
        "- The paper's server-side model after the latent DP layer is not specified; a linear softmax head trained one "
        "Adam step per sampled batch stands in for it, beside ldpfed's NoiseAwareLDA. It gets only T Adam steps "
        f"(T = {args.steps} here): where the noise is large it stays at the majority class ({majority:.2f}%). Whether "
        "more steps would lift it was not tested, so the head's figures do not say what the paper's server-side "
        "training would reach.",
        "- Token rows: the paper does not give the token layer's clip or its sensitivity; here each token "
        f"embedding is clipped to C_tok (median token norm on the server's data), L = {LENGTH} positions (padding "
        "noised too), sensitivity C_tok sqrt(L) in the paper row and 2 C_tok sqrt(L) in the strict rows. The "
        "embedding size is 64 (the paper's is not given). The paper's BiLSTM server trains on every report of a "
        "batch; here it trains on a fixed number per step (see the token table).",
        sigma_note(context, args.p, token_n),
        "- Test inputs are clean (no inference noise): Table 4 is about training epsilon.",
        clt_note(paper_figures["table4"], lambda eps: pld_c({"position": "latent", "dim": 128, "n": latent_n,
                                                            "accounting": "paper", "epsilon": eps})),
    ]
    if context.dataset == "qqp":
        lines += [
            "- QQP data: the paper uses GLUE QQP (363k training pairs, 40k validation); ../shared/data holds an "
            "8,999-pair subset of GLUE train (10% the server's, 90% the users') and a disjoint 1,000-pair subset "
            "of GLUE train as the test set. Each pair is one record, encoded by the BiLSTM as one sequence "
            f"(a <sep> b, cut to {LENGTH} tokens in the token rows); how the paper joins a pair is not given.",
        ]
    return lines
