"""Pre-flight: what can be seen wrong before the first step, from the tokenizer, the model and one prompt.

The length budgets are refused by :func:`erl_lite.run.lengths.check_lengths`; these checks add the chat template
(:func:`_probe_template`), the special tokens and the trainable parameters.
"""

from __future__ import annotations

from typing import Any

from erl_lite.core.rollout import opening_messages, template_kwargs_for
from erl_lite.diagnostics.checks import NOTE, WARNING, Finding
from erl_lite.engine.chat import end_of_turn_id, has_chat_template, render
from erl_lite.engine.generation import sampler_stop_ids
from erl_lite.engine.policy import base_model


def _finding(name: str, saw: str, means: str, tries: str, level: str = WARNING) -> Finding:
    return Finding(name=name, level=level, step=0, saw=saw, means=means, tries=tries)


#: The probe's system text: a rendering that lacks it drops system messages (rulebooks are system prompts).
_PROBE_SYSTEM = "ERL-LITE-PROBE: the rulebook goes here."
_PROBE = ({"role": "system", "content": _PROBE_SYSTEM}, {"role": "user", "content": "Say 1."})


def chat_findings(tokenizer: Any, env: Any, task: Any, template_kwargs: dict[str, Any] | None) -> list[Finding]:
    """The chat template: present, applied to the first task's opening, not applied twice, keeping a
    system message and opening an assistant turn (:func:`_probe_template`; ValueError when it cannot)."""
    try:
        observation = env.new_episode().reset(task)
        messages = opening_messages(env.initial_system_prompt(task), observation)
    except Exception:  # noqa: BLE001 - the first step meets it and reports it with its own context
        return []
    raw = "\n".join(str(m.get("content", "")) for m in messages)
    markers = [t for t in _markers(tokenizer) if t in raw]
    out = []
    if markers:
        out.append(
            _finding(
                "templated_twice",
                f"task {task.task_id!r}'s text already holds the template's tokens {markers[:3]}",
                "The prompt was rendered with a chat template before erl_lite applies it again, so the model sees "
                "two templates nested",
                "pass the plain question as 'prompt' (or chat messages), not rendered text",
            )
        )
    if not has_chat_template(tokenizer):
        chat = [t for t in ("<|im_start|>", "<|im_end|>") if t in (getattr(tokenizer, "get_vocab", dict)() or {})]
        out.append(
            _finding(
                "chat_template",
                "the tokenizer has no chat template, so prompts use erl_lite's plain '### User' format"
                + (f", though its vocabulary has the chat markers {' and '.join(chat)}" if chat else ""),
                "Fine for a base model; an instruct model never saw this format and answers worse",
                "load the instruct model's own tokenizer, or set tokenizer.chat_template",
                level=WARNING if len(chat) == 2 else NOTE,
            )
        )
        return out
    out += _probe_template(tokenizer, template_kwargs)  # a bare-text template has no generation prompt
    default = "" if any(m.get("role") == "system" for m in messages) else _default_system(tokenizer, template_kwargs)
    return out + [
        _finding(
            "default_system_prompt",
            f"the chat template adds its own system prompt {default!r:.150} "
            "to first attempts, which have none, while second attempts carry the rulebook in its place",
            "The two attempts differ by more than the rulebook",
            "give the tasks a system prompt",
            level=NOTE,
        )
        for _ in [default]
        if default
    ]


def _default_system(tokenizer: Any, template_kwargs: dict[str, Any] | None) -> str:
    """What the template writes where a system message would go when a conversation has none ('' when nothing):
    a user-only rendering between what a system + user one holds before and after the system text."""
    bare, given = (render(m, tokenizer, True, template_kwargs) for m in (_PROBE[1:], _PROBE))
    before, _, after = given.partition(_PROBE_SYSTEM)
    fits = after and bare.startswith(before) and bare.endswith(after) and len(bare) >= len(before) + len(after)
    return bare[len(before) : len(bare) - len(after)].strip() if fits else ""


def _probe_template(tokenizer: Any, template_kwargs: dict[str, Any] | None) -> list[Finding]:
    """A system + user probe rendered with and without the generation prompt: ValueError when the template
    fails on it or opens no assistant turn; ``system_dropped`` when the system text is lost."""
    probe = list(_PROBE)
    try:
        opened, closed = (render(probe, tokenizer, g, template_kwargs) for g in (True, False))
    except Exception as err:  # noqa: BLE001 - the template's own error, named below
        raise ValueError(
            f"the chat template fails on a system + user conversation ({err}); ERL's rulebooks are "
            "system prompts: use a template that takes the system role or folds it into the user turn"
        ) from err
    eot = end_of_turn_id(tokenizer, template_kwargs)
    if not opened[len(closed) :].strip() or (
        eot is not None and opened.rstrip().endswith(tokenizer.convert_ids_to_tokens(eot))
    ):
        raise ValueError(
            f"the chat template's add_generation_prompt=True opens no assistant turn (the prompt ends "
            f"{opened[-40:]!r}), so replies would continue the user's turn: use the model's own "
            "template, or add {% if add_generation_prompt %}<assistant header>{% endif %} to it"
        )
    if _PROBE_SYSTEM in opened:
        return []
    return [
        _finding(
            "system_dropped",
            "the chat template renders a system + user conversation without the system text",
            "The initial system prompt and every rulebook are lost: second attempts "
            "never see the reflection, so success/second stays where first attempts are",
            "use a template that keeps the system role, or folds it into the first user turn",
        )
    ]


