"""Split-N-Denoise's denoiser (seed 003 section 3.4, appendix A.2): the user's small transformer.

The server pre-trains it on public sentences with synthetic noise and ships it; the user runs it
on what the server returned for its own record, next to what only the user knows:

    e_d = D(e_n, X~, Z)

e_n is the noisy output embedding the server computed from the released token vectors X~ =
clip(X + Z) (rows of n x d), and Z = X~ - X is the user's own noise (after the clip, as the seed
says). Two layouts (``DenoiserShape.layout``):

- ``paper``: the seed's [e_n; x~_1..x~_n; z_1..z_n], 2n + 1 vectors, each with a learned
  segment (e_n, x~ or z) and position, and a padding mask over the x~ and z halves (records
  of different lengths; the seed's authors mask the same way).
- ``joint``: x~_t and z_t share one input vector per position ([x~_t, z_t], n + 1 vectors, no
  mask), the same information at a quarter of the attention cost on a CPU.

e_d is read from e_n's position after the last layer: in the paper layout that state itself,
through a linear read-out (seed eq. 10, e_d = h_0^L); in the joint layout as a correction added
to e_n. Trained to the clean embedding by mean squared error.

Everything D reads stays on the user; e_d depends on the clean token vectors, so it is not
post-processing of the release and must not leave the user unless released again (and charged).

Shipped as safetensors (weights only, no pickle) with its shape in the header, so a node loads
it without running code from the server; :meth:`Denoiser.load` checks every tensor's name and
shape against the header.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ldpfed.fed.encoders.weights_file import read_weights

LAYOUTS = ("joint", "paper")
MAX_FILE_BYTES = 64 * 2**20
"""Largest denoiser file a node reads (the bundle it travels in is no bigger)."""


@dataclass(frozen=True)
class DenoiserShape:
    """The architecture: embedding dim, token positions, hidden width, layers, heads, input layout and
    feed-forward width (0: twice the hidden width)."""

    dim: int
    length: int
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    layout: str = "joint"
    ff: int = 0

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"denoiser layout must be one of {LAYOUTS}, got {self.layout!r}")
        for name, value in asdict(self).items():
            if name == "layout":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "ff" else 1):
                raise ValueError(f"denoiser {name} must be a positive integer, got {value!r}")
        if self.hidden % self.heads:
            raise ValueError(f"denoiser hidden width {self.hidden} is not a multiple of its {self.heads} heads")
        if self.dim > 8192 or self.length > 4096 or self.hidden > 4096 or self.layers > 48 or self.ff > 16384:
            raise ValueError(f"denoiser shape {self} is larger than any this project ships")


class Denoiser(nn.Module):
    """D(e_n, X~, Z) -> e_d; inputs are scaled by fixed factors set at training (buffers)."""

    def __init__(self, shape: DenoiserShape) -> None:
        super().__init__()
        self.shape = shape
        self.output_in = nn.Linear(shape.dim, shape.hidden)
        paper = shape.layout == "paper"
        self.token_in = nn.Linear(shape.dim if paper else 2 * shape.dim, shape.hidden)
        self.position = nn.Parameter(torch.zeros(shape.length + 1, shape.hidden))
        if paper:
            self.segment = nn.Parameter(torch.zeros(3, shape.hidden))
        layer = nn.TransformerEncoderLayer(
            shape.hidden, shape.heads, dim_feedforward=shape.ff or 2 * shape.hidden, dropout=0.0, batch_first=True,
            norm_first=True,
        )
        self.body = nn.TransformerEncoder(layer, shape.layers, enable_nested_tensor=False)
        self.out = nn.Linear(shape.hidden, shape.dim)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.register_buffer("output_scale", torch.ones(()))
        self.register_buffer("token_scale", torch.ones(()))

    def forward(
        self, noisy_output: torch.Tensor, released: torch.Tensor, noise: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Denoised embeddings (n, dim) from e_n (n, dim), X~ and Z (n, t, dim), t <= length.

        ``mask`` (n, t), paper layout only: 1 at real tokens, 0 at padding (default: all real).
        """
        head = self.output_in(noisy_output / self.output_scale)[:, None]
        t = released.shape[1]
        if self.shape.layout == "joint":
            tokens = self.token_in(torch.cat([released, noise], dim=-1) / self.token_scale)
            hidden = self.body(torch.cat([head, tokens], dim=1) + self.position[: t + 1])
        else:
            place = self.position[1 : t + 1]
            parts = [
                head + self.position[0] + self.segment[0],
                self.token_in(released / self.token_scale) + place + self.segment[1],
                self.token_in(noise / self.token_scale) + place + self.segment[2],
            ]
            real = torch.ones(released.shape[:2], dtype=torch.bool, device=released.device) if mask is None else mask.bool()
            keep = torch.cat([real[:, :1] | True, real, real], dim=1)
            hidden = self.body(torch.cat(parts, dim=1), src_key_padding_mask=~keep)
            return self.out(hidden[:, 0]) * self.output_scale
        return noisy_output + self.out(hidden[:, 0]) * self.output_scale

    @torch.inference_mode()
    def denoise(
        self, noisy_output: np.ndarray, clean_tokens: np.ndarray, released: np.ndarray, batch: int = 256,
        mask: np.ndarray | None = None,
    ) -> np.ndarray:
        """e_d for each record, float32 (n, dim), from e_n, the clipped clean token vectors X, X~ and the mask
        (n, length) of real tokens (default: all real)."""
        noisy_output, clean_tokens, released = (np.asarray(a, dtype=np.float32) for a in (noisy_output, clean_tokens, released))
        n, (dim, length) = len(noisy_output), (self.shape.dim, self.shape.length)
        mask = np.ones((n, length), dtype=np.float32) if mask is None else np.asarray(mask, dtype=np.float32)
        if noisy_output.shape != (n, dim) or clean_tokens.shape != (n, length, dim) or released.shape != (n, length, dim) \
                or mask.shape != (n, length):
            raise ValueError(
                f"the denoiser takes e_n (n, {dim}), token matrices (n, {length}, {dim}) and a mask (n, {length}); got "
                f"{noisy_output.shape}, {clean_tokens.shape}, {released.shape}, {mask.shape}"
            )
        if not all(np.isfinite(a).all() for a in (noisy_output, clean_tokens, released, mask)):
            raise ValueError("denoiser inputs contain NaN or infinite values")
        self.eval()
        out = np.empty((n, dim), dtype=np.float32)
        for s in range(0, n, batch):
            e, x, r, m = (torch.from_numpy(a[s : s + batch]) for a in (noisy_output, clean_tokens, released, mask))
            out[s : s + batch] = self(e, r, r - x, m).numpy()
        return out

    # -- shipping ------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Weights and shape as one safetensors file."""
        Path(path).write_bytes(self.to_bytes())

    def to_bytes(self) -> bytes:
        """The safetensors file :meth:`save` writes, as bytes."""
        from safetensors.torch import save

        tensors = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        return save(tensors, metadata={"ldpfed": "denoiser", "shape": json.dumps(asdict(self.shape))})

    @classmethod
    def load(cls, path: str | Path) -> "Denoiser":
        """A denoiser from :meth:`save`'s file; ValueError naming what is wrong with any other file."""
        path = Path(path)
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"{path.name} is larger than a denoiser may be ({MAX_FILE_BYTES} bytes)")
        return cls.from_bytes(path.read_bytes(), path.name)

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "denoiser") -> "Denoiser":
        """A denoiser from :meth:`to_bytes`'s output; ValueError naming what is wrong with anything else."""
        tensors, meta = read_weights(data, name, MAX_FILE_BYTES, "a denoiser")
        if meta.get("ldpfed") != "denoiser":
            raise ValueError(f"{name} is not an ldpfed denoiser")
        try:
            fields = json.loads(meta["shape"])
            shape = DenoiserShape(**fields)
        except (KeyError, TypeError, json.JSONDecodeError) as error:
            raise ValueError(f"{name} has no valid denoiser shape: {error}") from None
        model = cls(shape)
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        found = {k: tuple(v.shape) for k, v in tensors.items()}
        if expected != found:
            raise ValueError(f"{name}: tensors {sorted(set(found) ^ set(expected)) or 'of wrong shapes'} do not fit {shape}")
        if not all(torch.isfinite(v).all() for v in tensors.values()):
            raise ValueError(f"{name} holds NaN or infinite weights")
        model.load_state_dict({k: v.float() for k, v in tensors.items()})
        return model.eval()


