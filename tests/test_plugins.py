"""Issue 28 item 2: randomizers, encoders and axes from other packages (docs/plugins.md).

The example plugin package (simulations/examples/plugin) is built and installed with pip into a temporary
folder; every end-to-end check runs in a subprocess whose PYTHONPATH holds that folder, so the
plugins are found the way an installed package's are: through their entry points. A second
package there states half its true sensitivity (its event under-reports), and the audit must
catch it. Broken, twin and shadowing packages must stop the registry's import with an error that
names their distribution. Registration within one process is checked on the registries themselves.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from ldpfed.fed.device.policy import DevicePolicy, default_mechanisms
from ldpfed.fed.encoders import registry as encoders
from ldpfed.fed.heterogeneity import registry as axes
from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis
from ldpfed.fed.plugins.entry_points import PluginError
from ldpfed.fed.randomizers import RANDOMIZERS, Randomizer, register_randomizer
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.configuration import config
from ldpfed.fed.configuration.option import Option
from ldpfed.fed.configuration.run_spec import RunSpec

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "simulations" / "examples" / "plugin"
DELTA = 1e-5
UNDERCOUNTED = '''
from ldpfed.plugins import GaussianEvent
from ldpfed_sphere import SphereGaussian


class Undercounted(SphereGaussian):
    """The example's sphere Gaussian, stating (and calibrating to) sensitivity clip: half the sphere's diameter."""

    name = "sphere-gaussian-undercounted"
    float_safe = True

    @classmethod
    def _calibrate(cls, target, options):
        return cls(options["clip"], target.gaussian_sigma(options["clip"]))

    @property
    def event(self):
        return GaussianEvent(sensitivity=self.clip, sigma=self.sigma)
'''


def _package(folder: Path, dist: str, source: str, points: dict[str, dict[str, str]]) -> Path:
    """A one-module distribution ``dist`` in ``folder`` whose entry points are ``points`` (group -> name -> object)."""
    module = dist.replace("-", "_")
    folder.mkdir(parents=True)
    (folder / f"{module}.py").write_text(source)
    groups = "".join(
        f'\n[project.entry-points."{group}"]\n' + "".join(f'"{name}" = "{module}:{value}"\n' for name, value in names.items())
        for group, names in points.items()
    )
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{dist}"\nversion = "0.1.0"\n{groups}\n[tool.setuptools]\npy-modules = ["{module}"]\n'
    )
    return folder


def _install(site: Path, *packages: Path) -> Path:
    """``packages`` installed with pip into the folder ``site`` (offline, no dependencies, nothing else touched)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(site), *map(str, packages)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site


def _run(site: Path, *argv: str, cwd: Path = ROOT, timeout: float = 900) -> subprocess.CompletedProcess:
    """``python argv`` with ``site`` then this checkout on its path (a Ray worker inherits it)."""
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin and the under-reporting one, installed into a temporary folder."""
    root = tmp_path_factory.mktemp("plugins")
    example = shutil.copytree(EXAMPLE, root / "example", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    points = {"ldpfed.randomizers": {"sphere-gaussian-undercounted": "Undercounted"}}
    return _install(root / "site", example, _package(root / "undercounted", "ldpfed-undercounted", UNDERCOUNTED, points))


@pytest.mark.parametrize("first", ["ldpfed.fed.encoders.registry", "ldpfed.fed.randomizers", "ldpfed.fed.heterogeneity.registry", "ldpfed"])
def test_one_plugin_module_loads_whichever_registry_is_imported_first(site: Path, first: str) -> None:
    """The example module holds a randomizer, an encoder and an axis; importing it imports the registries
    again, so a registry imported then must not read the module half-loaded (a circular import)."""
    code = (
        f"import {first}\n"
        "from ldpfed.fed.randomizers import RANDOMIZERS\nfrom ldpfed.fed.encoders.registry import ENCODERS\n"
        "from ldpfed.fed.heterogeneity import registry\n"
        "assert 'sphere-gaussian' in RANDOMIZERS and 'hashed-words' in ENCODERS\n"
        "assert 'cohorts' in [axis.name for axis in registry.AXES]\n"
    )
    done = _run(site, "-c", code, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon of mu-GDP at ``delta`` (Dong, Roth and Su 2022, Corollary 2.13), solved here, not by ldpfed."""
    def gap(eps: float) -> float:  # delta(eps) - delta, with e^eps * Phi(.) taken in logs (eps reaches the thousands)
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2)) - delta

    return 0.0 if gap(0.0) <= 0 else brentq(gap, 0.0, mu * mu / 2 + 10 * mu + 10, xtol=1e-10)


