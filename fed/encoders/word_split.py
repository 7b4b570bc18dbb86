"""The torch half of Split-N-Denoise (seed 003): its two samplers, the table's bounds and the server pass.

The mechanism itself (what is released, its event, its audit) is one class,
fed.randomizers.split_denoise.SplitDenoiseRandomizer (``--mechanism snd``), which ``ldpfed simulate``, the
Python API, the device and the seed-003 reproduction all use; this module holds what it draws and runs.

The user looks up the rows of its tokens in the word-embedding table E (before the position and
token-type embeddings and the LayerNorm), adds noise to the row of every real token, clips each
noisy row to the rows' bound C = max_v ||E_v||_2 (seed 003 eq. 3) and sends those rows. The
server runs the whole model on them as ``inputs_embeds`` with the attention mask and pools the
last hidden states over the mask (masked mean): e_n. Padding positions are neither noised nor
sent (here they are zero placeholders the mask hides; :func:`server_pass` shows they change
nothing). The mask's length, i.e. the record's token count n, is public, like the size of a
user's dataset: the guarantee below is between records of the same token count.

Two samplers (``sampler``), each with the event it really has:

- ``dchi`` (the seed's text, section 3.3 and appendix A.1): z = l v, l ~ Gamma(d, scale 1/eta),
  v uniform on the unit sphere, so the density is proportional to exp(-eta ||z||_2). (The text
  says "unit ball"; only the sphere gives that density.) A row is pure eta ||x - x'||_2-private;
  over the table that is eta * 2C per row, MetricDPEvent(eta, 2C, tokens=n).
- ``coordinate`` (the authors' code, eaas-privacy data/load_data.py ``sample_noise_Chi``): for
  every coordinate independently, z_i = l_i u_i with l_i ~ Gamma(d, rate eta) and u_i ~ U(-1, 1).
  Each coordinate then has the density f(z) = eta / (2 (d - 1)) Q(d - 1, eta |z|), where Q is the
  regularised upper incomplete gamma function (for d = 2 this is Laplace(1/eta)). d/dz log f(z)
  = -eta h(eta |z|) sign(z), with h the hazard rate of Gamma(d - 1, 1), which rises to 1; so
  |log f(z) - log f(z + D)| < eta |D|, and the bound is approached far out along every
  coordinate. A row is therefore pure eta ||x - x'||_1-private, not eta ||x - x'||_2 as the seed
  states: the true per-row epsilon is eta times the table's L1 diameter (bounded here by
  2 max_v ||E_v||_1), CoordinateMetricDPEvent(eta, that bound, tokens=n). For MiniLM that is
  about 15 times the seed's figure eta * 2C.

The randomizer enforces the domain the events assume: it clips each row to L2 radius C (and, for
``coordinate``, to L1 radius half the L1 diameter) before the noise; on the table's own rows, whose
bounds these are, the clips change nothing.

Both bounds are for the noise before the post-clip; the clip is post-processing, so they stay
valid (they are upper bounds of the clipped mechanism, not shown to be tight for it).

Everything here needs only torch and numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ldpfed.fed.encoders.hf import masked_mean

def standard_gamma(shape: tuple[int, ...], alpha: float, generator: torch.Generator, device: Any = "cpu") -> torch.Tensor:
    """Gamma(alpha, 1) draws of ``shape`` (float64) from ``generator``: Marsaglia and Tsang's method, alpha >= 1."""
    if not alpha >= 1:
        raise ValueError(f"the gamma sampler needs a shape of at least 1, got {alpha!r}")
    d = alpha - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    out = torch.empty(shape, dtype=torch.float64, device=device).view(-1)
    todo = torch.arange(out.numel(), device=device)
    while todo.numel():
        x = torch.randn(todo.numel(), generator=generator, dtype=torch.float64, device=device)
        v = (1.0 + c * x) ** 3
        u = torch.rand(todo.numel(), generator=generator, dtype=torch.float64, device=device)
        ok = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * torch.log(v.clamp(min=1e-300)))
        out[todo[ok]] = d * v[ok]
        todo = todo[~ok]
    return out.view(shape)


def dchi_rows(rows: int, dim: int, eta: float, generator: torch.Generator, device: Any = "cpu") -> torch.Tensor:
    """``rows`` draws of d_chi noise in R^dim (density proportional to exp(-eta ||z||_2)), float64."""
    radius = standard_gamma((rows, 1), float(dim), generator, device) / eta
    direction = torch.randn(rows, dim, generator=generator, dtype=torch.float64, device=device)
    return radius * direction / direction.norm(dim=1, keepdim=True).clamp(min=1e-300)


def coordinate_rows(rows: int, dim: int, eta: float, generator: torch.Generator, device: Any = "cpu") -> torch.Tensor:
    """``rows`` draws of the authors' noise in R^dim: per coordinate Gamma(dim, rate eta) times U(-1, 1), float64."""
    if dim < 2:
        raise ValueError("the per-coordinate sampler needs a dimension of at least 2")
    magnitude = standard_gamma((rows, dim), float(dim), generator, device) / eta
    return magnitude * (2.0 * torch.rand(rows, dim, generator=generator, dtype=torch.float64, device=device) - 1.0)


NOISE = {"dchi": dchi_rows, "coordinate": coordinate_rows}


@dataclass(frozen=True)
class TableBounds:
    """The word-embedding table's bounds: C (largest row L2 norm) and the diameters the events use."""

    clip: float
    l2_diameter: float
    l1_diameter: float

    @classmethod
    def of(cls, table: torch.Tensor) -> "TableBounds":
        """Bounds of ``table`` (V, d): C = max ||E_v||_2, L2 diameter 2C, L1 diameter bound 2 max ||E_v||_1."""
        table = table.detach().double()
        clip = float(table.norm(dim=1).max())
        return cls(clip=clip, l2_diameter=2.0 * clip, l1_diameter=2.0 * float(table.abs().sum(dim=1).max()))


def server_pass(model: Any, rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The server's half (and, on clean rows, the whole encoder run locally): the model on ``rows`` as
    ``inputs_embeds`` with the attention mask, last hidden states mean-pooled over the mask; float32 (n, d).

    Padding rows are hidden by the mask: their values do not change the output.
    """
    with torch.no_grad():
        hidden = model(inputs_embeds=rows.to(model.dtype), attention_mask=mask).last_hidden_state.float()
    return masked_mean(hidden, mask)
