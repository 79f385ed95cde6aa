"""What a small real model needs from ERL: reflection wording and retry instruction as settings, a reflection turn
that may start with its open tag written, ends at its closing tag and keeps a prefilled block cut by the length
limit; a reflection with no rulebook credited nothing in the update; advice that fits an instruct model."""

from __future__ import annotations

import re

import pytest

from erl_lite.config import ERLConfig
from erl_lite.config.presets import PRETRAINED_LEARNING_RATE
from erl_lite.core.memory import ReflectionMemory
from erl_lite.core.phases import PhaseContext, assign_advantages, attempt_first, attempt_second, erl_step, gate, reflect
from erl_lite.core.prompts import REFLECTION_REQUEST, RETRY_HEADER
from erl_lite.diagnostics.checks import CHECKS
from erl_lite.engine.generation import HFGenerator, SamplingParams, ScriptedGenerator
from erl_lite.records import FIRST, REFLECTION, SECOND, Attempt, Reflection, Retry

SECRETS = {"t0": "apple", "t1": "berry", "t2": "cherry", "t3": "date"}
MY_REQUEST = "Write RULES-REQUEST-X for the agent inside <prompt> and </prompt>."


def ctx_with(env, tok, reply, **cfg):
    config = ERLConfig.preset("cpu", **{"num_generations": 2, **cfg})
    return PhaseContext(ScriptedGenerator(tok, reply), tok, env, config)


def failing(prompt: str) -> str:
    return "nope"


def reflections_replying(env, tok, reflection: str, **cfg):
    """Reflections on failed first attempts (every first attempt fails), each reflection replying ``reflection``."""
    ctx = ctx_with(env, tok, lambda p: reflection if "<prompt>" in p else "nope", **cfg)
    failed = gate(attempt_first(ctx, env.train_tasks(2), 2), 1.0)
    return ctx, failed, reflect(ctx, failed, ReflectionMemory())


def test_the_reflection_request_is_a_setting(guess_env, tok):
    ctx = ctx_with(
        guess_env,
        tok,
        lambda p: "<prompt>RULEBOOK x</prompt>" if "RULES-REQUEST-X" in p else "nope",
        reflection_request=MY_REQUEST,
    )
    erl_step(ctx, guess_env.train_tasks(2), ReflectionMemory())
    asked = [p for p in ctx.generator.prompts_seen if "RULES-REQUEST-X" in p]
    assert len(asked) == 4 and not any(REFLECTION_REQUEST in p for p in ctx.generator.prompts_seen)
    assert ERLConfig().reflection_request == REFLECTION_REQUEST  # the default keeps the paper's request


def test_the_retry_instruction_is_a_setting(guess_env, tok):
    ctx = ctx_with(guess_env, tok, failing, use_reflection=False, retry_instruction="RETRY-MARKER: again")
    erl_step(ctx, guess_env.train_tasks(2), None)
    retries = [p for p in ctx.generator.prompts_seen if "RETRY-MARKER: again" in p]  # 4 retries, 2 turns each
    assert len(retries) == 8 and not any(RETRY_HEADER in p for p in ctx.generator.prompts_seen)


@pytest.mark.parametrize(
    "reply, rulebook",
    [
        ("<prompt>rule A</prompt> then more words <prompt>rule B</prompt>", "rule A"),
        ("thinking first. <prompt>rule C</prompt>\n\nDone!", "rule C"),
        ("<PROMPT>rule D</PROMPT> trailing", "rule D"),
    ],
)
def test_a_reflection_ends_at_its_closing_tag(guess_env, tok, reply, rulebook):
    _, _, reflections = reflections_replying(guess_env, tok, reply)
    for r in reflections:
        assert r.parsed and r.rulebook == rulebook
        assert r.text.lower().endswith("</prompt>"), r.text  # nothing after the block is kept nor trained
        assert tok.decode(r.completion_ids).lower().endswith("</prompt>")


def test_the_sampler_is_asked_to_stop_at_the_closing_tag(tok):
    from erl_lite.testing import tiny_model

    gen = HFGenerator(tiny_model(tok), tok)
    assert gen.sampling_config(SamplingParams(8, stop=("</prompt>",))).stop_strings == ["</prompt>"]
    assert gen.sampling_config(SamplingParams(8)).stop_strings is None
    assert len(gen.generate([tok("x").input_ids], SamplingParams(8, stop=("</prompt>",)))[0]) <= 8


