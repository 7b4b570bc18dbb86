"""Run a small simulation from Python and read what it released: the summary, every user's ledger and
the users table.

    python simulations/examples/simulate_run.py

Four users hold 200 records the project generates; the Gaussian DP layer is calibrated to worst-case
sentence-level epsilon 3. The run directory is runs/examples/simulate_run (relative to where it runs).
"""

import ldpfed

run = ldpfed.simulate(data="generated:200", users=4, epsilon=3.0, out="runs/examples/simulate_run")

summary = run.summary
print(
    f"accuracy {summary['accuracy_local']:.3f} (non-private {summary['accuracy_nonprivate']:.3f}) at worst-case "
    f"sentence-level epsilon {summary['epsilon_sentence_max']:.3g}, delta {summary['delta']:g}, {summary['releases']} releases"
)
for user, ledger in run.ledgers.items():  # what each user's device charged, from the randomizer's own events
    releases = sum(sum(charge["counts_per_record"]) for charge in ledger["events"])
    print(f"user {user}: {ledger['num_records']} records, {releases} releases, budget epsilon {ledger['budget']['epsilon_sentence']}")
for row in run.users:  # the users table (simulation only): per-user epsilon spent and accuracy
    print(f"user {row['user']}: epsilon spent {row['epsilon_sentence']:.3g}, accuracy {row['accuracy_private']}")
print(f"run directory: {run.path}")
