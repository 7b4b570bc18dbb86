"""Issue 39's privacy mutations: accounting edges the suite missed (item 12), and the device's
non-interference (findings 1 and 2 put back, and a device's own per-user summary in its replies).

Listed in :data:`simulations.checks.mutations.MUTATIONS` with the others; see that module for the format.
"""

from __future__ import annotations

from ldpfed.simulations.checks.mutation import Mutation

AE = "tests/test_accounting_edges.py::"
SF = "tests/test_shuffled_figure.py::"
NI = "tests/test_noninterference.py::"

DEVICE_MUTATIONS: tuple[Mutation, ...] = (
    # -- issue 39, item 12: changes the suite missed (limits probed from both sides, memo and store keys, the shuffle figure)
    Mutation(
        "query-user-level-check-skipped",
        "fed/runtime/user.py",
        "        if not ledger.users_can_afford(user_events, ONE)[0]:\n            raise BudgetExhausted(texts.user_budget(self.user_id))",
        "        if False:\n            raise BudgetExhausted(texts.user_budget(self.user_id))",
        (f"{AE}test_a_query_step_past_the_user_budget_is_refused",),
        "a query step skips the user-level budget check (query reports served past the user budget)",
        fast=True,
    ),
    Mutation(
        "evaluation-user-charge-per-model",
        "fed/runtime/node.py",
        "cost = {event: np.array([len(ids)])}",
        "cost = {event: np.array([min(len(ids), 1)])}",
        (f"{AE}test_device_evaluation_charges_the_user_account_one_bit_per_query_and_model",),
        "device evaluation charges the user-level account one bit per model instead of one per query",
        fast=True,
    ),
    Mutation(
        "amplified-memo-key-without-budget",
        "fed/privacy/accountants/enforced.py",
        "key = (rate, z, delta, budget)",
        "key = (rate, z, delta)",
        (f"{AE}test_the_amplified_check_answers_each_budget_for_itself",),
        "the amplified budget check's memo ignores the budget: another budget's answer is reused",
        fast=True,
    ),
    Mutation(
        "composition-figure-key-without-delta",
        "fed/privacy/composition.py",
        'return {"delta": delta, "events": sorted(',
        'return {"events": sorted(',
        (f"{AE}test_a_stored_composition_figure_is_the_figure_at_its_own_delta",),
        "a stored composition figure is not keyed by delta: a device reads a figure computed at another delta",
        fast=True,
    ),
    Mutation(
        "noise-floor-slack-one-percent",
        "fed/runtime/requests.py",
        "if cost > limits.max_release_epsilon * (1 + 1e-9):",
        "if cost > limits.max_release_epsilon * (1 + 1e-2):",
        (f"{AE}test_a_release_costing_just_above_the_noise_floor_is_refused",),
        "the noise floor's slack is 1% instead of 1e-9: a release costing up to 1% over the floor is served",
        fast=True,
    ),
    Mutation(
        "user-budget-one-percent-over",
        "fed/privacy/cohort_ledger.py",
        "return self._epsilons(after) <= self.budget.epsilon_user",
        "return self._epsilons(after) <= 1.01 * self.budget.epsilon_user",
        (f"{AE}test_a_training_release_costing_just_above_the_user_budget_is_refused_and_just_below_served",),
        "the user-level budget check admits 1% over the budget",
        fast=True,
    ),
    Mutation(
        "calibration-figure-key-without-counts",
        "fed/privacy/calibration.py",
        '"other": sorted([json.dumps(e.to_json(), sort_keys=True), int(n)] for e, n in other.items()),',
        '"other": sorted(json.dumps(e.to_json(), sort_keys=True) for e, n in other.items()),',
        (f"{AE}test_a_stored_calibrated_sigma_is_the_sigma_for_its_own_counts",),
        "a stored calibrated sigma is keyed by the other events but not their counts: a device reads a sigma for other counts",
        fast=True,
    ),
    Mutation(
        "shuffle-eps0-without-label",
        "strategies/app.py",
        "per_report.append(event.epsilon + (config.privacy.label_epsilon or 0.0))",
        "per_report.append(event.epsilon)",
        (f"{SF}test_eps0_composes_the_randomized_response_labels_epsilon",),
        "the shuffle model's eps0 leaves out the randomized-response label's epsilon (published figure too small)",
        fast=True,
    ),
    Mutation(
        "shuffle-eps0-smallest-plan",
        "strategies/app.py",
        "return composed(strategy.shuffled, max(per_report), config.privacy.delta)",
        "return composed(strategy.shuffled, min(per_report), config.privacy.delta)",
        (f"{SF}test_eps0_is_the_largest_over_the_plans",),
        "the shuffle model's eps0 is the smallest per-report epsilon over the plans (tiers), not the largest",
        fast=True,
    ),
    Mutation(
        "shuffle-gaussian-as-pure",
        "strategies/app.py",
        "        if not isinstance(event, PureEvent) or plan.train.records_per_report != 1:\n"
        "            return composed(strategy.shuffled, None, config.privacy.delta)\n"
        "        per_report.append(event.epsilon + (config.privacy.label_epsilon or 0.0))",
        "        if plan.train.records_per_report != 1:\n"
        "            return composed(strategy.shuffled, None, config.privacy.delta)\n"
        "        from ldpfed.fed.privacy.composition import compose_epsilon\n"
        "        local = event.epsilon if isinstance(event, PureEvent) else compose_epsilon({event: 1}, config.privacy.delta)\n"
        "        per_report.append(local + (config.privacy.label_epsilon or 0.0))",
        (f"{SF}test_a_gaussian_report_gets_no_shuffled_figure",),
        "an (epsilon, delta) Gaussian report is fed to the pure-LDP shuffle bound at its one-release epsilon",
        fast=True,
    ),
    # -- issue 39, item 10: non-interference catches findings 1 and 2 put back, and the content oracle of item 12
    Mutation(
        "device-users-from-run-config",
        "clients/app.py",
        "            stored = _device_records(site, folder)",
        "            stored = _build_records(site, config, folder, partition_id, num_partitions)",
        (f"{NI}test_devices_that_differ_in_private_content_answer_alike[no-memo]", "tests/test_adversarial_population.py"),
        "a device builds its users with the run config's users, partition, seed and train limit (issue 39, finding 1)",
    ),
    Mutation(
        "answers-one-slot-at-a-time",
        "fed/runtime/user.py",
        "        if len(slots) != len(pending):",
        "        if False:",
        (f"{NI}test_devices_that_differ_in_private_content_answer_alike", "tests/test_adversarial_answers.py"),
        "a query step's answers are taken one slot at a time: the reply after which the user finishes names the true slot "
        "(issue 39, finding 2)",
    ),
    Mutation(
        "device-reply-carries-user-summary",
        "fed/runtime/node.py",
        "        if self.simulation:\n            return user.summary(",
        "        if True:\n            return user.summary(",
        (f"{NI}test_devices_that_differ_in_private_content_answer_alike[no-memo]",),
        "a device's release reply carries its user's own summary (records with budget left, releases) instead of the "
        "served figures (issue 39, item 12)",
    ),
)