def test_a_prefilled_reflection_starts_with_the_open_tag(guess_env, tok):
    ctx, _, reflections = reflections_replying(
        guess_env, tok, " Guess the fruit.</prompt>", reflection_prefill="<prompt>\n1."
    )
    asked = [p for p in ctx.generator.prompts_seen if REFLECTION_REQUEST in p]
    assert asked and all(p.endswith("<prompt>\n1.") for p in asked)  # the prefill ends the context (not trained)
    for r in reflections:
        assert r.parsed and r.rulebook == "1. Guess the fruit." and r.text.startswith("<prompt>\n1.")
        assert not tok.decode(r.completion_ids).startswith("<prompt>")


@pytest.mark.parametrize("prefill, parsed", [("<prompt>\n", True), ("", False), ("Rules:\n", False)])
def test_an_unclosed_block_is_kept_only_when_the_prefill_opened_it(guess_env, tok, prefill, parsed):
    cut = "<prompt>\n" if not prefill else ""
    _, _, reflections = reflections_replying(
        guess_env, tok, cut + "1. Guess a fruit. " * 40, reflection_prefill=prefill, max_reflection_length=30
    )
    for r in reflections:
        assert r.truncated and r.parsed is parsed
        assert r.rulebook.startswith("1. Guess a fruit.") if parsed else r.rulebook == guess_env.system_prompt


def test_an_empty_prefilled_block_does_not_parse(guess_env, tok):
    _, _, reflections = reflections_replying(guess_env, tok, "  </prompt>", reflection_prefill="<prompt>")
    assert reflections and not any(r.parsed for r in reflections)


def retry(task: str, index: int, parsed: bool, r2: float) -> Retry:
    """A gated rollout: a reflection (its rulebook stated a rule or not) and the retry's reward r2."""

    def attempt(role: str, reward: float) -> Attempt:
        return Attempt(task, role, index, "", [], [1], [index], [1], reward, reward >= 1.0, "", "", 1)

    reflection = Reflection(task, index, "base", "text", "rule" if parsed else "base", parsed, [1], [2, index])
    return Retry(attempt(FIRST, 0.0), reflection, attempt(SECOND, r2))


def reflection_advantages(retries: list[Retry], **cfg) -> list[float]:
    """The advantages the update receives on the reflection rows of ``retries`` (one row each), in order."""
    config = ERLConfig.preset("cpu", **{"reflection_copies": 1, **cfg})
    return [s.advantage for s in assign_advantages(config, [r.first for r in retries], retries) if s.role == REFLECTION]


#: Mixed groups of (parsed, r2): parsed or not x retry success or failure, groups of 2 to 6.
GROUPS = [
    [(True, 0.0), (False, 1.0)],  # the pushed-toward-nothing case: parsed and failed, unparsed and succeeded
    [(True, 1.0), (False, 1.0)],
    [(True, 1.0), (False, 0.0), (False, 1.0)],
    [(True, 0.0), (True, 1.0), (False, 1.0), (False, 0.0)],
    [(False, 1.0), (False, 1.0), (False, 0.0), (True, 0.0), (True, 0.0)],
    [(True, 0.5), (True, 1.0), (False, 1.0), (False, 1.0), (True, 0.0), (False, 0.0)],
]


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_a_reflection_without_rulebook_is_credited_nothing_in_the_update(group, scale):
    """Its retry ran under the base prompt, not under it: r2 says nothing about it, so r̃ = 0 (the reference credits
    r2; docs/DEPARTURES.md). In the advantages the update receives: an unparsed reflection never gets more than a
    parsed one of its group, and its retry's outcome does not change any row's advantage."""
    retries = [retry("t", i, parsed, r2) for i, (parsed, r2) in enumerate(group)]
    adv = reflection_advantages(retries, scale_rewards=scale)
    parsed_adv = [A for A, (parsed, _) in zip(adv, group) if parsed]
    assert all(A <= min(parsed_adv) for A, (parsed, _) in zip(adv, group) if not parsed), adv
    flipped = [retry("t", i, p, r2 if p else 1.0 - r2) for i, (p, r2) in enumerate(group)]
    assert reflection_advantages(flipped, scale_rewards=scale) == adv  # the unparsed retries' outcomes are ignored
    assert [r.reflection.parsed for r in retries] == [p for p, _ in group]


