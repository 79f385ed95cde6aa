"""Small helpers' behaviour, as plain asserts (their docstring examples left the package for its line budget)."""

from __future__ import annotations

import argparse

import pytest

from erl_lite.cli import build_parser
from erl_lite.cli.config_args import (
    add_config_arguments,
    converter,
    field_docs,
    first_sentence,
    given_fields,
    parse_bool,
    parse_yaml,
    shown_value,
)
from erl_lite.cli.train import run_preset, train_settings
from erl_lite.config.checks import check_whole
from erl_lite.config.field_types import closest, conform, describe
from erl_lite.core.prompts import parse_rulebook, reflection_skeleton_length
from erl_lite.diagnostics.checks import CHECKS, RunFacts, scan
from erl_lite.testing import tiny_tokenizer


def test_config_argument_helpers():
    assert field_docs()["seed"] == "Seed for task order, sampling and initialisation."
    assert first_sentence("``single`` (paper: one slot). Or :data:`FIFO`, e.g. a queue.") == "single (paper: one slot)."
    assert (parse_bool("False"), parse_bool("yes")) == (False, True)
    assert parse_yaml("{enable_thinking: false}") == {"enable_thinking": False}
    assert parse_yaml("[q_proj, v_proj]") == ["q_proj", "v_proj"]
    parse, metavar = converter(int | None)
    assert (parse("none"), parse("4"), metavar) == (None, 4, "INT")
    assert [shown_value(v) for v in (True, None, 1e-3, ["q", "v"])] == ["true", "none", "0.001", "[q, v]"]
    p = argparse.ArgumentParser()
    add_config_arguments(p, aliases={"max_steps": ["--steps"]})
    assert "--mode {erl,erl_simple,rlvr}" in p.format_help()  # a field's words (config.checks.FIELD_CHOICES)
    assert given_fields(p.parse_args(["--steps", "3", "--learning_rate", "1e-4", "--no-use-memory"])) == {
        "max_steps": 3,
        "use_memory": False,
        "learning_rate": 0.0001,
    }


def test_field_type_helpers():
    with pytest.raises(ValueError, match="FrozenLake.max_actions must be a whole number >= 1, got 0"):
        check_whole("FrozenLake", "max_actions", 0, minimum=1)
    assert (conform("seed", 3.0, int), conform("beta", 0, float), conform("dual_clip", None, float | None)) == (
        3,
        0,
        None,
    )
    assert (describe(int | None), describe(str | list[str])) == ("an integer or None", "a string or a list of strings")
    assert (closest("learnig_rate", ["learning_rate", "seed"]), closest("zzz", ["seed"])) == ("learning_rate", None)


def test_train_command_helpers():
    assert [run_preset("demo", None), run_preset("frozenlake", None), run_preset("demo", "gpu")] == [
        "demo",
        "cpu",
        "gpu",
    ]
    cfg = train_settings(build_parser().parse_args(["train", "--steps", "5", "--learning-rate", "1e-3"]))[1]
    assert (cfg.max_steps, cfg.learning_rate, cfg.max_completion_length) == (5, 0.001, 24)


def test_check_and_prompt_helpers():
    assert [c.name for c in CHECKS if "reflection/parse_rate" in c.reads] == ["parse_rate", "memory_empty"]
    rows = [{"step": s, "reflection/parse_rate": 0.0} for s in (1, 2, 3, 4)]
    assert [(f.name, f.step, f.last_step) for f in scan(rows, RunFacts())] == [("parse_rate", 3, 4)]
    assert (RunFacts.of({"mode": "rlvr"}).max_reflection_length, RunFacts.of({}).max_steps) == (512, None)
    assert parse_rulebook("thinking... <prompt>C is a hole.</prompt>", "base") == ("C is a hole.", True)
    assert 500 < reflection_skeleton_length(tiny_tokenizer()) < 1000  # one token per character


