"""The continuous-batching sampler (``generation_backend="continuous"``): what it samples, what it
leaves as it was (modes, generators), what it refuses, and its place in the trainer."""

from __future__ import annotations

import math

import pytest
import torch

from erl_lite.config import ERLConfig
from erl_lite.engine.continuous import PAGE_SIZE, ContinuousGenerator, cache_tokens_for
from erl_lite.engine.generation import HFGenerator, SamplingParams
from erl_lite.integrations.wiring import generator_for
from erl_lite.models import load_policy
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import save_tiny_model, tiny_model, tiny_tokenizer

ROWS = [{"prompt": f"Add {i} and {i}.", "answer": str(2 * i)} for i in range(6)]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """The tiny model with a LoRA adapter (a PeftModel, as the trainer holds it)."""
    return load_policy(save_tiny_model(str(tmp_path_factory.mktemp("tiny"))), device="cpu")


def _prompts(tok, n=4):
    texts = ["hello there", "hi", "a longer prompt than the others, by some way", "hello there"]
    return [tok(texts[i % len(texts)]).input_ids for i in range(n)]


def _teacher_logprobs(model, prompt, reply, temperature):
    """log p(reply[t] | prompt + reply[:t]) under logits / temperature, one forward: (len(reply),)."""
    ids = torch.tensor([prompt + reply])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature  # (T, V)
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(reply)[:, None])[:, 0]


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_sampled_tokens_carry_the_policys_own_logprobs_also_on_reused_pages(policy, temperature):
    # The manager's reported log-prob of each token it sampled must be the policy's, computed from
    # scratch. The second call's prompts extend the first call's conversations (a multi-turn
    # episode): their first pages come from the cache, so a wrong reuse would show here.
    model, tok = policy
    model.eval()
    gen = ContinuousGenerator(model, tok, cache_tokens=4096)
    params = SamplingParams(12, temperature=temperature)
    first = _prompts(tok)
    replies = gen.generate(first, params)
    logprobs = [gen.last_logprobs]
    turn2 = [p + r + tok(" and then").input_ids for p, r in zip(first, replies)]
    replies2 = gen.generate(turn2, params)
    logprobs.append(gen.last_logprobs)
    gen.flush()
    for prompts, outs, lps in zip((first, turn2), (replies, replies2), logprobs):
        for prompt, reply, lp in zip(prompts, outs, lps):
            assert len(lp) == len(reply) > 0
            want = _teacher_logprobs(model, prompt, reply, temperature)
            # float32 with log-probs of magnitude ~1-10: a batched, paged attention sums in another
            # order than a single forward; 1e-4 relative (and 1e-4 absolute) is far above that
            # rounding and far below any real difference (a wrong page shifts them by >0.1).
            torch.testing.assert_close(torch.tensor(lp), want, rtol=1e-4, atol=1e-4)
    model.train()


def test_replies_stop_at_the_first_stop_token_and_respect_the_limit(policy):
    model, tok = policy
    gen = ContinuousGenerator(model, tok, cache_tokens=2048)
    for limit in (1, 5, 17):
        outs = gen.generate(_prompts(tok, 6), SamplingParams(limit, temperature=1.5))
        for out in outs:
            assert 1 <= len(out) <= limit
            stops = [i for i, t in enumerate(out) if t in gen.stop_ids]
            assert stops in ([], [len(out) - 1])  # none, or only the last token
    gen.flush()


def test_same_seed_samples_the_same_and_the_callers_generator_moves_by_one_draw_a_call(policy):
    model, tok = policy
    params = SamplingParams(10, temperature=1.5)
    runs = []
    for _ in range(2):
        gen = ContinuousGenerator(model, tok, cache_tokens=2048, seed=3)
        torch.manual_seed(123)
        runs.append([gen.generate(_prompts(tok), params) for _ in range(3)])
        after = torch.get_rng_state()
        torch.manual_seed(123)
        [torch.randint(2**62, ()) for _ in range(3)]  # each call's seed; the manager's re-seeding never leaks
        assert torch.equal(torch.get_rng_state(), after)
        gen.flush()
    assert runs[0] == runs[1]
    torch.manual_seed(123)
    other = ContinuousGenerator(model, tok, cache_tokens=2048, seed=4)
    assert [other.generate(_prompts(tok), params) for _ in range(3)] != runs[0]
    other.flush()