def test_a_reflection_without_rulebook_does_not_win_its_group():
    """The case that pushed a model toward writing nothing: parsed with a failed retry, unparsed with a won one."""
    assert reflection_advantages([retry("t", 0, True, 0.0), retry("t", 1, False, 1.0)]) == [0.0, 0.0]
    # beside a parsed reflection whose retry won, it is below: a format signal
    [won, nothing] = reflection_advantages([retry("t", 0, True, 1.0), retry("t", 1, False, 1.0)])
    assert won > 0 > nothing
    # groups are per task: another task's unparsed reflection changes nothing here
    assert reflection_advantages([retry("t", 0, True, 0.0), retry("t", 1, True, 1.0), retry("u", 0, False, 1.0)])[
        2
    ] == pytest.approx(0.0)


def test_below_zero_rewards_credit_an_unparsed_reflection_as_its_group_s_worst():
    """With rewards below 0 (a reward function's penalty), r̃ = 0 would put writing nothing above a failed retry."""
    [failed, nothing] = reflection_advantages([retry("t", 0, True, -1.0), retry("t", 1, False, 1.0)])
    assert failed == nothing == 0.0
    [won, failed, nothing] = reflection_advantages(
        [retry("t", 0, True, 1.0), retry("t", 1, True, -0.5), retry("t", 2, False, 1.0)]
    )
    assert won > failed == pytest.approx(nothing)
    # the floor reads the rulebooks' retries only: an unparsed retry's penalty changes nothing
    assert reflection_advantages([retry("t", 0, True, 0.0), retry("t", 1, False, -3.0)]) == [0.0, 0.0]


def test_erl_step_trains_an_unparsed_reflection_on_no_retry(guess_env, tok):
    """The whole step: reflections alternate between a rule and none; retries under the rule fail, those under the
    base prompt succeed. The reflection rows that reach the update give the unparsed ones nothing."""
    reflections = []

    def reply(prompt: str) -> str:
        if "<prompt>" in prompt:  # a reflection request: every other one states a rule
            reflections.append(prompt)
            return "<prompt>RULE say nope</prompt>" if len(reflections) % 2 else "<prompt>1.</prompt>"
        if "RULE say nope" in prompt or not reflections:  # under the rule, or a first attempt
            return "nope"
        return SECRETS[re.findall(r"task (t\d+)", prompt)[-1]]  # a retry under the base prompt

    ctx = ctx_with(guess_env, tok, reply, reward_threshold=1.0, reflection_copies=1)
    out = erl_step(ctx, guess_env.train_tasks(2), ReflectionMemory())
    rows = [s for s in out.samples if s.role == REFLECTION]
    parsed = [r.reflection.parsed for r in out.retries]
    assert len(rows) == 4 and sorted(parsed) == [False, False, True, True]
    assert all(not r.second.success for r in out.retries if r.reflection.parsed)
    assert all(s.advantage <= 0.0 + 1e-12 for s, p in zip(rows, parsed) if not p), [s.advantage for s in rows]
    assert [r.reflection.reward for r in out.retries] == [0.0] * 4  # the record says the same


def test_a_parsed_reflection_keeps_r2(guess_env, tok):
    ctx, failed, reflections = reflections_replying(guess_env, tok, "<prompt>say the fruit</prompt>")
    solver = ctx_with(guess_env, tok, lambda p: SECRETS[re.findall(r"task (t\d+)", p)[-1]])
    retries = attempt_second(solver, failed, {t.task_id: t for t in guess_env.train_tasks(2)}, reflections)
    assert all(r.reflection.parsed and r.reflection.reward == r.second.reward == 1.0 for r in retries)


def test_parse_rate_advice_fits_an_instruct_model():
    check = next(c for c in CHECKS if c.name == "parse_rate")
    assert "instruct model follows the format better" not in check.tries
    assert "reflection_prefill" in check.tries


