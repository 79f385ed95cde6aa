"""The presets: one home for each setting (the demo's settings are the ``demo`` preset, which
nothing else overrides), and one default seed for the config, the CLI and the notebooks."""

from __future__ import annotations

import json
import pathlib

import pytest

from erl_lite.config import ERLConfig

RECORDED = json.loads((pathlib.Path(__file__).parent / "fixtures" / "demo_configs.json").read_text())


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_demo_preset_builds_the_recorded_demo_configs_field_for_field(case):
    """A config built for the demo is what it was when the demo's settings were a layer on top of
    the cpu preset; only the preset's recorded name changed (it names the preset now used)."""
    from erl_lite.embedded import demo_config

    overrides, before = RECORDED[case]["overrides"], RECORDED[case]["config"]
    if "num_train_epochs" in overrides:
        # The one deliberate difference: the demo's settings used to arrive as overrides, so their
        # max_steps=30 beat the epochs a user gave; as a preset, epochs decide the length (as
        # with every preset: ERLConfig.preset).
        before = {**before, "max_steps": None}
    for now in (demo_config(**overrides), ERLConfig.preset("demo", **overrides)):
        got = now.to_dict()
        # recorded when the preset travelled in extra (then "cpu", under the demo's layer)
        assert got["extra"] == {k: v for k, v in before["extra"].items() if k != "preset"}
        assert got["preset_name"] == "demo"
        # Fields added since the recording (diagnostics, generation_backend, vllm_*) hold their defaults; the rest are
        # as recorded.
        added = {k: v for k, v in got.items() if k not in before and k != "preset_name"}
        assert added == {k: ERLConfig().to_dict()[k] for k in added}
        assert set(added) <= {
            "diagnostics",
            "generation_backend",
            "reflection_copies",
            "vllm_gpu_memory_utilization",
            "reflection_request",
            "reflection_prefill",
            "retry_instruction",
            *(f"vllm_importance_sampling_{n}" for n in ("correction", "mode", "clip_max", "clip_min")),
        }
        assert {k: v for k, v in got.items() if k not in ("extra", "preset_name", *added)} == {
            k: v for k, v in before.items() if k != "extra"
        }


def test_demo_settings_are_one_preset_that_nothing_overrides():
    """The demo preset is the whole of the demo's settings: DEMO_SETTINGS is a read-only view of it."""
    from erl_lite.config.presets import PRESETS
    from erl_lite.embedded import DEMO_SETTINGS

    assert dict(DEMO_SETTINGS) == PRESETS["demo"]
    with pytest.raises(TypeError):
        DEMO_SETTINGS["max_steps"] = 3  # type: ignore[index]


@pytest.mark.parametrize("name", ["cpu", "demo", "gpu"])
def test_a_preset_lists_only_what_it_changes(name):
    """A default has one home, ERLConfig: a preset repeats none of them (``paper`` aside: it cites each of the released
    code's values line by line, defaults included)."""
    import dataclasses

    from erl_lite.config.presets import PRESETS

    defaults = {f.name: f.default for f in dataclasses.fields(ERLConfig)}
    repeated = {k: v for k, v in PRESETS[name].items() if k in defaults and defaults[k] == v}
    assert not repeated, f"preset {name!r} repeats ERLConfig's defaults {repeated}"


@pytest.mark.parametrize(
    "build",
    [
        ERLConfig,
        lambda: ERLConfig.preset("cpu"),
        lambda: ERLConfig.preset("demo"),
        lambda: ERLConfig.preset("gpu"),
        lambda: ERLConfig.preset("paper"),
        lambda: __import__("erl_lite.embedded", fromlist=["demo_config"]).demo_config(),
    ],
    ids=["ERLConfig()", "cpu", "demo", "gpu", "paper", "demo_config()"],
)
def test_every_config_defaults_to_the_one_default_seed(build):
    from erl_lite.config import DEFAULT_SEED

    assert DEFAULT_SEED == 0  # the seed of every figure the README reports
    assert build().seed == DEFAULT_SEED


@pytest.mark.parametrize(
    "argv", [["train"], ["demo"], ["train", "--env", "frozenlake"], ["train", "--preset", "gpu", "--env", "qa"]]
)
def test_cli_defaults_to_the_configs_default_seed(argv):
    from erl_lite.cli import build_parser
    from erl_lite.cli.train import train_settings
    from erl_lite.config import DEFAULT_SEED

    args = build_parser().parse_args(argv)
    seed = train_settings(args)[1].seed if argv[0] == "train" else args.seed
    assert seed == DEFAULT_SEED


def test_train_on_the_demo_world_uses_the_demo_preset_unless_another_is_named():
    """``--env demo`` defaults to the demo preset; a named preset is used as it is (no demo layer on top)."""
    from erl_lite.cli import build_parser
    from erl_lite.cli.train import train_settings

    parse = build_parser().parse_args
    assert train_settings(parse(["train"]))[1].preset_name == "demo"
    assert train_settings(parse(["train", "--env", "frozenlake"]))[1].preset_name == "cpu"
    gpu = train_settings(parse(["train", "--preset", "gpu"]))[1]
    assert gpu.to_dict() == ERLConfig.preset("gpu", extra={"env": "demo", "small": False}).to_dict()
    demo_elsewhere = train_settings(parse(["train", "--preset", "demo", "--env", "frozenlake"]))[1]
    assert demo_elsewhere.max_completion_length == ERLConfig.preset("demo").max_completion_length


@pytest.mark.parametrize(
    "function",
    [
        "erl_lite.embedded.world:demo_world",
        "erl_lite.embedded.demo:demo_trainer",
        "erl_lite.embedded.demo:run_demo",
        "erl_lite.teach.setup:setup",
    ],
)
def test_run_seeds_default_to_the_one_default_seed(function):
    """Every function that takes a run's seed defaults to DEFAULT_SEED (the demo world is drawn by it)."""
    import importlib
    import inspect

    from erl_lite.config import DEFAULT_SEED

    module, name = function.split(":")
    params = inspect.signature(getattr(importlib.import_module(module), name)).parameters
    seed = params.get("seed", params.get("run_seed"))
    assert seed is not None and seed.default == DEFAULT_SEED


@pytest.mark.parametrize("name", [None, "cpu", "gpu"])
def test_extra_is_free_form_even_under_the_key_preset(name):
    """``extra`` holds what the user put there: a "preset" key in it is theirs, not a preset to adopt (configs saved
    that way were written by development versions before the first release)."""
    extra = {"preset": "mine", "note": 1}
    cfg = ERLConfig(extra=extra) if name is None else ERLConfig.preset(name, extra=extra)
    assert (cfg.extra, cfg.preset_name) == (extra, name)
    assert ERLConfig(**cfg.to_dict()) == cfg


def test_the_preset_name_is_a_field_not_an_extra():
    cfg = ERLConfig.preset("cpu", extra={"note": "x"})
    assert cfg.preset_name == "cpu" and cfg.extra == {"note": "x"}
    assert cfg.replace(seed=3).preset_name == "cpu" and ERLConfig().preset_name is None
    assert ERLConfig(**cfg.to_dict()) == cfg  # saved and restored with the config
