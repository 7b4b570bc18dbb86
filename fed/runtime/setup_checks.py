"""What a setup checks before the node's state changes: that every later message can build and serve its plans.

A node builds the run's plan (fed.configuration.plan.make_plan) in every message after setup, from the server's run config.
A plan that cannot be built (``gaussian`` given mixup options ``k=2,masks=4``) or whose randomizers do not take the
node's records (``sue`` set up for 5 dimensions on 384-value records) made every later message fail (issue 39,
finding 8); setup accepted it. :func:`check_plans` builds each plan the node will serve, as fed.runtime.node does,
and refuses the setup (nothing is kept: the unpacked bundle is removed and the node stays as it was) otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ldpfed.fed.runtime import refusals as texts
from ldpfed.fed.runtime.assets import bundle_encoder
from ldpfed.fed.runtime.refusals import Refusal, RequestRefused
from ldpfed.fed.configuration.plan import make_plan, plan_refusal

if TYPE_CHECKING:
    from ldpfed.fed.device.records import StoredRecords
    from ldpfed.fed.device.site import Site

PLAN_ERRORS = (KeyError, TypeError, ValueError, OverflowError, ZeroDivisionError)
"""What building a plan from a hostile run config may raise (each a refusal, never a crash)."""


def check_plans(site: Site, stored: StoredRecords, folder: Path | str) -> StoredRecords:
    """``stored`` (the hosted users' records, the number of labels and the largest query count), once every plan
    the node will serve on them is built, allowed with the bundle in ``folder``, and takes the records.

    RequestRefused otherwise: ``malformed`` for a plan that cannot be built or does not take the records, ``policy``
    for one the node must not serve on this bundle (fed.configuration.plan.plan_refusal).
    """
    records, num_labels, max_queries = stored
    dim = next(iter(records.values())).train.shape[1] if records else None
    spec = bundle_encoder(Path(folder))
    for config, _ in site.tiers():
        try:
            plan = make_plan(config, num_labels, max(max_queries, 1))
            policy = site.policy(plan, config)
        except PLAN_ERRORS as error:
            raise RequestRefused(texts.plan_unbuildable(error)) from None
        refused = plan_refusal(plan, spec, policy)
        if refused:
            raise RequestRefused(refused, Refusal.POLICY)
        for kind, randomizer in (("train", plan.train), ("query", plan.query)):
            try:
                if dim is not None:
                    randomizer.preprocess(np.zeros((1, dim)))
                    randomizer.features(np.zeros((1, dim)))
            except PLAN_ERRORS as error:
                raise RequestRefused(texts.plan_does_not_fit(kind, randomizer.name, dim, error)) from None
    return stored
