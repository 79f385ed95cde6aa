"""YAML run files (``erl-lite train --config run.yaml``): ERLConfig field names (``-`` or ``_``) to values,
each checked against its field's type; every error names the file and the line.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Iterable, Mapping, Sequence

import yaml

from erl_lite.cli.config_args import cli_fields, converter, parse_yaml
from erl_lite.config.field_types import closest, conform
from erl_lite.config.trl_fields import TRL_MAPPED, TRL_REFUSED, translate_trl_fields


def load_config_file(
    path: str, other_keys: Sequence[str] = (), aliases: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a YAML run file: ``(field values, values of other_keys)``; TRL's names mapped or refused as ``ERLConfig``
    takes them; any other key: an error naming the file and the closest key. ``aliases``: shorthands
    (``{"steps": "max_steps"}``)."""
    types_ = {f.name: annotation for f, annotation in cli_fields()}
    fields, others, seen = {}, {}, {}
    for raw_key, value, line in _yaml_entries(path) or ():  # an empty file: no values
        key = str(raw_key).replace("-", "_")
        where = f"{path}:{line}"
        if key in types_ or key in other_keys:
            entries = [(key, raw_key, value)]
        elif key in TRL_MAPPED or key in TRL_REFUSED:  # TRL's name: mapped or refused as ERLConfig(**{key: value})
            try:
                mapped = translate_trl_fields({key: value}, types_, current=fields)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{where}: {e}") from None
            entries = [(name, name, v) for name, v in mapped.items()]
        else:
            known = [*types_, *other_keys]
            guess = closest(key, known, aliases)
            hint = f"; did you mean {guess!r}?" if guess else f"; known keys: {', '.join(sorted(known))}"
            raise ValueError(f"{where}: unknown key {str(raw_key)!r}{hint}")
        for key, raw_key, value in entries:
            if key in types_:
                value = _coerce(value, types_[key], where, key)
            if key in seen and seen[key][2] != value:  # the same key twice: refused when they disagree
                first_line, first_key, _ = seen[key]
                spelled = "" if first_key == raw_key else f": {str(first_key)!r} and {str(raw_key)!r}"
                raise ValueError(
                    f"{where}: {key} is given twice (lines {first_line} and {line}{spelled}); give it once"
                )
            seen[key] = (line, raw_key, value)
            (fields if key in types_ else others)[key] = value
    return fields, others


def locate_in_file(message: str, path: str, names: Iterable[str]) -> str:
    """``message`` prefixed with ``path:line:`` of the first ``ERLConfig.<name>`` it names that the file set."""
    lines = {str(key).replace("-", "_"): line for key, _, line in _yaml_entries(path) or ()}
    names = set(names)
    for name in re.findall(r"\bERLConfig\.(\w+)", message):
        if name in names and name in lines:
            return f"{path}:{lines[name]}: {message}"
    return message


def _yaml_entries(path: str) -> list[tuple[Any, Any, int]] | None:
    """``(key, value, line)`` of each top-level entry of a YAML mapping, duplicates kept; None when empty."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"cannot read the config file {path}: {e.strerror}") from e
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if not isinstance(node, yaml.MappingNode):
            data = loader.construct_document(node)
            raise ValueError(f"{path} must hold a mapping of config fields to values, got a {type(data).__name__}")
        loader.flatten_mapping(node)  # YAML merge keys (<<: *defaults) become plain entries
        return [
            (loader.construct_object(k, deep=True), loader.construct_object(v, deep=True), k.start_mark.line + 1)
            for k, v in node.value
        ]
    except yaml.YAMLError as e:
        raise ValueError(f"{path} is not valid YAML: {e}") from e
    finally:
        loader.dispose()


def _coerce(value: Any, annotation: Any, where: str, key: str) -> Any:
    """A file's value as the field stores it (YAML reads ``1e-6`` as a string: parsed as on the command line)."""
    parse, _ = converter(annotation)
    try:
        if isinstance(value, str) and parse not in (str, parse_yaml):
            value = parse(value)
        return conform(key, value, annotation)
    except (ValueError, argparse.ArgumentTypeError) as e:
        message = str(e)
        raise ValueError(f"{where}: {message if message.startswith('ERLConfig.') else f'{key}: {message}'}") from e
