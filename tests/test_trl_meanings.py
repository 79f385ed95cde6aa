"""TRL's and transformers' names keep their meaning: the same value of a shared field does the same thing.

``max_grad_norm``: transformers' Trainer clips only when it is above 0 (``if args.max_grad_norm > 0``), so 0 means
"no clipping"; ``torch.nn.utils.clip_grad_norm_(params, 0)`` would instead zero every gradient.
"""

from __future__ import annotations

import pytest
import torch
from test_run_faults import make_trainer

from erl_lite import ERLConfig


def lora_b_after(steps: int, **overrides) -> dict[str, torch.Tensor]:
    trainer = make_trainer(None, max_steps=steps, weight_decay=0.0, **overrides)
    trainer.train()
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}


@pytest.mark.slow
def test_max_grad_norm_zero_or_none_means_no_clipping_as_in_transformers():
    unclipped = lora_b_after(2, max_grad_norm=1e30)  # a bound no gradient reaches
    assert max(float(b.abs().max()) for b in unclipped.values()) > 1e-4  # LoRA B starts at 0 and moved
    for off in (0, 0.0, None):
        got = lora_b_after(2, max_grad_norm=off)
        for name, want in unclipped.items():  # the same update bit for bit: clip_grad_norm_ scales by 1.0
            assert torch.equal(got[name], want), (off, name)
    # Negative control: a bound near 0 is a near-zero gradient, and B barely leaves 0 (what 0 used to do).
    starved = lora_b_after(2, max_grad_norm=1e-12)
    assert max(float(b.abs().max()) for b in starved.values()) < 1e-3 * max(
        float(b.abs().max()) for b in unclipped.values()
    )


def test_max_grad_norm_below_zero_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"ERLConfig.max_grad_norm must be >= 0 \(0 or None: no clipping\)"):
        ERLConfig(max_grad_norm=-1)


# Values at or below 0 that a numeric field takes on purpose (each documented on the field); any other is refused
# when the config is built, naming the field.
MEANINGFUL = {
    ("seed", 0),
    ("top_k", 0),  # no top-k filter, as in generate
    ("eval_top_k", 0),
    ("reward_threshold", -1),  # rewards may be negative
    ("reward_threshold", 0),
    ("internalization_coef", 0),  # no internalization loss
    ("learning_rate", 0),
    ("warmup_ratio", 0),
    ("warmup_steps", 0),
    ("weight_decay", 0),
    ("max_grad_norm", 0),  # no clipping
    ("beta", 0),  # no KL term
    ("eval_steps", 0),  # never
    ("save_steps", 0),  # only at the end
    ("max_steps", -1),  # transformers' default: num_train_epochs decide
    ("save_total_limit", 0),  # transformers': no rotation
    ("save_total_limit", -1),
    ("lora_dropout", 0),
}


def _numeric_fields() -> list[str]:
    import dataclasses

    default = ERLConfig()
    return [
        f.name
        for f in dataclasses.fields(ERLConfig)
        if not isinstance(getattr(default, f.name), bool) and ("int" in str(f.type) or "float" in str(f.type))
    ]


@pytest.mark.parametrize("value", [-1, 0])
def test_every_numeric_field_takes_zero_or_below_only_where_that_means_something(value):
    accepted = []
    for name in _numeric_fields():
        try:
            ERLConfig(**{name: value})
        except ValueError as e:
            assert f"ERLConfig.{name}" in str(e) or f"{name}=" in str(e), (name, str(e))
        else:
            accepted.append(name)
    assert {(n, value) for n in accepted} <= MEANINGFUL, sorted(set(accepted) - {n for n, _ in MEANINGFUL})
    assert "logprob_chunk_size" in _numeric_fields()  # the audit reaches the field the issue named


def test_push_to_hub_without_output_dir_is_refused_when_the_config_is_built():
    with pytest.raises(ValueError, match=r"ERLConfig.push_to_hub=True uploads output_dir, which is not set"):
        ERLConfig(push_to_hub=True, hub_model_id="user/name", output_dir=None)
    ERLConfig(push_to_hub=True, hub_model_id="user/name", output_dir="out")  # the setting it needs


# --- TRL's names on the command line and in run files: as ERLConfig(**{name: value}) takes them ---------------------
def _settings(argv: list[str], run_file: str | None = None, tmp_path=None):
    from erl_lite.cli import build_parser
    from erl_lite.cli.train import train_settings

    if run_file is not None:
        path = tmp_path / "run.yaml"
        path.write_text(run_file)
        argv = [*argv, "--config", str(path)]
    return train_settings(build_parser().parse_args(["train", *argv]))[1]


#: A mapped name (its value as TRL's parser reads it) and the field it sets, several kinds of value.
MAPPED = [
    (["--use_vllm", "true"], "use_vllm: true\n", {"generation_backend": "vllm"}),
    (["--use_vllm"], "use_vllm: yes\n", {"generation_backend": "vllm"}),
    (["--use-vllm", "yes"], "use-vllm: on\n", {"generation_backend": "vllm"}),
    (["--disable_tqdm", "false"], "disable_tqdm: false\n", {"progress_bar": True}),  # the demo preset: False
    (["--num_generations_eval", "3"], "num_generations_eval: 3\n", {"eval_num_generations": 3}),
    (
        ["--use_vllm", "--vllm_importance_sampling_cap", "2.5"],
        "use_vllm: true\nvllm_importance_sampling_cap: 2.5\n",
        {"vllm_importance_sampling_clip_max": 2.5},
    ),
    (
        ["--cache_implementation", "static"],
        "cache_implementation: static\n",
        {"generation_kwargs": {"cache_implementation": "static"}},
    ),
]


