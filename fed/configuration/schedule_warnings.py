"""What a run's schedule of training releases wastes, one sentence each (``ldpfed simulate`` and the ServerApp)."""

from __future__ import annotations

from ldpfed.fed.configuration.plan import planned_train_releases
from ldpfed.fed.configuration.run_spec import RunSpec


def schedule_warnings(spec: RunSpec) -> list[str]:
    """What ``spec``'s schedule of training releases wastes, one sentence each (empty: nothing).

    Three settings make a run misleading: users that are never asked (--users-per-round x
    --rounds below --users), rounds with nothing left to release (under --enforce worst-case
    with --sampling all and no --records-per-user-round, an asked user releases every record
    it may, so each user's budget lasts k asks, k the planned releases per record), and noise
    calibrated for more releases of a record than the schedule makes (more than one per round,
    or more than a user is asked on average).
    """
    users, schedule = spec.data.users, spec.schedule
    per_round = min(schedule.users_per_round or users, users)
    asked = schedule.rounds * per_round
    warnings = []
    if asked < users:
        warnings.append(
            f"at most {asked} of the {users} users take part (--users-per-round {schedule.users_per_round} x "
            f"--rounds {schedule.rounds}): the other users' records are never released. Use --users-per-round 0 "
            "(every user, every round) or more --rounds."
        )
    if spec.privacy.enforce != "worst-case" or spec.privacy.privacy_model == "central":  # the rest is about local releases
        return warnings
    k = planned_train_releases(spec)
    whole = schedule.train_sampling.kind == "all" and not schedule.records_per_user_round  # an asked user releases all
    if whole and (k == 1 or per_round == users):
        busy = -(-users * k // per_round)  # every user asked k times: no budget left (exact in these cases)
        if busy < schedule.rounds:
            warnings.append(
                f"rounds {busy + 1} to {schedule.rounds} release nothing: an asked user releases all its records and "
                f"each record at most {k} time(s) (--releases-per-record), so every budget is spent after round "
                f"{busy}. Use --rounds {busy}, or --releases-per-record 0 to release every record in every round "
                "(noise calibrated for that many releases)."
            )
    if k > schedule.rounds:
        warnings.append(
            f"the noise is calibrated for {k} releases of each training record (--releases-per-record), but a "
            f"record is released at most once per round ({schedule.rounds} rounds): every report is noisier than the "
            f"run needs. Use --releases-per-record {schedule.rounds} or fewer."
        )
    elif k > 1 and asked < k * users:
        warnings.append(
            f"the noise is calibrated for {k} releases of each training record, but a user is asked "
            f"{asked / users:.2g} times on average (--users-per-round {schedule.users_per_round} of {users} "
            f"users x --rounds {schedule.rounds}): most records are released fewer times than the noise assumes. "
            "Lower --releases-per-record, or use --users-per-round 0."
        )
    return warnings