def test_core_helpers_of_the_step():
    """What core's small helpers return (their examples moved here to shorten the step's reading path)."""
    import torch

    from erl_lite.core.losses import first_non_finite
    from erl_lite.engine.chat import end_of_turn_id
    from erl_lite.engine.generation import PromptTooLongError, check_request
    from erl_lite.engine.logprobs import causal_lm
    from erl_lite.engine.policy import shared_rows
    from erl_lite.records import Task, tasks_by_id
    from erl_lite.testing import tiny_model

    tok = tiny_tokenizer()
    assert type(causal_lm(tiny_model(tok))).__name__ == "LlamaForCausalLM"
    tok.eos_token = "<|eos|>"  # a base model's eos; the template still ends turns with <|im_end|>
    assert tok.convert_ids_to_tokens(end_of_turn_id(tok)) == "<|im_end|>"
    plain = tiny_tokenizer(chat_template=False)
    assert end_of_turn_id(plain) == plain.eos_token_id
    with pytest.raises(PromptTooLongError) as err:
        check_request([10, 60], 10, 64)
    assert err.value.row == 1 and str(err.value).startswith("request row 1 has 60 prompt tokens + max_new_to")
    check_request([10, 50], 10, 64)  # fits: no error
    t = Task("a", "2+2=?")
    assert list(tasks_by_id([t, t])) == ["a"]
    assert first_non_finite([("a", torch.ones(2)), ("b", torch.tensor([1.0, float("nan")]))]) == "b"
    assert first_non_finite([("a", torch.ones(2))]) is None
    ids = torch.tensor([[1, 2], [3, 4], [1, 2]])
    assert [x.tolist() for x in shared_rows(ids, torch.ones_like(ids))] == [[0, 1], [0, 1, 0]]
    assert shared_rows(ids[:2], torch.ones_like(ids[:2])) is None


def test_more_core_helpers_of_the_step():
    from types import SimpleNamespace

    from erl_lite.core.rollout import opening_messages, template_kwargs_for
    from erl_lite.engine.generation import reply_was_cut
    from erl_lite.engine.logprobs import draws_dropout, logit_transform
    from erl_lite.engine.policy import cache_name
    from erl_lite.integrations.dataset import RewardFunctionEnv
    from erl_lite.records import Task
    from erl_lite.testing import tiny_model

    assert opening_messages("", "hi") == [{"role": "user", "content": "hi"}]
    env = RewardFunctionEnv(lambda completions, **kw: [0.0])
    assert template_kwargs_for(env, Task("t", "x", {}), {"enable_thinking": False}) == {"enable_thinking": False}
    model = tiny_model(tiny_tokenizer())
    assert cache_name(model) == "cache" and draws_dropout(model) is False
    assert [reply_was_cut(r, 3, {2}) for r in ([5, 6, 2], [5, 6, 7], [5])] == [False, True, False]
    assert logit_transform(SimpleNamespace(logits_scaling=8.0, model_type="granite")) == (0.125, None)


def test_step_helpers_whose_examples_left_core(tmp_path):
    import torch

    from erl_lite.core.losses import row_losses
    from erl_lite.engine.logprobs import sequence_logprobs
    from erl_lite.engine.policy import keep_4bit_trainable
    from erl_lite.models import load_policy
    from erl_lite.testing import save_tiny_model, tiny_model

    per_token, mask = torch.tensor([[1.0, 2.0], [3.0, 9.0]]), torch.tensor([[1, 1], [1, 0]])
    assert row_losses(per_token, mask, "seq_mean").tolist() == [1.5, 3.0]
    ids = torch.tensor([[10, 11, 12, 13]])
    logp = sequence_logprobs(
        tiny_model(tiny_tokenizer()), ids, torch.ones_like(ids), torch.arange(4)[None], targets=ids[:, 2:], chunk_size=1
    )
    assert (logp.shape, logp.dtype) == (torch.Size([1, 2]), torch.float32)
    policy, _ = load_policy(save_tiny_model(str(tmp_path)), quantization="4bit", lora_r=4, device="cpu")
    assert keep_4bit_trainable(policy) == 14  # 7 projections x 2 layers