def train_denoiser(
    shape: DenoiserShape,
    noisy_output: np.ndarray,
    clean_tokens: np.ndarray,
    released: np.ndarray,
    clean_output: np.ndarray,
    epochs: int = 8,
    batch: int = 64,
    learning_rate: float = 1e-3,
    seed: int = 0,
    progress: bool = False,
    mask: np.ndarray | None = None,
) -> tuple[Denoiser, list[float]]:
    """Fit a denoiser by mean squared error to ``clean_output``; returns it and the loss per epoch.

    The inputs are what the user would hold for public records released with synthetic noise;
    ``mask`` (n, length) marks their real tokens (default: all real).
    """
    from tqdm.auto import tqdm

    n = len(noisy_output)
    if n < batch or not (len(clean_tokens) == len(released) == len(clean_output) == n):
        raise ValueError(f"need as many token matrices and clean outputs as noisy outputs, and at least {batch} of them")
    torch.manual_seed(seed)
    model = Denoiser(shape)
    mask = np.ones(np.shape(clean_tokens)[:2]) if mask is None else mask
    e, x, r, c, m = (
        torch.from_numpy(np.asarray(a, dtype=np.float32)) for a in (noisy_output, clean_tokens, released, clean_output, mask)
    )
    model.output_scale.fill_(float(e.std()))
    real = m.bool()
    model.token_scale.fill_(float(r[real].std()) if int(real.sum()) > 1 else 1.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=1e-4)
    steps = epochs * math.ceil(n / batch)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=learning_rate, total_steps=steps)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in tqdm(range(epochs), desc="denoiser", disable=not progress):
        order, total = torch.randperm(n, generator=generator), 0.0
        for s in range(0, n, batch):
            idx = order[s : s + batch]
            loss = torch.mean((model(e[idx], r[idx], r[idx] - x[idx], m[idx]) - c[idx]) ** 2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / n)
    return model.eval(), losses