@pytest.mark.parametrize("training", [True, False])
def test_every_module_gets_its_mode_back(policy, training):
    # The manager puts the base model in eval mode under a PEFT wrapper that still says training;
    # gradient checkpointing and dropout then switch off in the update.
    model, tok = policy
    model.train(training)
    gen = ContinuousGenerator(model, tok, cache_tokens=2048)
    gen.generate(_prompts(tok), SamplingParams(4))
    assert {m.training for m in model.modules()} == {training}
    gen.flush()
    assert {m.training for m in model.modules()} == {training}
    model.train()


def test_cache_is_sized_from_the_budget_not_from_memory(policy):
    model, tok = policy
    for tokens in (256, 4000):
        gen = ContinuousGenerator(model, tok, cache_tokens=tokens)
        gen.generate(_prompts(tok), SamplingParams(4))
        assert gen._manager.continuous_batching_config.num_blocks == math.ceil(tokens / PAGE_SIZE)
        gen.flush()
    args = ERLConfig.preset("demo")
    rows = args.num_tasks_per_step * max(args.num_generations, args.eval_num_generations)
    assert cache_tokens_for(args) == rows * max(
        args.max_episode_length, args.max_reflection_prompt_length + args.max_reflection_length
    )


def test_more_rows_than_the_cache_holds_wait_their_turn(policy):
    model, tok = policy
    gen = ContinuousGenerator(model, tok, cache_tokens=64)  # 4 pages: one or two rows at a time
    outs = gen.generate(_prompts(tok, 8), SamplingParams(6))
    assert len(outs) == 8 and all(1 <= len(o) <= 6 for o in outs)
    gen.flush()


@pytest.mark.parametrize(
    "kwargs", [{"repetition_penalty": 1.2}, {"min_new_tokens": 3}, {"min_p": 0.05}, {"no_repeat_ngram_size": 2}]
)
def test_what_it_would_drop_is_refused(policy, kwargs):
    model, tok = policy
    gen = ContinuousGenerator(model, tok, cache_tokens=256)
    with pytest.raises(ValueError, match=f"cannot honour generation_kwargs.*{next(iter(kwargs))}"):
        gen.generate(_prompts(tok), SamplingParams(4, generation_kwargs=kwargs))
    with pytest.raises(ValueError, match="cannot honour"):
        ERLConfig(generation_backend="continuous", generation_kwargs=kwargs)
    with pytest.raises(ValueError, match="refused"):  # and generate too: the update could not score them
        ERLConfig(generation_backend="generate", generation_kwargs=kwargs)


def _older_batching_config(drop):
    """transformers' ContinuousBatchingConfig as an older release had it: without the fields in ``drop``."""
    import dataclasses

    from transformers import ContinuousBatchingConfig

    kept = [(f.name, f.type, f) for f in dataclasses.fields(ContinuousBatchingConfig) if f.name not in drop]
    return dataclasses.make_dataclass("ContinuousBatchingConfig", kept)


# transformers 5.17 lacked page_size (met on the GPU check), 5.18 auto_switch_to_flash; a 4.x lacks the class.
@pytest.mark.parametrize("drop", [("page_size",), ("auto_switch_to_flash",), ("return_logprobs", "seed"), None])
def test_an_older_transformers_is_refused_when_the_trainer_is_built_not_at_the_first_rollout(policy, monkeypatch, drop):
    import transformers

    if drop is None:  # as in a 4.x: the lazy module finds no such name either
        lookup = type(transformers).__getattr__

        def lookup_without_it(module, name):
            if name == "ContinuousBatchingConfig":
                raise AttributeError(name)
            return lookup(module, name)

        monkeypatch.delattr(transformers, "ContinuousBatchingConfig", raising=False)
        monkeypatch.setattr(type(transformers), "__getattr__", lookup_without_it)
    else:
        monkeypatch.setattr(transformers, "ContinuousBatchingConfig", _older_batching_config(drop))
    model, tok = policy
    args = ERLConfig(generation_backend="continuous", max_steps=1, num_tasks_per_step=1, num_generations=2)
    with pytest.raises(
        ImportError, match=rf"continuous.*transformers >= 5\.19.*{transformers.__version__}.*'generate'"
    ):
        ERLTrainer(model=model, processing_class=tok, args=args, reward_funcs=lambda **k: [0.0], train_dataset=ROWS)


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="generation_backend"):
        ERLConfig(generation_backend="sglang")


