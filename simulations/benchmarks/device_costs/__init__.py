"""What it costs a device (issue 9 item 7): latency per release, SuperNode memory, bytes per report,
time to first report.

Everything runs the real device code path on this machine, outside the simulation engine
(``fed.device.entropy.in_simulation_engine()`` is false, so noise comes from the OS through the
device sampler and the ledger is the durable on-disk store, ``synchronous=FULL``):

1. **Latency per release** (median and p95 over ``--releases`` fresh releases), for the
   default device mechanism (Gaussian, the run's defaults: clip 3, epsilon 8, MiniLM projected
   to 16 dimensions) and for a full-dimension release (no projection: 384 dimensions):

   - *encode*: MiniLM (and the shipped projection) on one sentence of the device's data;
   - *clip + noise*: the randomizer's release of one record, with the fresh OS-keyed generator
     a release draws from (``fed.device.entropy.generator``);
   - *durable charge*: one ledger transaction of the node's store as a release message makes it
     (read the device's ledger, check, charge, log the step, store the memo, commit with fsync),
     and the commit alone;
   - *train message*: the whole ``train`` message for one record as the ClientApp serves it
     (device node config: the owner's policy, state folder and data), in a warm process;
   - *encode + message*: what a fresh sentence costs end to end (the ClientApp encodes a
     device's data once, at setup; a release reads the stored encoding).

   Token-level DP is not served by devices (it is a simulation study,
   ``simulations.experiments.token_vs_latent``); the noise for a 16 x 384 block of token vectors is timed
   as a pointer to what it would cost.
2. **Bytes per report**: the reply carrying one report, as Flower 1.41 sends it: the raw arrays,
   the serialized Flower objects (Message, RecordDict, records, arrays), and the protobuf
   bodies of the HTTP requests a SuperNode makes to push it (PushMessages and one PushObject
   per object); HTTP headers and TLS framing are not counted.
3. **With ``--supernode``**: a real SuperLink (``simulations.flower_runner``; by default the
   documented deployment: TLS, SuperNode authentication, a signed app from the registry) starts
   a run and waits; then one ``flower-supernode`` hosting one user with MiniLM is launched, with
   the Flower settings a device runs with (``simulations.commands.device.SUPERNODE_ENV``), and
   measured. Before the launch the owner encodes the device's data once, as the documented
   procedure does (``ldpfed device encode``, timed on its own; ``--no-device-encode`` leaves it
   to setup). Then: the peak memory (VmHWM, VmRSS and PSS from /proc) of the SuperNode process and of
   every process it spawns (Flower 1.41 starts ``flower-superexec``, which starts a new
   ``flwr-clientapp`` process for every message), the time from launch to the first report the
   SuperLink holds (its stages read from the SuperNode's log), and each train message's wall
   time on the SuperNode.
4. **What ldpfed adds** (with ``--supernode``, unless ``--skip-noop``): before ldpfed's run, the same
   ``flower-supernode`` command (device folder, node config, TLS, node key, trusted signers, Flower
   settings, telemetry off) serves a no-op app (``simulations.benchmarks.noop_flower``: the same
   message sequence, each message answered at once with a tiny reply, signed by the same owner key
   and served by the same registry), launched fresh against a fresh SuperLink. Both are measured
   alike; ``compare.py`` gives each app's median train message, the peak VmHWM of a message's
   ``flwr-clientapp`` process and the time to the first report, ldpfed minus no-op, and the goals
   of issue 39 item 13 (0.3 s, 50 MiB, 3 s).

Run (about 1 minute without ``--supernode``, 5 with it, on 2 cores; docs/device_costs.md's figures come
from this command, ``--torch-threads 1`` because another job held one of the two cores)::

    python -m ldpfed.simulations.benchmarks.device_costs --supernode --torch-threads 1 --out simulations/reports/device_costs/after_perf.json
"""
