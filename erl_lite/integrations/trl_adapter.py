r"""Environment classes written for TRL's ``environment_factory``, run as erl_lite environments.

TRL 1.16's contract: ``reset(**row)`` returns None or text for the last user message, public methods are
the tools, an optional ``get_reward()`` has weight 1; ``<tool_call>`` blocks (Qwen's Hermes format) get
``<tool_response>`` results, a reply without one ends the episode. Departures from TRL: a fresh instance
per episode (ERL replays a failed task; ``reset`` should be deterministic in the row); calls parsed from
text; invalid JSON in a ``<tool_call>`` gets an error result (TRL: the answer); no async tools.
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any, Callable, Mapping, Sequence

from erl_lite.core.env import BatchScoredEpisode, Environment, Episode, StepOutput
from erl_lite.engine.chat import template_renders_tools
from erl_lite.envs.multi import ENV_COLUMN, MultiEnvironment
from erl_lite.envs.rows import split_prompt
from erl_lite.integrations.reward_calls import RewardLog, call_arguments, reward_sources, weighted_rewards
from erl_lite.records import Task

TOOL_CALL = re.compile(r"<tool_call>\s*(.+?)\s*</tool_call>", re.DOTALL)  # as in TRL's Qwen response schema
_HOOKS = ("reset", "get_reward")


def tool_methods(cls: type) -> list[str]:
    """TRL's tools: public functions other than reset/get_reward, read on the class (as TRL does)."""
    return [
        name
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in _HOOKS and not name.startswith("_")
    ]


#: How an episode ends: the one line of the tool instructions a chat template does not give.
FINAL_ANSWER_HINT = "When you are done, answer without a tool call."


def tools_system_prompt(schemas: Sequence[dict[str, Any]]) -> str:
    """Qwen's ``tools=`` system block, for a chat template that does not render ``tools=``."""
    lines = "\n".join(json.dumps(s) for s in schemas)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
        f"<args-json-object>}}\n</tool_call>\n\n{FINAL_ANSWER_HINT}"
    )


def parse_tool_calls(text: str) -> list[dict[str, Any] | str]:
    """Each ``<tool_call>`` of ``text``: ``{"name", "arguments"}``, or an error string if malformed."""
    calls: list[dict[str, Any] | str] = []
    for body in TOOL_CALL.findall(text):
        try:
            call = json.loads(body)
        except json.JSONDecodeError:
            calls.append(f"not valid JSON: {body[:80]}")
            continue
        if isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments", {}), dict):
            calls.append({"name": call["name"], "arguments": call.get("arguments", {})})
        else:
            calls.append(f'expected {{"name": ..., "arguments": {{...}}}}, got {body[:80]}')
    return calls


