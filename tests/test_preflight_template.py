"""Pre-flight renders a system + user conversation with the chat template (issue 35, item 8): a template
without a generation prompt, or one that raises on a system message, is refused; one that drops system
messages (the rulebook never reaches a second attempt) is warned about by name; real templates pass.
"""

from __future__ import annotations

import pytest

from erl_lite.config import ERLConfig
from erl_lite.diagnostics import DiagnosticError
from erl_lite.diagnostics.preflight import chat_findings
from erl_lite.engine.generation import ScriptedGenerator
from erl_lite.envs.frozenlake import FrozenLake
from erl_lite.envs.rows import rows_to_tasks
from erl_lite.integrations.dataset import RewardFunctionEnv
from erl_lite.run.trainer import ERLTrainer
from erl_lite.testing import find_qwen3_tokenizer, qwen3_tokenizer, tiny_model, tiny_tokenizer

TURN = "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
GEN = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

#: Hostile templates: name -> (template, what pre-flight must do).
TEMPLATES = {
    "bare_text": ("{% for message in messages %}{{ message['content'] + '\\n' }}{% endfor %}", "refuse"),
    "no_generation_prompt": ("{% for message in messages %}" + TURN + "{% endfor %}", "refuse"),
    "blank_generation_prompt": (
        "{% for message in messages %}" + TURN + "{% endfor %}{% if add_generation_prompt %}{{ '\\n' }}{% endif %}",
        "refuse",
    ),
    "generation_prompt_closes_a_turn": (
        "{% for message in messages %}" + TURN + "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_end|>' }}{% endif %}",
        "refuse",
    ),
    "system_raises": (
        "{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}" + TURN + "{% endfor %}" + GEN,
        "refuse",
    ),
    "drops_system": (
        "{% for message in messages %}{% if message['role'] != 'system' %}" + TURN + "{% endif %}{% endfor %}" + GEN,
        "warn",
    ),
    # Gemma's way: no system role, its text opens the first user turn; the rulebook still arrives
    "system_folded_into_user": (
        "{% set ns = namespace(sys='') %}{% for message in messages %}{% if message['role'] == 'system' %}"
        "{% set ns.sys = message['content'] + '\\n\\n' %}{% else %}"
        "{{ '<|im_start|>' + message['role'] + '\\n' + (ns.sys if message['role'] == 'user' else '') "
        "+ message['content'] + '<|im_end|>\\n' }}{% set ns.sys = '' %}{% endif %}{% endfor %}" + GEN,
        "pass",
    ),
}


def tokenizer_with(template: str):
    tok = tiny_tokenizer()
    tok.chat_template = template
    return tok


def frozenlake_findings(tok, kwargs=None):
    env = FrozenLake()
    return chat_findings(tok, env, env.train_tasks(1)[0], kwargs)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@pytest.mark.parametrize("with_system", [True, False], ids=["env_with_system", "env_without"])
def test_hostile_templates(name, with_system):
    """The probe holds its own system message: an environment without one is judged the same."""
    template, verdict = TEMPLATES[name]
    tok = tokenizer_with(template)
    env = FrozenLake() if with_system else RewardFunctionEnv(lambda completions, **kw: [0.0] * len(completions))
    task = env.train_tasks(1)[0] if with_system else rows_to_tasks([{"prompt": "Say 1."}])[0]
    if verdict == "refuse":
        with pytest.raises(ValueError, match="chat template") as err:
            chat_findings(tok, env, task, None)
        assert ("add_generation_prompt" in str(err.value)) != (name == "system_raises"), str(err.value)
        return
    found = [f.name for f in chat_findings(tok, env, task, None)]
    assert found == (["system_dropped"] if verdict == "warn" else []), found


def trainer(tok, **kw):
    def hit(completions, **_):
        return [0.0] * len(completions)

    cfg = ERLConfig.preset(
        "cpu",
        max_steps=1,
        num_tasks_per_step=1,
        num_generations=2,
        max_completion_length=4,
        max_reflection_length=8,
        eval_steps=0,
        progress_bar=False,
        **kw,
    )
    return ERLTrainer(
        tiny_model(tok),
        hit,
        cfg,
        [{"prompt": "Say 1."}],
        processing_class=tok,
        generator=ScriptedGenerator(tok, lambda p: "1"),
    )


def test_the_trainer_refuses_a_template_without_a_generation_prompt():
    with pytest.raises(ValueError, match="add_generation_prompt"):
        trainer(tokenizer_with(TEMPLATES["no_generation_prompt"][0]))


def test_the_trainer_warns_by_name_on_a_template_that_drops_system_messages(capsys):
    trainer(tokenizer_with(TEMPLATES["drops_system"][0]))
    err = capsys.readouterr().err
    assert "[system_dropped]" in err and "rulebook" in err
    with pytest.raises(DiagnosticError, match="system_dropped"):
        trainer(tokenizer_with(TEMPLATES["drops_system"][0]), diagnostics="raise")


def test_second_not_better_names_the_template():
    from erl_lite.diagnostics import CHECKS_BY_NAME

    assert "system_dropped" in CHECKS_BY_NAME["second_not_better"].tries


def test_sound_templates_pass():
    assert frozenlake_findings(tiny_tokenizer()) == []
    assert frozenlake_findings(tiny_tokenizer(chat_template=False))[0].name == "chat_template"  # a note only


def test_the_embedded_models_template_passes():
    from transformers import AutoTokenizer

    from erl_lite.embedded.loading import check_build

    assert frozenlake_findings(AutoTokenizer.from_pretrained(str(check_build()))) == []


@pytest.mark.parametrize("thinking", [False, True])
def test_the_real_qwen3_template_passes(thinking):
    if find_qwen3_tokenizer() is None:
        pytest.skip("the Qwen3 tokenizer is not on this machine")
    assert frozenlake_findings(qwen3_tokenizer(), {"enable_thinking": thinking}) == []