def _markers(tokenizer: Any) -> list[str]:
    """The tokenizer's special tokens as text (``<|im_start|>``, ...): a rendered template holds some."""
    specials = set(getattr(tokenizer, "all_special_tokens", []) or [])
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    specials |= {t.content for t in added.values() if getattr(t, "special", False)}
    return sorted(t for t in specials if len(t) > 1)


def token_findings(
    model: Any, tokenizer: Any, stop_ids: list[int], template_kwargs: dict[str, Any] | None
) -> list[Finding]:
    """EOS and pad set and inside the model's vocabulary; the end-of-turn token among the sampler's stop ids."""
    out = []
    size = getattr(getattr(model, "get_input_embeddings", lambda: None)(), "num_embeddings", None)
    for role in ("eos", "pad"):
        token_id = getattr(tokenizer, f"{role}_token_id", None)
        if token_id is None:
            out.append(
                _finding(
                    f"{role}_token",
                    f"the tokenizer has no {role} token",
                    "Replies cannot end (eos) or batches cannot be padded (pad)",
                    f"set tokenizer.{role}_token (erl_lite's loader uses eos as pad)",
                )
            )
        elif size is not None and not 0 <= token_id < size:
            out.append(
                _finding(
                    f"{role}_token",
                    f"the {role} token id {token_id} is outside the model's {size}-row embedding",
                    "The tokenizer and the model do not belong together",
                    "load both from the same checkpoint, or resize the embeddings",
                )
            )
    turn_end = end_of_turn_id(tokenizer, template_kwargs)
    if turn_end is not None and stop_ids and turn_end not in stop_ids:
        name = tokenizer.convert_ids_to_tokens(turn_end)
        out.append(
            _finding(
                "end_of_turn",
                f"the template ends a turn with {name!r} (id {turn_end}) but the "
                f"sampler stops at {sorted(stop_ids)} only",
                "Replies run on past the end of their turn to the length budget",
                "add it to the generation config's eos_token_id, or set tokenizer.eos_token to it",
            )
        )
    return out


#: Sampling fields a checkpoint's generation_config may recommend (erl_lite reads none of them).
_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "typical_p", "repetition_penalty", "no_repeat_ngram_size")


def sampling_findings(model: Any, args: Any) -> list[Finding]:
    """A note naming the checkpoint's own sampling defaults, which erl_lite does not apply."""
    config = getattr(base_model(model), "generation_config", None)
    # A field at its plain value (0 for the fields not listed) is not named.
    plain = {"top_p": 1.0, "typical_p": 1.0, "repetition_penalty": 1.0}
    given = {k: v for k in _SAMPLING_FIELDS if (v := getattr(config, k, None)) is not None and v != plain.get(k, 0)}
    if not given:
        return []
    return [
        _finding(
            "generation_config",
            "the checkpoint's generation_config recommends " + ", ".join(f"{k}={v}" for k, v in given.items()),
            f"erl_lite samples with ERLConfig's temperature={args.temperature}, top_p={args.top_p}, "
            f"top_k={args.top_k} alone, the distribution its update scores (of generation_config only "
            "the end and pad tokens are read)",
            "set ERLConfig's temperature, top_p and top_k to the "
            "recommended values if you want them; penalties cannot be scored and are refused",
            level=NOTE,
        )
    ]


def trainable_findings(model: Any, target_modules: Any) -> list[Finding]:
    """Trainable parameters exist, and every LoRA target module named got an adapter."""
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    if not trainable:
        return [
            _finding(
                "trainable",
                "the model has no trainable parameter",
                "Nothing can learn",
                "pass peft_config (or lora_r) or unfreeze the model",
            )
        ]
    out = []
    if isinstance(target_modules, (list, tuple)) and hasattr(model, "peft_config"):
        trained = {part for name in trainable if "lora_" in name for part in name.split(".")}
        for module in target_modules:
            if module not in trained:
                out.append(
                    _finding(
                        "trainable",
                        f"lora_target_modules names {module!r}, which matches no module that trains",
                        "That module keeps its base weights (a misspelt name, or one "
                        "this architecture calls otherwise)",
                        "print model.named_modules() and use its names, or 'all-linear'",
                    )
                )
    heads = [n for n in trainable if any(k in n for k in ("lm_head", "embed_tokens", "wte"))]
    if heads and len(heads) == len(trainable):
        out.append(
            _finding(
                "trainable",
                f"only the embeddings or the output head train ({heads[:2]})",
                "The transformer's layers keep their weights, so behaviour barely changes",
                "target the attention and MLP projections ('all-linear')",
            )
        )
    return out


def preflight(trainer: Any) -> list[Finding]:
    """Every pre-flight finding for a built trainer (its first train task stands for the prompts)."""
    task = trainer.train_tasks[0]
    kwargs = template_kwargs_for(trainer.env, task, trainer.args.chat_template_kwargs)
    return (
        chat_findings(trainer.tokenizer, trainer.env, task, kwargs)
        + token_findings(
            trainer.model, trainer.tokenizer, sampler_stop_ids(trainer.generator, trainer.tokenizer), kwargs
        )
        + trainable_findings(trainer.model, trainer.args.lora_target_modules)
        + sampling_findings(trainer.model, trainer.args)
    )
