"""Issue 42 item 6: what ``ldpfed.register_*`` accepts works everywhere its name is accepted, or is refused at once.

``ldpfed.register_randomizer`` passed validation, then ``simulate`` failed in its encoding subprocess with a
traceback: the other processes of a run (the encoding step, Flower's ServerApp and ClientApps on Ray workers, a
study's runs) never saw the registration. They now get each plugin the run uses by its import path
(fed.plugins.entry_points.environment, $LDPFED_PLUGINS) and load it as they load entry points; one that no other
process can import (defined in ``__main__`` or inside a function) is refused before anything starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ldpfed
from ldpfed.fed.plugins.entry_points import ENVIRONMENT, PARENT, PluginError, environment
from ldpfed.plugins import GaussianRandomizer
from ldpfed.fed.configuration.run_spec import RunSpec

ROOT = Path(__file__).resolve().parents[1]
MODULE = '''
"""Plugins of a researcher's own module, beside their script."""
import numpy as np

from ldpfed.plugins import GaussianRandomizer, HeterogeneityAxis, Option


class Twice(GaussianRandomizer):
    """The built-in Gaussian under another name."""

    name = "twice-gaussian"
    float_safe = True


def constant(dim="4"):
    from tests.test_plugins import Constant

    return Constant(dim)


def nearest(context):
    raise NotImplementedError


class Teams(HeterogeneityAxis):
    name = "teams"
    options = (Option("teams", int, 0, "two teams when 1"),)

    def parse(self, values):
        return values["teams"] or None

    def assign(self, setting, users, seed):
        return np.arange(users) % 2

    def group_names(self, setting):
        return ("red", "blue")


TEAMS = Teams()
'''


def _env(*folders: Path) -> dict[str, str]:
    paths = [*map(str, folders), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop(ENVIRONMENT, None)
    return env


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """The researcher's module, imported from its folder (on this process's path only)."""
    folder = tmp_path / "lib"
    folder.mkdir()
    (folder / "my_plugins.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(folder))
    import my_plugins

    yield my_plugins
    sys.modules.pop("my_plugins", None)


def test_a_randomizer_registered_from_a_script_runs_in_a_simulation(tmp_path: Path) -> None:
    """The README's Python API with a randomizer of the user's own module: Flower's processes never import the
    script or have its folder on their path, yet every user's node builds, calibrates and charges it."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "my_plugins.py").write_text(MODULE)
    (work / "script.py").write_text(textwrap.dedent("""
        import json
        import ldpfed
        from my_plugins import Twice

        ldpfed.register_randomizer(Twice)
        run = ldpfed.simulate(data="generated:200", users=4, nodes=2, mechanism="twice-gaussian", epsilon=3.0, out="run",
                              nonprivate_baseline=False, progress=False)
        print(json.dumps({"mechanism": run.config.privacy.mechanism, "releases": run.summary["releases"],
                          "errors": run.summary["errors"], "epsilon": run.summary["epsilon_sentence_max"]}))
    """))
    done = subprocess.run([sys.executable, "script.py"], cwd=work, env=_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mechanism"] == "twice-gaussian" and result["errors"] == [] and result["releases"] > 0
    assert result["epsilon"] == pytest.approx(3.0, rel=1e-3)
    ledgers = json.loads((work / "run" / "ledgers.json").read_text())["users"]
    assert len(ledgers) == 4 and all(state["events"] for state in ledgers.values())


def test_a_plugin_no_other_process_can_import_is_refused_before_anything_runs(restored: None, tmp_path: Path) -> None:
    class Local(GaussianRandomizer):
        name = "local-gaussian"
        float_safe = True

    ldpfed.register_randomizer(Local)
    assert ldpfed.audit("local-gaussian", 3.0, dim=4, samples=2000, progress=False).verdict == "pass"  # in this process: fine
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="defined inside a function.*install it as an entry-point plugin"):
        ldpfed.simulate(data="generated:200", users=4, mechanism="local-gaussian", out=str(out), progress=False)
    assert not out.exists()
    assert environment(RunSpec.of(mechanism="gaussian").to_mapping()) == {}  # a run that does not use it is not affected
    script = tmp_path / "cell.py"
    script.write_text(textwrap.dedent("""
        import ldpfed
        from ldpfed.plugins import GaussianRandomizer

        @ldpfed.register_randomizer
        class Mine(GaussianRandomizer):
            name = "mine"
            float_safe = True

        try:
            ldpfed.simulate(data="generated:200", users=4, mechanism="mine", out="run", progress=False)
        except ValueError as error:
            print("refused:", error)
    """))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "it is defined in __main__" in done.stdout and not (tmp_path / "run").exists(), done.stdout


def test_each_kind_of_plugin_is_handed_down_and_loads_in_a_child(restored: None, module: object, tmp_path: Path) -> None:
    """A randomizer class, an encoder and a classifier factory, an axis instance held by a module name; the child
    (as the encoding step, a ClientApp or a study's run is) has them in its registries, from the parent."""
    ldpfed.register_randomizer(module.Twice)
    ldpfed.register_encoder("constant", module.constant)
    ldpfed.register_classifier("nearest", module.nearest)
    ldpfed.register_axis(module.TEAMS)
    values = RunSpec.of(mechanism="twice-gaussian", encoder="constant:8", classifier="nearest", teams=1).to_mapping()
    env = environment(values)
    assert json.loads(env[ENVIRONMENT]) == {
        "ldpfed.randomizers": {"twice-gaussian": "my_plugins:Twice"}, "ldpfed.encoders": {"constant": "my_plugins:constant"},
        "ldpfed.classifiers": {"nearest": "my_plugins:nearest"}, "ldpfed.axes": {"teams": "my_plugins:TEAMS"},
    }
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "lib")
    code = (
        "import json\nfrom ldpfed.fed.randomizers import RANDOMIZERS\nfrom ldpfed.fed.encoders.registry import ENCODERS\n"
        "from ldpfed.fed.learning.classifiers import CLASSIFIERS\nfrom ldpfed.fed.heterogeneity import registry\n"
        "from ldpfed.fed.plugins.entry_points import PLUGINS\nfrom ldpfed.fed.configuration.run_spec import RunSpec\n"
        f"spec = RunSpec.from_mapping({values!r})\n"
        "print(json.dumps([RANDOMIZERS['twice-gaussian'].name, 'constant' in ENCODERS, 'nearest' in CLASSIFIERS,\n"
        "    [a.name for a in registry.AXES][-1], spec.privacy.mechanism, PLUGINS['ldpfed.axes']['teams']]))\n"
    )
    child = {**_env(), **env, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=child, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == ["twice-gaussian", True, True, "teams", "twice-gaussian", f"{PARENT} (my_plugins:TEAMS)"]
    # without the hand-down the child refuses the run config, as every process of a run did before
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0


def test_what_cannot_be_handed_down_says_why(restored: None, module: object) -> None:
    ldpfed.register_encoder("lambda-encoder", lambda: module.constant())
    with pytest.raises(PluginError, match="is a lambda"):
        environment({"encoder": "lambda-encoder"})
    assert environment({"encoder": "minilm"}) == {}  # not used: nothing to hand down, nothing refused

    class Stateful(module.Teams):
        name = "stateful"
        options = (module.Option("stateful", int, 0, "x"),)

        def __init__(self, teams: int = 2) -> None:
            self.teams = teams

    axis = Stateful(3)
    ldpfed.register_axis(axis)
    with pytest.raises(PluginError, match="an instance that no module holds"):
        environment({})  # an axis is always used: its options are run options
