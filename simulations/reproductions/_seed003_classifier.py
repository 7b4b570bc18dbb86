"""Seed 003's downstream classifier (appendix A.5.4) and the cosine the reproduction reports
(simulations/reproductions/seed003_snd.py; torch, numpy and scikit-learn only, so its GPU script can import it)."""

from __future__ import annotations

from typing import Any

import numpy as np


def mlp_scores(
    train_x: Any, train_y: np.ndarray, test_x: Any, test_y: np.ndarray, seed: int, epochs: int, device: Any, batch: int = 256
) -> dict[str, float]:
    """Seed 003's classifier (A.5.4: fully connected layers of the input's width with ReLU), AUC and accuracy.

    Two hidden layers of the input's width, Adam; the epoch is chosen on 10% of the training pairs.
    """
    import torch
    from sklearn.metrics import roc_auc_score

    torch.manual_seed(seed)
    mean, std = train_x.mean(0), train_x.std(0).clamp(min=1e-6)
    x, xt = ((train_x - mean) / std).to(device), ((test_x - mean) / std).to(device)
    y = torch.as_tensor(train_y, dtype=torch.long, device=device)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed)).to(device)
    hold = max(1, len(x) // 10)
    val, fit = perm[:hold], perm[hold:]
    width = x.shape[1]
    net = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 2)
    ).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4)
    best, best_state = -1.0, None
    for epoch in range(epochs):
        net.train()
        fit = fit[torch.randperm(len(fit), generator=torch.Generator().manual_seed(seed + epoch)).to(device)]
        for s in range(0, len(fit), batch):
            idx = fit[s : s + batch]
            loss = torch.nn.functional.cross_entropy(net(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        net.eval()
        with torch.no_grad():
            v = torch.softmax(net(x[val]), 1)[:, 1].cpu().numpy()
        labels = train_y[val.cpu().numpy()]
        score = roc_auc_score(labels, v) if len(set(labels)) > 1 else float((v.round() == labels).mean())
        if score > best:
            best, best_state = score, {k: t.clone() for k, t in net.state_dict().items()}
    net.load_state_dict(best_state)
    with torch.no_grad():
        p = torch.softmax(net(xt), 1)[:, 1].cpu().numpy()
    return {"auc": float(roc_auc_score(test_y, p)), "accuracy": float(((p > 0.5) == test_y).mean())}


def cosine(a: Any, b: Any) -> float:
    import torch

    return float(torch.nn.functional.cosine_similarity(a, b, dim=1).mean())