def test_a_large_step_is_named_with_the_learning_rate():
    from erl_lite.diagnostics.checks import LARGE_STEP, RunFacts, scan
    from erl_lite.metric_names import OPTIM_STEPS, WEIGHT_UPDATE

    def run(moves):
        return [{"step": i + 1, OPTIM_STEPS: steps, WEIGHT_UPDATE: moved} for i, (moved, steps) in enumerate(moves)]

    found = scan(run([(0.01, 1), (0.095, 1), (0.02, 1)]), RunFacts(learning_rate=2e-3))
    large = [f for f in found if f.name == "large_step"]
    assert len(large) == 1 and large[0].step == 2 and "learning_rate=0.002" in large[0].message()
    # the embedded demo's committed run: 5.6% over 3 optimizer steps is 1.9% a step, below the share
    assert not [f for f in scan(run([(0.056, 3), (LARGE_STEP * 0.9, 1)]), RunFacts()) if f.name == "large_step"]


@pytest.mark.parametrize(
    "model, flags, rate",
    [
        ("some/pretrained-model", [], 1e-5),
        ("./a/local/folder", ["--env", "arithmetic"], 1e-5),
        ("some/pretrained-model", ["--learning-rate", "3e-4"], 3e-4),
        ("embedded", ["--env", "frozenlake"], 2e-3),
        ("some/pretrained-model", ["--preset", "gpu"], 1e-5),
    ],
)
def test_a_pretrained_model_does_not_take_the_embedded_models_learning_rate(model, flags, rate):
    from erl_lite.cli import build_parser
    from erl_lite.cli.train import train_settings

    _, cfg = train_settings(build_parser().parse_args(["train", "--model", model, "--env", "frozenlake", *flags]))
    assert cfg.learning_rate == rate


def pretrained_stand_in(folder) -> str:
    """A tiny model saved as a pretrained one is (without the mark of erl_lite's random weights)."""
    import json

    from erl_lite.testing import save_tiny_model

    path = save_tiny_model(folder)
    config = json.loads(open(f"{path}/config.json").read())
    del config["erl_lite_from_scratch"]
    open(f"{path}/config.json", "w").write(json.dumps(config))
    return path


def rate_warnings(model, args, tokenizer=None) -> list[str]:
    import warnings

    from erl_lite import ERLTrainer
    from erl_lite.envs import FrozenLake

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ERLTrainer(model=model, args=args, env=FrozenLake(sizes=(2, 3), max_actions=3), processing_class=tokenizer)
    return [str(w.message) for w in seen if "learning_rate=" in str(w.message)]


@pytest.mark.parametrize(
    "preset, rate, warned",
    [("cpu", None, True), ("demo", None, True), ("cpu", 1e-3, True), ("cpu", 1e-5, False), ("gpu_rate", None, False)],
)
def test_the_python_api_warns_of_the_embedded_models_rate_on_a_pretrained_model(tmp_path, preset, rate, warned):
    """ERLTrainer(model=<a pretrained model>, args=ERLConfig.preset("cpu")): the Python API cannot tell a preset's
    rate from one chosen, so it warns, naming learning_rate, where the CLI switches an unset rate to 1e-5."""
    settings = {"progress_bar": False, **({"learning_rate": rate} if rate else {})}
    if preset == "gpu_rate":
        preset, settings["learning_rate"] = "cpu", PRETRAINED_LEARNING_RATE
    found = rate_warnings(pretrained_stand_in(tmp_path / "m"), ERLConfig.preset(preset, **settings))
    assert bool(found) is warned, found
    assert not found or ("learning_rate=" in found[0] and "1e-05" in found[0])


def test_the_embedded_and_random_models_keep_their_rates_without_a_word(tmp_path, tok):
    from erl_lite.embedded import load_embedded
    from erl_lite.testing import save_tiny_model, tiny_model

    args = ERLConfig.preset("cpu", progress_bar=False)
    assert rate_warnings(*load_embedded(peft="none")[:1], args, load_embedded()[1]) == []
    assert rate_warnings(save_tiny_model(tmp_path / "tiny"), args) == []
    assert rate_warnings(tiny_model(tok), args, tok) == []


