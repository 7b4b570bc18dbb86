"""Every refusal of a release, in one place: its code (what callers read) and its text (what a person reads).

A refusal releases nothing and spends no budget. The code travels with the reason text in a
node's reply (``refusals``: user -> (code, text)); the texts below are the only ones the release
pipeline (fed.runtime.release) and the users (fed.runtime.user) give.
"""

from __future__ import annotations

from enum import StrEnum


class Refusal(StrEnum):
    """Why a node or a user refused: the code travels with the reason text, and callers read the code."""

    MALFORMED = "malformed"
    """The request is not one the protocol accepts (missing field, wrong type or shape, NaN)."""
    POLICY = "policy"
    """The device owner's policy does not allow it (mechanism, noise floor, evaluation, caps)."""
    BUDGET = "budget"
    """No budget left for it."""
    DONE = "done"
    """Nothing left to release (every true query has its answers, or the user holds no such records)."""
    NOT_SET_UP = "not-set-up"
    """The node has not received a valid setup yet."""


class RequestRefused(ValueError):
    """A request the user will not serve; the message names the problem, ``code`` classifies it."""

    def __init__(self, reason: str, code: Refusal = Refusal.MALFORMED) -> None:
        super().__init__(reason)
        self.code = code


class BudgetExhausted(RuntimeError):
    """The user has no budget left for the request; it refuses instead of releasing."""

    code = Refusal.BUDGET


class QueriesDone(RuntimeError):
    """Every true query already has its k answers (or the user has none); nothing to release."""

    code = Refusal.DONE


class EventCapReached(ValueError):
    """A release would add a distinct event past the ledger's cap; nothing was charged."""

    code = Refusal.POLICY


USER_REFUSALS: tuple[type[Exception], ...] = (BudgetExhausted, QueriesDone, EventCapReached)
"""What one user of a request may refuse with while the others still answer."""


def as_error(code: str, reason: str) -> Exception:
    """The exception of a user's refusal ``(code, reason)`` as a reply lists it."""
    error = {str(e.code): e for e in USER_REFUSALS}[code]  # type: ignore[attr-defined]
    return error(reason)


def no_train_records(user: int) -> str:
    """A training request to a user with no training records."""
    return f"user {user}: holds no train records"


def no_train_budget(user: int) -> str:
    """Every training record of the user is out of sentence-level budget."""
    return f"user {user}: no train record has budget left"


def user_budget(user: int) -> str:
    """The step's reports would pass the user-level budget."""
    return f"user {user}: user-level budget would be exceeded"


def too_few_to_mix(user: int, mechanism: str, needed: int, chosen: int) -> str:
    """A mixing randomizer needs more fresh records than the step chose."""
    return f"user {user}: {mechanism} mixes {needed} records per report, {chosen} chosen"


def amplified_needs_two(user: int, kind: str) -> str:
    """Amplified enforcement assumes a report cannot be linked to its record: not so for a user's only one."""
    if kind == "train":
        return (
            f"user {user}: amplified enforcement needs at least 2 training records "
            "(the report of a user's only record is linked to it)"
        )
    return f"user {user}: amplified enforcement needs at least 2 query items (the report of a user's only query is linked to it)"


def amplified_budget(user: int, kind: str) -> str:
    """One more step would pass the amplified (PLD) bound of the user's schedule."""
    return f"user {user}: the amplified {kind} budget would be exceeded"


def amplified_invalid(user: int, reason: object) -> str:
    """The user's step schedule has no amplified bound (``reason`` says why)."""
    return f"user {user}: {reason}"


def no_query_records(user: int) -> str:
    """A query request to a user with no query records."""
    return f"user {user}: holds no query records"


def queries_answered(user: int, k: int) -> str:
    """Every true query of the user already has its k answers."""
    return f"user {user}: every true query has {k} answers"


def no_query_budget(user: int, k: int) -> str:
    """No true query short of its answers has sentence-level budget left."""
    return f"user {user}: no query short of {k} answers has budget left"


def below_least_cost(params: object, cost: float, least: float) -> str:
    """A release costing less than the policy's least (it would take a distinct-event slot for next to nothing)."""
    return (
        f"one release through {str(params)[:300]} costs epsilon {cost:.4g}, below this device's least of {least:.4g} "
        "per release (policy: min_release_epsilon; each distinct event takes one of the ledger's max_events slots)"
    )


def upsampling_below_least(q: float, least: float) -> str:
    """An up-sampled query step whose true-data rate is below the policy's least (too many fictitious rows)."""
    return (
        f"up-sampling rate q {q:.4g} is below this device's least of {least:.4g} (policy: min_upsampling_q): "
        f"it would make {(1 - q) / q:.4g} fictitious queries per true one"
    )


def plan_unbuildable(error: Exception) -> str:
    """Setup: the run config gives a plan that cannot be built (fed.runtime.setup_checks)."""
    return f"the run's plan cannot be built, so no later message could be served: {type(error).__name__}: {error}"[:500]


def plan_does_not_fit(kind: str, mechanism: str, dim: int, error: Exception) -> str:
    """Setup: the plan's randomizer of ``kind`` does not take the node's records of ``dim`` values."""
    return f"the run's {kind} randomizer {mechanism} does not take this node's records of {dim} values: {error}"[:500]


def event_cap(held: int, new: int, cap: int) -> str:
    """Holding the step's events would pass the policy's cap on distinct events."""
    return f"the ledger holds {held} distinct privacy events; {new} more would pass the policy's cap of {cap}"


def device_data_unusable() -> str:
    """The device's data cannot be read or does not fit its label set; the details stay in the node's log,
    since an error naming a file's line or a label would tell the server about record content."""
    return "this device's data cannot be used (its owner finds why in the node's log); nothing was released"


def device_label_set(data: str) -> str:
    """A device whose data names no label set and whose policy names none."""
    return (
        f"this device's data ({data}) has no labels.txt and its policy names no num_labels: the label set comes "
        "from the schema or the owner's policy, never from the records"
    )


def whole_step_answers(user: int, released: int, answered: int) -> str:
    """Answers that do not cover every slot of the user's last query step at once."""
    return f"user {user}: a step's answers must cover all {released} slots it released, in one message; got {answered}"