class TRLEnvironment(Environment):
    """A TRL ``environment_factory`` class as a multi-turn environment (``examples/trl_env_counter.py`` is one).

    ``reward_funcs`` are also passed ``environments=`` (the instances); ``max_turns`` is TRL's
    ``max_tool_calling_iterations`` + 1."""

    def __init__(
        self,
        factory: Callable[[], Any],
        reward_funcs: Callable | Sequence[Callable] | None = None,
        reward_weights: Sequence[float] | None = None,
        max_turns: int = 8,
        name: str | None = None,
    ) -> None:
        if not callable(factory):
            raise TypeError(f"environment_factory must be a class or a zero-argument callable, got {factory!r:.60}")
        probe = factory()
        cls = type(probe)
        if not callable(getattr(probe, "reset", None)):
            raise ValueError(
                f"environment_factory {cls.__name__}: each instance must define a callable reset "
                "(TRL's contract: reset(**row) -> str | None)"
            )
        from transformers.utils import get_json_schema

        self.factory, self.tools = factory, tool_methods(cls)
        schemas = []
        for tool in self.tools:
            try:
                schemas.append(get_json_schema(getattr(probe, tool)))
            except Exception as err:  # transformers explains what the docstring or hints lack
                raise ValueError(
                    f"tool {cls.__name__}.{tool}: cannot build its JSON schema ({err}); tools need "
                    "type hints and a docstring with an Args: section, as in TRL"
                ) from err
        funcs, weights = reward_sources(reward_funcs, reward_weights)
        if callable(getattr(probe, "get_reward", None)):
            funcs.append(_get_reward_named(cls.__name__))
            weights.append(1.0)
        if not funcs:
            raise ValueError(
                f"no reward source for {cls.__name__}: pass reward_funcs, or give the class a get_reward() method"
            )
        self.reward_funcs, self.reward_weights = funcs, weights
        self.max_turns = max_turns
        self.name = name or cls.__name__.lower()
        self.schemas = schemas
        self._template_tools: list[dict[str, Any]] | None = None
        self.system_prompt = tools_system_prompt(schemas) if schemas else ""
        # A second attempt's system prompt is the rulebook plus this reminder: the tools must stay listed.
        self.action_reminder = self.system_prompt

    def use_tokenizer(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        """Hand the tools to the chat template (``tools=``, as TRL does) when it renders them."""
        if self.schemas and template_renders_tools(tokenizer, template_kwargs):
            self._template_tools = self.schemas
            # The template lists tools and call format (after a rulebook too), not how an episode ends.
            self.system_prompt = self.action_reminder = FINAL_ANSWER_HINT

    def template_tools(self, task: Task) -> list[dict[str, Any]] | None:
        return self._template_tools

    def initial_system_prompt(self, task: Task) -> str:
        system, _ = split_prompt(task.prompt if task.prompt is not None else "")
        return "\n\n".join(p for p in (system, self.system_prompt) if p)

    def new_episode(self) -> "TRLEpisode":
        return TRLEpisode(self)

    def score_batch(self, episodes: Sequence[Episode], completion_ids: Sequence[list[int]] | None = None) -> None:
        """Score every reset, unscored episode: one TRL-style call per reward function."""
        todo, ids = TRLEpisode.pending(episodes, completion_ids)
        if not todo:
            return
        tasks = [ep.task for ep in todo]
        log = self.reward_log if self.reward_log is not None else RewardLog()
        kwargs = call_arguments(tasks, [ep.final_text for ep in todo], ids, self.trainer_state, log)
        kwargs["completions"] = [
            ep.final_text if isinstance(t.prompt, str) else ep.completion_messages() for ep, t in zip(todo, tasks)
        ]
        kwargs["environments"] = [ep.instance for ep in todo]
        scores = weighted_rewards(self.reward_funcs, self.reward_weights, kwargs, tasks)
        for ep, reward, note, parts, extra in zip(
            todo, scores.rewards, scores.notes, scores.parts, log.take_extra(tasks)
        ):
            ep.set_score(reward, " ".join(note), parts, extra)


def _get_reward_named(name: str) -> Callable[..., list[float]]:
    """``get_reward()`` per instance, named after the class (TRL logs ``rewards/<class name>/mean``)."""

    def get_reward(environments: list[Any], **kwargs: Any) -> list[float]:
        return [e.get_reward() for e in environments]

    get_reward.__name__ = get_reward.__qualname__ = name
    return get_reward


class TRLEpisode(BatchScoredEpisode):
    """One rollout on a fresh instance of a :class:`TRLEnvironment`'s class."""

    def __init__(self, env: TRLEnvironment) -> None:
        self.env = env
        self.task: Task | None = None
        self.instance: Any = None
        self.turns: list[tuple[str, list[str]]] = []  # (reply, tool results)
        self.observation: Any = ""
        self.failed_calls = 0

    def reset(self, task: Task) -> str | list[dict[str, str]]:
        self.task, self.turns, self.done, self.scored, self.failed_calls = task, [], False, False, 0
        self.instance = self.env.factory()
        row = {"prompt": task.prompt, **{k: v for k, v in task.data.items() if k != ENV_COLUMN}}
        extra = self.instance.reset(**row)
        if extra is not None and not isinstance(extra, str):
            raise TypeError(
                f"{type(self.instance).__name__}.reset() returned {type(extra).__name__}; "
                "TRL's contract is a string (appended to the last user message) or None"
            )
        _, context = split_prompt(task.prompt if task.prompt is not None else "", where=f"task {task.task_id!r}")
        if extra:
            if isinstance(context, str):
                context = f"{context}\n{extra}" if context else extra
            else:  # TRL's dataset-free mode: an empty placeholder message becomes the prompt itself
                last = context[-1]["content"]
                context = context[:-1] + [{**context[-1], "content": f"{last}\n{extra}" if last else extra}]
        self.observation = context
        return context

    def step(self, action: str) -> StepOutput:
        if self.task is None or self.done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        calls = parse_tool_calls(action)
        results = [self._run(call) for call in calls]
        self.turns.append((action, results))
        if not calls:  # a reply without a tool call is the final answer
            self.done = True
            return None, 0.0, True, {"pending_score": True}
        observation = "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)
        return observation, 0.0, False, {"tool_calls": len(calls)}

    def _run(self, call: dict[str, Any] | str) -> str:
        """A tool call's result as text; failures become ``{"error": ...}`` as in TRL."""
        if isinstance(call, str):
            error = f"could not parse the tool call: {call}"
        elif call["name"] not in self.env.tools:
            error = f"Tool {call['name']} not found."
        else:
            try:
                return str(getattr(self.instance, call["name"])(**call["arguments"]))
            except Exception as err:  # the model's call was wrong: it sees the error, as in TRL
                error = str(err)
        self.failed_calls += 1
        return json.dumps({"error": error})

    @property
    def final_text(self) -> str:
        """The last reply (the answer, or the last call when the turns ran out)."""
        return self.turns[-1][0] if self.turns else ""

    def completion_messages(self) -> list[dict[str, str]]:
        """The replies and tool results as chat messages (TRL's conversational completion)."""
        out: list[dict[str, str]] = []
        for reply, results in self.turns:
            out.append({"role": "assistant", "content": reply})
            out += [{"role": "tool", "content": r} for r in results]
        return out

    def _ready_to_score(self) -> bool:
        return self.task is not None

    def feedback(self) -> str:
        calls = sum(len(r) for _, r in self.turns)
        end = "answered" if self.done else "ran out of turns without a final answer"
        text = f"The agent made {calls} tool call(s), {self.failed_calls} failed, and {end}. Reward: {self.reward:g}."
        return f"{text} {self._verdict}".strip()

    def trace(self) -> str:
        lines = [f"Task:\n{self.observation if isinstance(self.observation, str) else self.observation[-1]['content']}"]
        for t, (reply, results) in enumerate(self.turns, 1):
            lines.append(f"Turn {t} reply:\n{reply}")
            lines += [f"Tool result:\n{r}" for r in results]
        lines.append(f"Result: {self.feedback()}")
        return "\n\n".join(lines)


def placeholder_rows(factory: Any, max_steps: int | None, num_tasks_per_step: int) -> list[dict[str, Any]]:
    """TRL 1.16's rows without a ``train_dataset``: one empty user message per task (``reset()`` gives the prompt)."""
    if isinstance(factory, Mapping):
        raise ValueError(
            "a dict environment_factory (several environments) requires a train_dataset with an "
            f"'{ENV_COLUMN}' column to route each row to its environment; pass a dataset, or a "
            "single environment factory"
        )
    if max_steps is None:
        raise ValueError(
            "without a train_dataset (the environment returns the prompt from reset()), max_steps "
            "must be set to define the training length (num_train_epochs has no dataset to count), "
            "as in TRL: ERLConfig(max_steps=...)"
        )
    return [{"prompt": [{"role": "user", "content": ""}]} for _ in range(num_tasks_per_step)]


def environment_from_factory(
    factory: Any, reward_funcs: Any = None, reward_weights: Sequence[float] | None = None
) -> Environment:
    """``ERLTrainer``'s reading of TRL's ``environment_factory``: one class, or a dict routed by name."""
    if isinstance(factory, Mapping):
        return MultiEnvironment(
            {name: TRLEnvironment(f, reward_funcs, reward_weights, name=name) for name, f in factory.items()}
        )
    return TRLEnvironment(factory, reward_funcs, reward_weights)
