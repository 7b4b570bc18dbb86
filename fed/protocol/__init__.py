"""The ldpfed node protocol, free of any message framework: every message a node accepts, and what it returns.

Both apps speak it: the ServerApp (strategies/) builds requests and reads replies, the ClientApp
(clients/) reads requests and builds replies. A builder returns plain :class:`Content` (numpy arrays,
config values and metrics in named records); an app hands it to Flower with :class:`Records`, the
framework's classes. Every ``read_*`` of a request is run on the node against untrusted content and
raises :class:`fed.runtime.requests.RequestRefused` (code ``malformed``) on anything it does not
expect; the node then replies :func:`refusal`.

| message type | request | reply |
|---|---|---|
| ``query.setup`` | the asset bundle (uint8 tar) | :class:`NodeInfo`: hosted users, dimension, labels, public sizes |
| ``train`` | :func:`release_request`, or several in one (:func:`release_parts`: one per privacy tier) | :func:`release_reply`, a part per request and host (reports and labels, or their sums when the request says ``summarise``; per-user refusals and ledger figures) |
| ``query.release`` | the same | the same (reports under opaque slots) |
| ``query.answer`` | :func:`answer_request` | users whose queries all have k answers |
| ``query.score`` | nothing | :class:`fed.learning.evaluation.Outcomes` of remote inference |
| ``evaluate`` | classifiers, linear or MLP (:func:`evaluate_request`) | :class:`fed.learning.evaluation.Outcomes` of local inference (also per user, simulation only) |
| ``query.ledger`` | nothing | every hosted user's ledger: in full in the simulation engine, a device's aggregates on a device (no record index or count) |
| ``train.central`` | the global softmax head (:func:`central_arrays`; Flower's DP wrapper adds the clipping norm) | the user's locally trained head, clipped by Flower's ``fixedclipping_mod`` (:func:`central_reply`; simulation only) |
| ``train.central_adaptive`` | the same | the same, clipped by ``adaptiveclipping_mod``, which adds the clipped bit |

Any of them may be answered by :func:`refusal` (a code from :class:`fed.runtime.requests.Refusal` and a
reason); per-user refusals inside a release reply carry the same codes.

May import: fed.learning, fed.runtime.
"""

from ldpfed.fed.protocol.content import Arrays, Config, Content, Metrics, Readable, Records
from ldpfed.fed.protocol.messages import (
    ANSWER,
    CENTRAL_TRAIN,
    CENTRAL_TRAIN_ADAPTIVE,
    EVALUATE,
    LEDGER,
    MESSAGE_TYPES,
    RELEASE,
    SCORE,
    SETUP,
    TRAIN,
    NodeInfo,
    answer_reply,
    answer_request,
    ledger_reply,
    read_answer_reply,
    read_answer_request,
    read_ledger_reply,
    read_refusal,
    read_setup_reply,
    read_setup_request,
    refusal,
    setup_reply,
    setup_request,
)
from ldpfed.fed.protocol.models import (
    CENTRAL_HEAD,
    CENTRAL_NORM,
    CENTRAL_ROUND,
    CENTRAL_WEIGHT,
    MLP_LAYER,
    central_arrays,
    central_reply,
    central_request_refusal,
    evaluate_request,
    models_record,
    outcomes_reply,
    read_central_request,
    read_central_round,
    read_evaluate_request,
    read_outcomes_reply,
)
from ldpfed.fed.protocol.releases import (
    read_release_replies,
    read_release_reply,
    read_release_request,
    release_parts,
    release_reply,
    release_request,
)

__all__ = [
    "ANSWER", "CENTRAL_HEAD", "CENTRAL_NORM", "CENTRAL_ROUND", "CENTRAL_TRAIN", "CENTRAL_TRAIN_ADAPTIVE", "CENTRAL_WEIGHT",
    "EVALUATE", "LEDGER", "MESSAGE_TYPES", "MLP_LAYER", "RELEASE", "SCORE", "SETUP", "TRAIN",
    "Arrays", "Config", "Content", "Metrics", "NodeInfo", "Readable", "Records",
    "answer_reply", "answer_request", "central_arrays", "central_reply", "central_request_refusal", "evaluate_request", "ledger_reply",
    "models_record", "outcomes_reply", "read_answer_reply", "read_answer_request", "read_central_request",
    "read_central_round", "read_evaluate_request", "read_ledger_reply", "read_outcomes_reply", "read_refusal",
    "read_release_replies", "read_release_reply", "read_release_request", "read_setup_reply", "read_setup_request",
    "refusal", "release_parts", "release_reply", "release_request", "setup_reply", "setup_request",
]
