"""Command-line options generated from :class:`~erl_lite.config.ERLConfig`: one per field. An option's help
is the first sentence of the field's attribute docstring (read with :mod:`ast`). Spellings: ``--learning-rate``
and TRL's hidden ``--learning_rate``; ``--use-memory`` / ``--no-use-memory`` and ``--use_memory true|false``;
``none`` for an optional field; dicts and lists as YAML or JSON.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
import textwrap
import types
import typing
from typing import Any, Callable, Mapping, Sequence

import yaml

from erl_lite.config import ERLConfig
from erl_lite.config.checks import FIELD_CHOICES
from erl_lite.config.field_types import closest, field_types
from erl_lite.config.trl_fields import TRL_MAPPED, TRL_REFUSED, translate_trl_fields

_NONE_WORDS = ("none", "null", "~")


def field_docs() -> dict[str, str]:
    """Each ERLConfig field's attribute docstring (the string below ``name: type = default``); none when the source
    is not available."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(ERLConfig)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    docs = {}
    for stmt, following in zip(body, body[1:]):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[stmt.target.id] = inspect.cleandoc(following.value.value)
    return docs


def first_sentence(text: str) -> str:
    """The first sentence of a docstring, on one line, with reST markup reduced to plain text."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)  # :class:`~a.B` -> a.B
    text = " ".join(text.replace("``", "").split())
    # A sentence ends at . ! or ? followed by a space and a capital letter (not "e.g. a").
    match = re.search(r"[.!?](?=\s+[A-Z(`\"'])", text)
    return text[: match.end()] if match else text


def parse_bool(text: str) -> bool:
    """``true/false``, ``yes/no``, ``t/f``, ``y/n``, ``1/0`` (any case): transformers' reading, as TRL's parser does."""
    from transformers.hf_argparser import string_to_bool  # here: --help needs no transformers import

    return string_to_bool(str(text).strip())


def parse_yaml(text: str) -> Any:
    """A value written in YAML or JSON (dicts, lists, numbers, words)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise argparse.ArgumentTypeError(f"not a YAML/JSON value: {text!r} ({e.problem})") from e