@pytest.mark.parametrize("flags,run_file,expected", MAPPED)
def test_trl_names_on_the_command_line_and_in_run_files_map_as_in_python(flags, run_file, expected, tmp_path):
    by_flag, by_file = _settings(flags), _settings([], run_file, tmp_path)
    for name, value in expected.items():
        assert getattr(by_flag, name) == value, (flags, name)
        assert getattr(by_file, name) == value, (run_file, name)
    # Negative control: the same config without the TRL name differs there.
    assert any(getattr(_settings([]), name) != value for name, value in expected.items())


#: Refused names: the error names the flag (or the file's line) and gives TRL's reason, as ERLConfig's does.
REFUSED = [
    (["--bf16", "yes"], "bf16: yes\n", "no mixed-precision autocast"),
    (["--bf16"], "bf16: true\n", "no mixed-precision autocast"),
    (["--fp16", "true"], "fp16: true\n", "no mixed-precision autocast"),
    (["--vllm_mode", "server"], "vllm_mode: server\n", "colocated in the training process only"),
    (["--gradient_accumulation_steps", "4"], "gradient_accumulation_steps: 4\n", "accumulates over"),
    (["--num_iterations", "2"], "num-iterations: 2\n", "no second pass"),
]


@pytest.mark.parametrize("flags,run_file,reason", REFUSED)
def test_refused_trl_names_say_why_naming_the_flag_or_line(flags, run_file, reason, tmp_path, capsys):
    from erl_lite.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", *flags])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument {flags[0]}" in err and reason in err, err
    assert "unrecognized arguments" not in err
    with pytest.raises(ValueError, match=rf"run\.yaml:1: .*{reason}") as refused:
        _settings([], run_file, tmp_path)
    assert "known keys" not in str(refused.value)


def test_trl_names_at_erl_lites_own_behaviour_are_accepted_and_a_clash_is_refused(tmp_path):
    # At the value that means what erl_lite does anyway: accepted, nothing changes (as in Python).
    plain = _settings([])
    assert _settings(["--vllm_mode", "colocate", "--num_iterations", "1", "--use_vllm", "false"]) == plain
    assert _settings([], "vllm_mode: colocate\ngradient_accumulation_steps: 1\n", tmp_path) == plain
    # A mapped name and its target set to different values: refused, naming both.
    with pytest.raises(ValueError, match="generation_backend.*given twice|disagrees"):
        _settings(["--use_vllm", "true", "--generation-backend", "generate"])
    with pytest.raises(ValueError, match=r"run\.yaml:2: generation_backend is given twice"):
        _settings([], "generation_backend: generate\nuse_vllm: true\n", tmp_path)


# --- the special values of shared fields: what they mean in transformers' TrainingArguments and TRL's GRPOConfig ---
#: (TRL's spelling, erl_lite's spelling of the same meaning): transformers' ``max_steps=-1`` (its default) trains
#: ``num_train_epochs``; ``save_total_limit`` None or <= 0 deletes nothing (``trainer_utils.rotate_checkpoints``);
#: GRPOConfig's ``epsilon_high=None`` is ``epsilon``.
SAME_MEANING = [
    (dict(max_steps=-1), dict(max_steps=None)),
    (dict(max_steps=-1, num_train_epochs=2.0), dict(max_steps=None, num_train_epochs=2.0)),
    (dict(save_total_limit=0), dict(save_total_limit=None)),
    (dict(save_total_limit=-3), dict(save_total_limit=None)),
    (dict(epsilon_high=None), dict(epsilon_high=0.2)),
    (dict(epsilon=0.1, epsilon_high=None), dict(epsilon=0.1, epsilon_high=0.1)),
]
#: A plain value of each field above, for the negative control.
PLAIN = {"max_steps": 1, "save_total_limit": 1, "epsilon_high": 0.3}


@pytest.mark.parametrize("trl,erl", SAME_MEANING)
def test_special_values_of_shared_fields_keep_trls_meaning(trl, erl):
    assert ERLConfig(**trl) == ERLConfig(**erl)
    assert ERLConfig.preset("cpu", **trl) == ERLConfig.preset("cpu", **erl)
    assert ERLConfig().replace(**trl) == ERLConfig().replace(**erl)
    # Negative control: the special value is not what a plain value of the field gives.
    assert ERLConfig(**trl) != ERLConfig(**{**trl, **{k: v for k, v in PLAIN.items() if k in trl}})


@pytest.mark.slow
def test_save_total_limit_zero_deletes_no_checkpoint_as_in_transformers(tmp_path):
    from test_checkpoint import checkpoints, make_trainer

    for limit, kept in ((0, ["checkpoint-1", "checkpoint-2", "checkpoint-3"]), (1, ["checkpoint-3"])):
        trainer = make_trainer(tmp_path / str(limit), save_total_limit=limit)
        for step in (1, 2, 3):
            trainer.step = step
            trainer.save_checkpoint()
        assert checkpoints(tmp_path / str(limit)) == kept, limit  # 1: the negative control, rotation at work