def test_top_p_and_top_k_per_request(policy):
    # top_k=1 is greedy: every row of one prompt gets the same reply, whatever the temperature.
    model, tok = policy
    gen = ContinuousGenerator(model, tok, cache_tokens=2048)
    loose = gen.generate(_prompts(tok)[:1] * 6, SamplingParams(8, temperature=1.5))
    greedy = gen.generate(_prompts(tok)[:1] * 6, SamplingParams(8, temperature=1.5, top_k=1))
    assert len({tuple(o) for o in greedy}) == 1 and len({tuple(o) for o in loose}) > 1
    nucleus = gen.generate(_prompts(tok)[:1] * 6, SamplingParams(8, temperature=1.5, top_p=1e-6))
    assert nucleus == greedy  # the smallest nucleus holds the top token only
    gen.flush()


def test_a_manager_holds_only_the_processors_its_calls_use(policy):
    # A held processor runs at every token even when a request sets it to a no-op (top-p 1.0 still
    # sorts the vocabulary), so a call that uses fewer gets a manager without them.
    model, tok = policy
    gen = ContinuousGenerator(model, tok, cache_tokens=2048)
    for params, held in (
        (SamplingParams(4), {"Temperature"}),
        (SamplingParams(4, top_p=0.9), {"Temperature", "TopP"}),
        (SamplingParams(4, top_k=5, top_p=0.8), {"Temperature", "TopK", "TopP"}),
        (SamplingParams(4), {"Temperature"}),
    ):
        gen.generate(_prompts(tok), params)
        names = {
            type(p).__name__.replace("ContinuousBatching", "").replace("LogitsWarper", "")
            for p in gen._manager.logit_processor.logits_processor
        }
        assert names == held
    assert gen.managers_started == 4
    gen.flush()


def test_the_trainer_uses_it_and_flushes_after_each_phase(policy):
    model, tok = policy

    def reward(prompts, completions, answer, **kw):
        return [float(a in c) for c, a in zip(completions, answer)]

    args = ERLConfig.preset(
        "cpu",
        max_steps=2,
        num_tasks_per_step=2,
        num_generations=2,
        max_completion_length=8,
        max_reflection_length=12,
        max_reflection_prompt_length=700,
        eval_steps=2,
        progress_bar=False,
        generation_backend="continuous",
        diagnostics="off",
    )
    trainer = ERLTrainer(
        model=model, processing_class=tok, args=args, reward_funcs=reward, train_dataset=ROWS, eval_dataset=ROWS[:2]
    )
    assert isinstance(trainer.generator, ContinuousGenerator)
    seen = []
    original = trainer.updater.update

    def update(samples, **kw):
        seen.append(trainer.generator._manager)  # None: flushed before the weights change
        return original(samples, **kw)

    trainer.updater.update = update
    history = trainer.train()
    assert seen == [None, None] and trainer.generator._manager is None
    assert trainer.generator.calls > 0 and len(history.of_kind("train")) == 2
    assert isinstance(generator_for(model, tok, ERLConfig()), HFGenerator)  # the default backend


def test_a_plain_model_without_adapter_works_too():
    tok = tiny_tokenizer()
    gen = ContinuousGenerator(tiny_model(tok), tok, cache_tokens=512)
    assert len(gen.generate(_prompts(tok), SamplingParams(5))) == 4
    gen.flush()


def _template_tokenizers():
    from erl_lite.testing import find_qwen3_tokenizer, qwen3_tokenizer

    yield "chatml", tiny_tokenizer()
    yield "plain", tiny_tokenizer(chat_template=False)
    if find_qwen3_tokenizer() is not None:
        yield "qwen3", qwen3_tokenizer()