@pytest.mark.parametrize(
    "source, given",
    [("flags", []), ("flags", ["--learning-rate", "1e-3"]), ("file", {}), ("file", {"learning_rate": 1e-3})],
)
def test_the_cli_and_run_files_follow_the_same_rule(tmp_path, source, given):
    """The rule the Python API warns by, on what the CLI and a run file give a pretrained model: an unset rate is
    the gpu preset's (no warning); a rate set above it is kept, and warned of as in Python."""
    import yaml

    from erl_lite.cli import build_parser
    from erl_lite.cli.train import train_settings
    from erl_lite.config.presets import pretrained_rate_warning

    model = pretrained_stand_in(tmp_path / "m")
    if source == "flags":
        argv = ["train", "--model", model, "--env", "frozenlake", *given]
    else:
        (tmp_path / "run.yaml").write_text(yaml.safe_dump({"model": model, "env": "frozenlake", **given}))
        argv = ["train", "--config", str(tmp_path / "run.yaml")]
    _, cfg = train_settings(build_parser().parse_args(argv))
    assert cfg.learning_rate == (1e-3 if given else PRETRAINED_LEARNING_RATE)
    assert (pretrained_rate_warning(cfg.learning_rate) is not None) is bool(given)
    assert bool(rate_warnings(model, cfg.replace(progress_bar=False, output_dir=None))) is bool(given)


def test_env_options_reach_the_environment_from_flags_and_files(tmp_path):
    from erl_lite.cli import build_parser
    from erl_lite.cli.train import train_settings

    run, cfg = train_settings(
        build_parser().parse_args(["train", "--env", "arithmetic", "--env-options", '{"n": 12, "max_operand": 4}'])
    )
    assert run["env_options"] == {"n": 12, "max_operand": 4} == cfg.extra["env_options"]
    path = tmp_path / "run.yaml"
    path.write_text("env: arithmetic\nsmall: true\nenv_options:\n  n: 7\n")
    run, _ = train_settings(build_parser().parse_args(["train", "--config", str(path)]))
    assert run["small"] is True and run["env_options"] == {"n": 7}


#: A ChatML template that writes its own system turn into a conversation that has none (as SmolLM2's and Qwen2.5's).
DEFAULT_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|im_start|>system\nYou are Tiny, a "
    "helpful bot.<|im_end|>\n{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize(
    "template, system, named",
    [(DEFAULT_SYSTEM_TEMPLATE, None, True), (DEFAULT_SYSTEM_TEMPLATE, "Solve it.", False), (None, None, False)],
)
def test_the_preflight_names_a_templates_default_system_prompt(template, system, named):
    from erl_lite.diagnostics.preflight import chat_findings
    from erl_lite.envs.arithmetic import arithmetic_reward
    from erl_lite.envs.rows import rows_to_tasks
    from erl_lite.integrations.dataset import RewardFunctionEnv
    from erl_lite.testing import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = template or tokenizer.chat_template  # None: the plain ChatML one, no default
    prompt = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": "2 + 3?"}]
    task = rows_to_tasks([{"prompt": prompt, "answer": "5"}])[0]
    found = [
        f
        for f in chat_findings(tokenizer, RewardFunctionEnv(arithmetic_reward), task, None)
        if f.name == "default_system_prompt"
    ]
    assert bool(found) is named
    if named:
        assert "You are Tiny, a helpful bot." in found[0].saw and "rulebook" in found[0].saw


def test_large_step_watches_pretrained_weights_only(tmp_path, tok):
    """A random tiny model at the cpu preset's 2e-3 moves about 3% a step: trained from scratch, no warning; the same
    move on pretrained weights (a saved run's report assumes them) is one."""
    from erl_lite.diagnostics.checks import RunFacts, scan
    from erl_lite.metric_names import OPTIM_STEPS, WEIGHT_UPDATE

    row = [{"step": 1, OPTIM_STEPS: 1, WEIGHT_UPDATE: 0.032}]
    assert [f.name for f in scan(row, RunFacts(pretrained=False))] == []
    assert [f.name for f in scan(row, RunFacts())] == ["large_step"]
    from erl_lite import ERLTrainer
    from erl_lite.envs import FrozenLake
    from erl_lite.testing import tiny_model

    args = ERLConfig.preset("cpu", progress_bar=False)
    trainer = ERLTrainer(model=tiny_model(tok), args=args, env=FrozenLake(sizes=(2, 3)), processing_class=tok)
    assert trainer.monitor.facts.pretrained is False
    trainer = ERLTrainer(
        model=pretrained_stand_in(tmp_path / "m"), args=args.replace(learning_rate=1e-5), env=FrozenLake(sizes=(2, 3))
    )
    assert trainer.monitor.facts.pretrained is True