# -- end to end, through the installed entry points ---------------------------------------------------------------
def test_a_simulation_runs_the_plugins_and_its_ledgers_charge_the_randomizers_true_cost(site: Path, tmp_path: Path) -> None:
    """``ldpfed simulate`` (Flower + Ray workers) with the plugin randomizer, encoder and axis; each user's ledger
    charges what a Gaussian of the sphere's diameter 2C at the noise actually added costs (GDP, computed here);
    ``ldpfed attack`` then reads the run."""
    out = tmp_path / "run"
    done = _run(
        site, "-m", "ldpfed.simulations.cli", "simulate", "--quiet", "--data", "generated:200", "--users", "4", "--nodes", "2",
        "--rounds", "2", "--releases-per-record", "0", "--mechanism", "sphere-gaussian", "--epsilon", "8",
        "--clip", "2", "--labels", "public", "--encoder", "hashed-words:32", "--cohorts", "2", "--save-reports",
        "--no-nonprivate-baseline", "--out", str(out),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == [] and summary["releases"] > 0
    run = json.loads((out / "config.json").read_text())
    assert run["mechanism"] == "sphere-gaussian" and run["encoder"] == "hashed-words:32"
    clip = float(run["clip"])
    ledgers = json.loads((out / "ledgers.json").read_text())["users"]
    (sigma,) = {entry["event"]["sigma"] for state in ledgers.values() for entry in state["events"]}
    reports = np.load(out / "reports.npz")["reports"]
    # the noise the reports carry: rows on the sphere of radius C plus N(0, sigma^2 I), so E|y|^2 = C^2 + d sigma^2
    measured = math.sqrt((np.mean(np.sum(reports**2, axis=1)) - clip**2) / reports.shape[1])
    assert measured == pytest.approx(sigma, rel=0.05), (measured, sigma)
    users = {int(row["user"]): row for row in csv.DictReader((out / "users.csv").open())}
    assert {u: row["cohorts"] for u, row in users.items()} == {u: f"cohort{u % 2}" for u in range(4)}  # the plugin axis
    for user, state in ledgers.items():
        (entry,) = state["events"]
        assert entry["event"] == {"mechanism": "gaussian", "sensitivity": 2 * clip, "sigma": sigma}
        (reported,) = state["user_events"]
        row = users[int(user)]
        assert int(row["releases"]) == reported["reports"] == sum(entry["counts_per_record"])
        sentence = gdp_epsilon(math.sqrt(max(entry["counts_per_record"])) * 2 * clip / sigma, DELTA)
        assert float(row["epsilon_sentence"]) == pytest.approx(sentence, rel=1e-4)
        assert float(row["epsilon_user"]) == pytest.approx(gdp_epsilon(math.sqrt(reported["reports"]) * 2 * clip / sigma, DELTA), rel=1e-4)
    assert max(float(row["epsilon_sentence"]) for row in users.values()) == pytest.approx(8.0, rel=1e-3)
    # the server's attacks read the finished run, the plugin's randomizer rebuilt from config.json
    done = _run(site, "-m", "ldpfed.simulations.cli", "attack", str(out), "--kind", "mutual-information")
    assert done.returncode == 0, done.stderr[-3000:]
    attack = json.loads((out / "attack_mutual-information.json").read_text())
    assert attack["mechanism"] == "sphere-gaussian" and attack["records"] > 0 and math.isfinite(attack["success"])


def test_the_audit_finds_the_plugin_within_its_claim_and_catches_one_that_under_reports(site: Path) -> None:
    rows = {}
    for mechanism in ("sphere-gaussian", "sphere-gaussian-undercounted"):
        done = _run(site, "-m", "ldpfed.simulations.cli", "audit", "--mechanism", mechanism, "--epsilon", "3", "--dim", "8",
                    "--samples", "200000", "--json")
        (rows[mechanism],) = json.loads(done.stdout)
        assert done.returncode == (1 if rows[mechanism]["verdict"] == "claim violated" else 0), done.stderr[-3000:]
    honest, under = rows["sphere-gaussian"], rows["sphere-gaussian-undercounted"]
    assert honest["accounted_epsilon"] == pytest.approx(3.0, rel=1e-6)
    assert 1.0 < honest["audited_lower_bound"] <= 3.0 and honest["verdict"] == "pass"
    assert under["audited_lower_bound"] > 3.0 and under["verdict"] == "claim violated"


def test_a_device_serves_a_plugin_randomizer_or_encoder_only_once_its_owners_policy_names_it(site: Path, tmp_path: Path) -> None:
    done = _run(site, "-m", "tests.plugin_device", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout)
    assert answers["claims device default"] is True  # the class says a device may run it by default...
    assert "sphere-gaussian" not in answers["default mechanisms"]  # ...and the device's defaults ignore that
    unlisted = answers["encoder not listed"]
    assert unlisted["setup"][0] == "policy" and "hashed-words:32" in unlisted["setup"][1] and unlisted["releases"] == 0
    unnamed = answers["randomizer not named"]
    assert unnamed["setup"] is None and unnamed["releases"] == 0
    assert unnamed["train"][0] == "policy" and "sphere-gaussian" in unnamed["train"][1]
    assert answers["both named"] == {"setup": None, "train": None, "releases": 24}


BROKEN = {
    "fails to import": (
        "raise RuntimeError('this plugin is broken')\n", {"ldpfed.randomizers": {"broken": "Anything"}},
        ["'broken'", "distribution 'ldpfed-case'", "this plugin is broken"],
    ),
    "takes a built-in name": (
        "from ldpfed_sphere import SphereGaussian\n\nclass Shadow(SphereGaussian):\n    name = 'gaussian'\n    float_safe = True\n",
        {"ldpfed.randomizers": {"gaussian": "Shadow"}}, ["'gaussian' is a built-in randomizer", "distribution 'ldpfed-case'"],
    ),
    "takes another plugin's name": (
        "from ldpfed_sphere import SphereGaussian as Twin\n", {"ldpfed.randomizers": {"sphere-gaussian": "Twin"}},
        ["registered twice", "distribution 'ldpfed-sphere'", "distribution 'ldpfed-case'"],
    ),
    "is not a randomizer": ("Anything = object\n", {"ldpfed.randomizers": {"thing": "Anything"}}, ["not a subclass", "'ldpfed-case'"]),
    "encoder takes a built-in name": (
        "def make():\n    return None\n", {"ldpfed.encoders": {"minilm": "make"}}, ["'minilm' is a built-in encoder", "'ldpfed-case'"],
    ),
    "axis takes a run option": (
        "from ldpfed_sphere import CohortAxis\n\nclass Users(CohortAxis):\n    name = 'crowd'\n"
        "    options = (CohortAxis.options[0].__class__('users', int, 0, 'clash'),)\n",
        {"ldpfed.axes": {"crowd": "Users"}}, ["['users'] are taken", "'ldpfed-case'"],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_bad_plugin_stops_the_import_with_an_error_naming_its_distribution(site: Path, tmp_path: Path, case: str) -> None:
    source, points, expected = BROKEN[case]
    bad = _install(shutil.copytree(site, tmp_path / "site"), _package(tmp_path / "case", "ldpfed-case", source, points))
    done = _run(bad, "-c", "import ldpfed.fed.configuration.run_spec, ldpfed.fed.encoders.factory")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ldpfed.fed.plugins.entry_points.PluginError") and all(part in last for part in expected), last


# -- within one process --------------------------------------------------------------------------------------------
class Doubled(GaussianRandomizer):
    """A plugin class registered in-process: the built-in Gaussian under another name, its float safety stated."""

    name = "doubled-gaussian"
    float_safe = True


def test_a_randomizer_registered_in_process_is_listed_everywhere_but_among_a_devices_defaults(restored: None) -> None:
    assert register_randomizer(Doubled) is Doubled
    assert config.MECHANISMS[-1] == "doubled-gaussian" and "doubled-gaussian" in config.HELP["mechanism"]
    assert RunSpec.of(mechanism="doubled-gaussian").privacy.mechanism == "doubled-gaussian"
    assert Doubled.device_default() and "doubled-gaussian" not in default_mechanisms()
    assert "doubled-gaussian" not in DevicePolicy().mechanisms
    policy = DevicePolicy(mechanisms=("doubled-gaussian",))
    assert policy.refusal(Doubled(1.0, 1.0)) is None and "not allowed" in DevicePolicy().refusal(Doubled(1.0, 1.0))
    register_randomizer(Doubled)  # the same class again: nothing changes


def _class(**attributes: Any) -> type:
    return type("Plugin", (GaussianRandomizer,), {"name": "plugin", "float_safe": True, **attributes})


@pytest.mark.parametrize(
    "cls,message",
    [
        (_class(name="gaussian"), "'gaussian' is a built-in randomizer; a plugin cannot replace it"),
        (type("NoFloat", (GaussianRandomizer,), {"name": "nofloat"}), "must state float_safe"),
        (_class(name="noaudit", audit_scores=Randomizer.audit_scores), "states no audit pair"),
        (_class(shipped_files=("x.bin",)), "ships bundle files"),
        (int, "not a subclass"),
    ],
)
def test_register_randomizer_refuses_what_a_plugin_may_not_be(restored: None, cls: type, message: str) -> None:
    before = dict(RANDOMIZERS)
    with pytest.raises(PluginError, match=message):
        register_randomizer(cls)
    assert RANDOMIZERS == before


def test_a_second_class_under_a_plugins_name_is_refused(restored: None) -> None:
    register_randomizer(_class())
    with pytest.raises(PluginError, match="registered twice"):
        register_randomizer(_class())


class Constant:
    """A toy encoder: every record maps to the same unit vector of ``dim`` values."""

    def __init__(self, dim: str = "4") -> None:
        self.dim, self.name = int(dim), f"constant:{dim}"

    def fingerprint(self) -> str:
        return f"constant-{self.dim}"

    def truncated(self, max_length: int) -> Constant:
        return self

    def encode(self, texts: list[str], texts2: list[str] | None = None, batch_size: int = 64, progress: bool = False) -> np.ndarray:
        return np.full((len(texts), self.dim), 1 / math.sqrt(self.dim), dtype=np.float32)


def test_an_encoder_registered_in_process_builds_from_its_spec_and_a_device_needs_it_listed(restored: None) -> None:
    from ldpfed.fed.encoders.factory import make_encoder

    encoders.register_encoder("constant", Constant)
    assert make_encoder("constant").dim == 4 and make_encoder("constant:7").encode(["a"]).shape == (1, 7)
    assert "not allowed" in DevicePolicy().encoder_refusal("constant:7")
    assert DevicePolicy(encoders=("constant:7",)).encoder_refusal("constant:7") is None
    for name, message in (("minilm", "built-in encoder"), ("tokens", "built-in encoder"), ("a/b", "holds no"), ("constant", "twice")):
        with pytest.raises(PluginError, match=message):
            encoders.register_encoder(name, lambda: Constant())
    encoders.register_encoder("nothing", lambda: object())
    with pytest.raises(ValueError, match="not an Encoder"):
        make_encoder("nothing")


class Clubs(HeterogeneityAxis):
    """A toy axis: users in two clubs, reported."""

    name = "clubs"
    options = (Option("clubs", int, 0, "two clubs when 1"),)

    def parse(self, values: dict[str, Any]) -> int | None:
        return values["clubs"] or None

    def assign(self, setting: int, users: int, seed: int) -> np.ndarray:
        return np.arange(users) % 2

    def group_names(self, setting: int) -> tuple[str, ...]:
        return ("odd", "even")


def test_an_axis_registered_in_process_becomes_run_options_that_travel_in_one_key(restored: None) -> None:
    axes.register_axis(Clubs())
    spec = RunSpec.of(clubs=1)
    assert [axis.name for axis, _ in spec.heterogeneity.active()][-1] == "clubs"
    mapping = spec.to_mapping()
    assert "clubs" not in mapping and json.loads(mapping["plugin-options"]) == {"clubs": 1}
    assert RunSpec.from_mapping(mapping) == spec
    with pytest.raises(ValueError, match="plugin-options"):
        RunSpec.from_mapping({"plugin-options": "[1]"})
    for bad, message in ((type("Users", (Clubs,), {"name": "crowd", "options": (Option("users", int, 0, ""),)})(), "taken"),
                         (type("Twin", (Clubs,), {})(), "twice"), (HeterogeneityAxis(), "parse")):
        with pytest.raises(PluginError, match=message):
            axes.register_axis(bad)