@pytest.mark.parametrize("name", ["chatml", "plain", "qwen3"])
def test_multi_turn_episodes_are_bit_identical_between_backends(name):
    # Greedy (top_k=1) replies are the same under both samplers, so every episode must come out the
    # same: token ids, loss masks, turns. The continuous backend reused cached pages for the later
    # turns (a test above checks those pages); the episode's ids are still built by the rollout alone.
    from erl_lite.core.rollout import run_episodes
    from erl_lite.envs import FrozenLake

    tok = dict(_template_tokenizers()).get(name)
    if tok is None:
        pytest.skip("shared/qwen3_tokenizer not found")
    model = tiny_model(tok)
    env = FrozenLake.small(max_actions=3, n_train=8, n_test=2)
    tasks = env.train_tasks(3) * 2
    params = SamplingParams(10, temperature=1.0, top_k=1)
    kwargs = {"enable_thinking": False} if name == "qwen3" else None
    runs = {}
    for backend, gen in (
        ("generate", HFGenerator(model, tok)),
        ("continuous", ContinuousGenerator(model, tok, cache_tokens=8192)),
    ):
        attempts = run_episodes(
            gen,
            tok,
            env,
            tasks,
            [env.initial_system_prompt(t) for t in tasks],
            params,
            max_episode_length=2048,
            role="first",
            indices=list(range(len(tasks))),
            template_kwargs=kwargs,
        )
        gen.flush() if backend == "continuous" else None
        runs[backend] = [(a.prompt_ids, a.completion_ids, a.completion_mask, a.num_turns) for a in attempts]
    assert max(turns for *_, turns in runs["generate"]) > 1  # several turns: the later ones reuse pages
    assert runs["continuous"] == runs["generate"]


def test_a_4bit_model_stays_on_its_differentiable_path(tmp_path):
    # bitsandbytes repacks a 4-bit CPU layer for an inference-only kernel at its first eval-mode,
    # no-grad call (the manager's thread makes those); the generator puts every layer back.
    import bitsandbytes as bnb

    model, tok = load_policy(save_tiny_model(str(tmp_path)), quantization="4bit", device="cpu")
    gen = ContinuousGenerator(model, tok, cache_tokens=1024)
    outs = gen.generate(_prompts(tok), SamplingParams(6))
    gen.flush()
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert layers and not any(getattr(m.weight.quant_state, "packing_format_for_cpu", False) for m in layers)
    ids = torch.tensor([_prompts(tok)[0] + outs[0]])
    model.train()
    model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_" in n and p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("backend", ["continuous", "generate"])
def test_a_resumed_run_draws_what_the_uninterrupted_run_draws(tmp_path, backend):
    # 3 steps straight and 2 steps + resume must sample the same step-3 completions (first attempts,
    # second attempts, reflections): the checkpoint restores the run's generators, and each call's
    # sampling seed must come from them, not from a count of calls that restarts at 0 in a new process.
    def run(out, steps, resume=False):
        tok = tiny_tokenizer()
        torch.manual_seed(0)  # LoRA's A matrices are drawn from the global generator
        model, tok = load_policy(tiny_model(tok, seed=3), tok, peft="lora")
        args = ERLConfig.preset(
            "cpu",
            max_steps=steps,
            num_tasks_per_step=2,
            num_generations=2,
            seed=7,
            max_completion_length=8,
            max_reflection_length=12,
            max_reflection_prompt_length=700,
            progress_bar=False,
            generation_backend=backend,
            diagnostics="off",
            output_dir=str(out),
            save_steps=2,
            learning_rate=1e-2,
        )
        trainer = ERLTrainer(
            model=model,
            processing_class=tok,
            args=args,
            train_dataset=ROWS,
            reward_funcs=lambda completions, answer, **kw: [float(a in c) for c, a in zip(completions, answer)],
        )
        trainer.train(resume_from_checkpoint=resume)
        return [s.completion_ids for s in trainer.last_outcome.samples]

    straight = run(tmp_path / "straight", 3)
    run(tmp_path / "split", 2)
    resumed = run(tmp_path / "split", 3, resume=True)
    assert len(straight) >= 4 and resumed == straight
