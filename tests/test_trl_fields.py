"""No silent ignores: every TRL ``GRPOConfig`` field, and the model settings a model object cannot
take as they are.

The sweep walks ``dataclasses.fields(trl.GRPOConfig)`` (its own fields and the inherited
``TrainingArguments`` ones), so a field a new TRL adds fails here until it is put in one of the
three tables of :mod:`erl_lite.config.trl_fields`.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest
import trl

from erl_lite.config import ERLConfig
from erl_lite.config.trl_fields import TRL_ACCEPTED, TRL_MAPPED, TRL_REFUSED, TRL_SAME_AS
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import tiny_model, tiny_tokenizer

GRPO_FIELDS = [f for f in dataclasses.fields(trl.GRPOConfig) if f.init]
ERL_FIELDS = {f.name for f in dataclasses.fields(ERLConfig)}
BARE = "unexpected keyword argument"
ROWS = [{"prompt": f"Say {i}.", "answer": str(i)} for i in range(4)]


def reward(prompts, completions, answer, **kw):
    return [float(a in c) for c, a in zip(completions, answer)]


def _default(f: dataclasses.Field) -> typing.Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _other_value(f: dataclasses.Field) -> typing.Any:
    """A value of the field's kind that differs from TRL's default."""
    d = _default(f)
    if isinstance(d, bool):
        return not d
    if isinstance(d, int):
        return d + 2
    if isinstance(d, float):
        return d / 2 + 0.1 if 0 < d <= 1 else d + 0.5
    if isinstance(d, str):
        return d + "_other"
    if isinstance(d, (list, dict)):
        return ["x"] if isinstance(d, list) else {"x": 1}
    hint = str(f.type)
    if "bool" in hint:
        return True
    if "int" in hint:
        return 3
    if "float" in hint:
        return 0.3
    if "dict" in hint:
        return {"x": 1}
    if "list" in hint:
        return ["x"]
    return "other"


# --- the three tables ------------------------------------------------------------------------------
def test_every_grpo_config_field_is_in_exactly_one_table():
    names = [f.name for f in GRPO_FIELDS]
    tables = {"accepted": set(TRL_ACCEPTED), "mapped": set(TRL_MAPPED), "refused": set(TRL_REFUSED)}
    missing = [n for n in names if not any(n in t for t in tables.values())]
    assert not missing, f"GRPOConfig fields in no table of erl_lite.config.trl_fields: {missing}"
    for a, b in [("accepted", "mapped"), ("accepted", "refused"), ("mapped", "refused")]:
        assert not tables[a] & tables[b], f"in both {a} and {b}: {sorted(tables[a] & tables[b])}"
    assert set(TRL_ACCEPTED) <= ERL_FIELDS  # accepted = an ERLConfig field of the same name
    assert not (set(TRL_MAPPED) | set(TRL_REFUSED)) & ERL_FIELDS
    assert all(isinstance(why, str) and len(why) > 20 for why in TRL_REFUSED.values())
    assert all(isinstance(how, str) and len(how) > 10 and callable(into) for how, into in TRL_MAPPED.values())


@pytest.mark.parametrize("name", [f.name for f in GRPO_FIELDS])
def test_each_grpo_field_with_a_non_default_value_works_or_says_why(name):
    f = next(f for f in GRPO_FIELDS if f.name == name)
    value = _other_value(f)
    try:
        ERLConfig(**{name: value})
    except (TypeError, ValueError) as e:
        message = str(e)
        # a mapped name refused by a check of its target (e.g. a vllm_* one without the vllm backend) names that
        target = getattr(TRL_MAPPED[name][1], "target", name) if name in TRL_MAPPED else name
        assert BARE not in message and (name in message or target in message), message
        if name in TRL_REFUSED:
            assert TRL_REFUSED[name] in message  # where it went, or why erl_lite cannot honour it
    else:
        assert name not in TRL_REFUSED or value == TRL_SAME_AS.get(name), name


# The fields TRL users set daily (issue 20), and the ones that moved: each says where it went or why.
@pytest.mark.parametrize(
    "name, value, hint",
    [
        ("gradient_accumulation_steps", 4, "per_device_train_batch_size"),
        ("bf16", True, "dtype"),
        ("fp16", True, "dtype"),
        ("max_prompt_length", 512, "max_episode_length"),
        ("mask_truncated_completions", True, "truncated"),
        ("num_iterations", 2, "steps_per_generation"),
        ("use_liger_kernel", True, "logprob_chunk_size"),
        ("hub_strategy", "every_save", "end of training"),
        ("run_name", "my-run", "output_dir"),
        ("log_completions", False, "samples.jsonl"),
        ("vllm_mode", "server", "colocate"),
    ],
)
def test_daily_trl_fields_are_refused_with_where_they_went(name, value, hint):
    with pytest.raises(ValueError) as e:
        ERLConfig(**{name: value})
    assert name in str(e.value) and hint in str(e.value) and BARE not in str(e.value)
    with pytest.raises(ValueError, match=name):  # through a preset and replace too
        ERLConfig.preset("cpu", **{name: value})
    with pytest.raises(ValueError, match=name):
        ERLConfig().replace(**{name: value})


@pytest.mark.parametrize(
    "name, value",
    [
        ("use_vllm", False),
        ("vllm_mode", "colocate"),
        ("use_liger_kernel", False),
        ("push_to_hub", False),
        ("log_completions", True),
        ("adam_beta1", 0.9),
        ("adam_epsilon", 1e-8),
    ],
)
def test_a_refused_field_at_what_erl_lite_does_anyway_is_accepted(name, value):
    """Porting ``use_vllm=False`` from a GRPOConfig call changes nothing, so it is no error."""
    assert ERLConfig(**{name: value}) == ERLConfig()


@pytest.mark.parametrize(
    "given, expected",
    [
        (dict(cache_implementation="static"), dict(generation_kwargs={"cache_implementation": "static"})),
        (dict(disable_tqdm=True), dict(progress_bar=False)),
        (dict(num_generations_eval=6), dict(eval_num_generations=6)),
        (dict(activation_checkpointing=True), dict(gradient_checkpointing=True)),
    ],
)
def test_mapped_fields_land_in_their_erl_lite_field(given, expected):
    assert ERLConfig(**given) == ERLConfig(**expected)
    assert ERLConfig.preset("cpu", **given) == ERLConfig.preset("cpu", **expected)
    assert ERLConfig().replace(**given) == ERLConfig(**expected)


@pytest.mark.parametrize(
    "given, match",
    [
        (dict(min_p=0.1), "min_p"),  # refused: the update could not score it
        (dict(repetition_penalty=1.2), "repetition_penalty"),
        (dict(disable_tqdm=True, progress_bar=True), "disable_tqdm"),
        (dict(num_generations_eval=2, eval_num_generations=3), "num_generations_eval"),
        (dict(activation_checkpointing=False, gradient_checkpointing=True), "activation_checkpointing"),
    ],
)
def test_a_mapped_field_and_its_target_disagreeing_is_refused(given, match):
    with pytest.raises(ValueError, match=match):
        ERLConfig(**given)


@pytest.mark.parametrize(
    "name, guess",
    [
        ("num_generation", "num_generations"),
        ("learning_rat", "learning_rate"),
        ("lora_rank", "lora_r"),
        ("cache_implementaton", "cache_implementation"),
    ],
)
def test_an_unknown_name_says_did_you_mean(name, guess):
    with pytest.raises(TypeError, match=f"did you mean {guess!r}") as e:
        ERLConfig(**{name: 1})
    assert BARE not in str(e.value)


# --- settings a model object cannot take as they are -----------------------------------------------
def _trainer(model, tok, **cfg):
    args = ERLConfig.preset(
        "cpu",
        **{
            "mode": "rlvr",
            "max_steps": 1,
            "num_tasks_per_step": 2,
            "num_generations": 2,
            "max_completion_length": 6,
            "eval_steps": 0,
            "progress_bar": False,
            **cfg,
        },
    )
    return ERLTrainer(model=model, processing_class=tok, args=args, reward_funcs=reward, train_dataset=ROWS)


def _adapted(r=4):
    from peft import LoraConfig, get_peft_model

    tok = tiny_tokenizer()
    model = get_peft_model(tiny_model(tok), LoraConfig(r=r, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    return model, tok


def _checkpointing(model) -> bool:
    return bool(
        getattr(
            model.get_base_model() if hasattr(model, "get_base_model") else model, "is_gradient_checkpointing", False
        )
    )


@pytest.mark.parametrize("adapter", [False, True])
def test_gradient_checkpointing_is_applied_to_a_model_object(adapter):
    model, tok = _adapted() if adapter else (tiny_model(tiny_tokenizer()), None)
    tok = tok or tiny_tokenizer()
    assert not _checkpointing(model)
    trainer = _trainer(model, tok, gradient_checkpointing=True)
    assert _checkpointing(trainer.model)
    trainer.train()  # checkpointed backward through the object runs


def test_a_model_object_at_the_defaults_is_left_as_it_is():
    """The demo and the notebooks pass objects with the config's defaults: nothing changes."""
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    trainer = _trainer(model, tok)
    assert trainer.model is model and not hasattr(model, "peft_config") and not _checkpointing(model)
    adapted, tok = _adapted()
    assert _trainer(adapted, tok).model is adapted