def _optional(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text.strip().lower() in _NONE_WORDS else convert(text)

    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


def converter(annotation: Any) -> tuple[Callable[[str], Any], str]:
    """``(parse, metavar)`` for a field's type: ``X | None`` also reads ``none``; dicts, lists, unions as YAML."""
    if annotation is bool:
        return parse_bool, "BOOL"
    if annotation in (int, float, str):
        return annotation, annotation.__name__.upper()
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1 and members[0] in (int, float, str, bool):
            parse, metavar = converter(members[0])
            return _optional(parse), metavar
    return parse_yaml, "YAML"


def cli_fields() -> list[tuple[dataclasses.Field, Any]]:
    """ERLConfig's public init fields with their resolved types, but those marked ``metadata={"cli": False}``."""
    hints = field_types(ERLConfig)
    return [
        (f, hints[f.name])
        for f in dataclasses.fields(ERLConfig)
        if f.init and not f.name.startswith("_") and f.metadata.get("cli", True)
    ]


class SuggestingParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors add "did you mean --x?" per mistyped flag (argparse's needs Python 3.14)."""

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102 - argparse's
        # Kept for error(): argparse hands it only the message.
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):  # noqa: D102 - argparse's, with hints
        super().error(message + self.typo_hints(getattr(self, "_given", [])))

    def typo_hints(self, given: Sequence[str]) -> str:
        """`` (--flag: did you mean --other?)`` for each unknown ``--flag`` in ``given``."""
        parsers = [self]
        for action in self._actions:  # the sub-command named in ``given``: its flags too
            if isinstance(action, argparse._SubParsersAction):
                parsers += [action.choices[t] for t in given if t in action.choices][:1]
        flags = [o for p in parsers for a in p._actions for o in a.option_strings if o.startswith("--")]
        options = {k: v for p in parsers for k, v in _shown_options(p).items()}
        hints = []
        for token in given:
            flag = token.split("=", 1)[0]
            # A known flag, or a prefix argparse accepts as an abbreviation of one, is no typo.
            if not flag.startswith("--") or any(o.startswith(flag) for o in flags):
                continue
            guess = closest(_normal(flag), options)
            if guess:
                hints.append(f"{flag}: did you mean {options[guess]}?")
        return f" ({'; '.join(hints)})" if hints else ""


def _normal(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _shown_options(parser: argparse.ArgumentParser) -> dict[str, str]:
    """``{normalised name: the spelling --help shows}`` of a parser's long options."""
    actions = sorted(parser._actions, key=lambda a: a.help is argparse.SUPPRESS)  # shown ones first
    options = [option for action in actions for option in action.option_strings if option.startswith("--")]
    return {_normal(option): option for option in reversed(options)}  # reversed: a name's first spelling wins


#: Namespace attribute where the options record which spelling set each field.
_SPELLINGS = "_config_spellings"


def _record(namespace: argparse.Namespace, dest: str, option: str | None) -> None:
    """Note that ``option`` set ``dest`` to its current value (argparse itself keeps only the last)."""
    spellings = namespace.__dict__.setdefault(_SPELLINGS, {})
    spellings.setdefault(dest, {})[option] = getattr(namespace, dest)


class _Store(argparse.Action):
    """argparse's ``store`` (``nargs=0``: store ``const``), recording the spelling used."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        _record(namespace, self.dest, option_string)


class _TrlName(argparse.Action):
    """One of TRL's names that erl_lite maps to another field or refuses (:mod:`erl_lite.config.trl_fields`): taken
    as ``ERLConfig(**{name: value})`` takes it, its value read as TRL's parser would (``--use_vllm`` alone: true)."""

    def __call__(self, parser, namespace, values, option_string=None):
        value = True if values is None else parse_yaml(values)
        known = [f.name for f in dataclasses.fields(ERLConfig)]
        try:
            fields = translate_trl_fields({self.dest: value}, known, current=vars(namespace))
        except (TypeError, ValueError) as e:  # refused: TRL's reason, under the flag's name
            raise argparse.ArgumentError(self, str(e)) from None
        for name, mapped in fields.items():
            setattr(namespace, name, mapped)
            _record(namespace, name, option_string)  # a clash with the target's own flag: given_fields refuses


class _BooleanOptional(argparse.BooleanOptionalAction):
    """``--x`` / ``--no-x``, recording the spelling used."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _record(namespace, self.dest, option_string)


def add_config_arguments(
    parser: argparse.ArgumentParser,
    aliases: Mapping[str, Sequence[str]] | None = None,
    negations: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
    title: str = "config fields",
    defaults: Mapping[str, str] | None = None,
) -> argparse._ArgumentGroup:
    """Add one option per ERLConfig field to ``parser`` (in an argument group ``title``). Options default to
    ``argparse.SUPPRESS``, so the namespace holds only the fields given (:func:`given_fields`).
    ``aliases``: extra option strings (``{"max_steps": ["--steps"]}``); ``negations``: switches that set a
    boolean field to False (``{"--no-memory": "use_memory"}``); ``notes``: text appended to a field's help;
    ``defaults``: the default shown in a field's help (by default ERLConfig's, :func:`shown_value`)."""
    aliases, negations, notes = aliases or {}, negations or {}, notes or {}
    docs = field_docs()
    if defaults is None:  # those of a plain ERLConfig (a field not shown is never looked up)
        defaults = {name: shown_value(value) for name, value in ERLConfig().to_dict().items()}
    group = parser.add_argument_group(title, argument_default=argparse.SUPPRESS)
    for f, annotation in cli_fields():
        shown, trl = "--" + f.name.replace("_", "-"), "--" + f.name
        default = f"(default: {defaults[f.name]})" if f.name in defaults else ""
        help_text = " ".join(filter(None, [first_sentence(docs.get(f.name, "")), notes.get(f.name, ""), default]))
        common = dict(dest=f.name, help=help_text.replace("%", "%%"))
        # TRL's spellings (--learning_rate, --no_use_memory): accepted and recorded, not shown in --help.
        hidden = dict(dest=f.name, action=_Store, help=argparse.SUPPRESS)
        if annotation is bool:
            group.add_argument(shown, *aliases.get(f.name, ()), action=_BooleanOptional, **common)
            if trl != shown:  # TRL's spelling: --use_memory [true|false], --no_use_memory
                group.add_argument(trl, nargs="?", const=True, type=parse_bool, **hidden)
                group.add_argument("--no_" + f.name, nargs=0, const=False, **hidden)
        else:
            parse, metavar = converter(annotation)
            allowed = FIELD_CHOICES.get(f.name)
            if allowed:
                metavar = "{" + ",".join(map(str, allowed)) + "}"
                parse = _checked(parse, allowed, f.name)
            group.add_argument(shown, *aliases.get(f.name, ()), type=parse, metavar=metavar, action=_Store, **common)
            if trl != shown:
                group.add_argument(trl, type=parse, **hidden)
    for flag, name in negations.items():
        group.add_argument(
            flag,
            dest=name,
            action=_Store,
            nargs=0,
            const=False,
            help=f"same as --no-{name.replace('_', '-')}",
        )
    return group


def add_trl_names(parser: argparse.ArgumentParser) -> None:
    """Hidden options for TRL's names that erl_lite maps or refuses (:class:`_TrlName`), in TRL's spellings; after
    the parser's own options, which keep theirs (``--reward-weights``)."""
    for name in [*TRL_MAPPED, *TRL_REFUSED]:
        spellings = list(dict.fromkeys(["--" + name, "--" + name.replace("_", "-")]))
        if not any(s in parser._option_string_actions for s in spellings):
            parser.add_argument(*spellings, dest=name, nargs="?", action=_TrlName, help=argparse.SUPPRESS)


def shown_value(value: Any) -> str:
    """A value as one would write it on the command line (``true``, ``none``, YAML for lists)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "none"}[value]
    if isinstance(value, (list, tuple, dict)):
        return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return str(value)


def _checked(parse: Callable[[str], Any], allowed: tuple, name: str) -> Callable[[str], Any]:
    """``parse`` that also refuses values outside ``allowed`` (None passes: optional fields)."""

    def check(text: str) -> Any:
        value = parse(text)
        if value is not None and value not in allowed:
            raise argparse.ArgumentTypeError(f"{name} must be one of {', '.join(map(str, allowed))}; got {text!r}")
        return value

    check.__name__ = getattr(parse, "__name__", "value")
    return check


def given_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields given on the command line (a namespace parsed with :func:`add_config_arguments`). Two
    spellings with different values (``--steps 3 --max-steps 4``): ValueError; one given twice: the last wins."""
    for name, by_option in getattr(args, _SPELLINGS, {}).items():
        if len({repr(v) for v in by_option.values()}) > 1:
            shown = " and ".join(f"{option} {value!r}" for option, value in by_option.items())
            raise ValueError(f"{name} is given twice: {shown}; give it once")
    return {f.name: getattr(args, f.name) for f, _ in cli_fields() if hasattr(args, f.name)}