@pytest.mark.parametrize("how", ["load_in_4bit", "quantization_config"])
@pytest.mark.parametrize("adapter", [False, True])
def test_4bit_on_a_full_precision_object_is_refused(how, adapter):
    from transformers import BitsAndBytesConfig

    model, tok = _adapted() if adapter else (tiny_model(tiny_tokenizer()), tiny_tokenizer())
    args = ERLConfig.preset("cpu", load_in_4bit=how == "load_in_4bit", eval_steps=0, progress_bar=False)
    q = BitsAndBytesConfig(load_in_4bit=True) if how == "quantization_config" else None
    with pytest.raises(ValueError, match=f"{how}.*(name|path).*quantiz"):
        ERLTrainer(
            model=model, processing_class=tok, args=args, reward_funcs=reward, train_dataset=ROWS, quantization_config=q
        )


def test_4bit_on_an_object_already_in_4bit_is_fine(tmp_path):
    from erl_lite.models import load_policy
    from erl_lite.testing import save_tiny_model

    model, tok = load_policy(save_tiny_model(str(tmp_path / "t")), quantization="4bit", lora_r=4, device="cpu")
    assert _trainer(model, tok, load_in_4bit=True).model is model


@pytest.mark.parametrize(
    "fields", [dict(lora_r=8), dict(lora_alpha=8, lora_dropout=0.1), dict(lora_target_modules=["v_proj"])]
)
def test_lora_fields_on_an_object_with_an_adapter_are_refused_by_name(fields):
    model, tok = _adapted()
    with pytest.raises(ValueError) as e:
        _trainer(model, tok, **fields)
    assert all(name in str(e.value) for name in fields) and "adapter" in str(e.value)


def test_peft_config_on_an_object_with_an_adapter_is_refused():
    from peft import LoraConfig

    model, tok = _adapted()
    args = ERLConfig.preset("cpu", eval_steps=0, progress_bar=False)
    with pytest.raises(ValueError, match="peft_config.*adapter"):
        ERLTrainer(
            model=model,
            processing_class=tok,
            args=args,
            reward_funcs=reward,
            train_dataset=ROWS,
            peft_config=LoraConfig(r=2, target_modules=["k_proj"]),
        )


@pytest.mark.parametrize(
    "fields, r, targets",
    [(dict(lora_r=4), 4, None), (dict(lora_r=2, lora_target_modules=["q_proj", "v_proj"]), 2, {"q_proj", "v_proj"})],
)
def test_lora_fields_on_an_object_without_an_adapter_add_one(fields, r, targets):
    tok = tiny_tokenizer()
    trainer = _trainer(tiny_model(tok), tok, **fields)
    cfg = trainer.model.peft_config["default"]
    assert cfg.r == r
    if targets:
        assert set(cfg.target_modules) == targets
    trainer.train()


@pytest.mark.parametrize(
    "given, backend",
    [
        (dict(use_vllm=True), "vllm"),
        (dict(use_vllm=True, vllm_mode="colocate"), "vllm"),
        (dict(use_vllm=False), "generate"),
        (dict(use_vllm=False, generation_backend="continuous"), "continuous"),
        (dict(use_vllm=True, vllm_gpu_memory_utilization=0.3, vllm_enable_sleep_mode=False), "vllm"),
    ],
)
def test_use_vllm_maps_to_the_vllm_backend(given, backend):
    """TRL's vLLM switches: True is ``generation_backend='vllm'``, False leaves the backend as given."""
    assert ERLConfig(**given).generation_backend == backend


@pytest.mark.parametrize(
    "given, match",
    [
        (dict(use_vllm=1), "use_vllm must be True or False"),
        (dict(use_vllm=True, generation_backend="generate"), "disagrees"),
        (dict(vllm_mode="server"), "colocate"),
        (dict(vllm_enable_sleep_mode=True), "not implemented"),
        (dict(vllm_importance_sampling_mode="sequence"), "vllm_importance_sampling_mode must be one of"),
        (dict(vllm_gpu_memory_utilization=0.0), r"\(0, 1\]"),
    ],
)
def test_vllm_settings_erl_lite_cannot_honour_are_refused_by_name(given, match):
    with pytest.raises(ValueError, match=match):
        ERLConfig(**given)
