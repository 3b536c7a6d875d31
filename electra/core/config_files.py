"""Configuration a user writes: a JSON or YAML file of field: value, and `--set key=value` overrides. Read as every
user file is (`electra.core.files.decode_user_text`), with a key given twice refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import yaml

from electra.core.errors import UserError
from electra.core.files import decode_user_text, refusing_duplicate_keys, require_file


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A JSON object, or YAML (`.yaml`/`.yml`) mapping, of field: value.

    The text is read as every user file is (`decode_user_text`: UTF-8 through a byte-order mark, UTF-16 with its
    mark; NUL or undecodable bytes are one line). A key given twice in a file is refused, naming it: JSON and
    YAML readers keep the last value silently, and the first was often the one meant."""
    path = require_file(path, "config file")
    yaml_file = path.suffix.lower() in (".yaml", ".yml")
    expected = "a YAML mapping of field: value" if yaml_file else "a JSON object of field: value"
    text = decode_user_text(path.read_bytes(), f"config file {path}", expected)
    if yaml_file:
        try:
            data = yaml.load(text, Loader=_UniqueKeyLoader)
        except _DuplicateKey as exc:
            raise UserError(
                f"config file {path}:{exc.line}: key {exc.key!r} is given more than once; keep the one you mean."
            ) from None
        except yaml.YAMLError as exc:
            raise UserError(f"config file {path} is not valid YAML ({str(exc).splitlines()[0]}).") from None
        kind = "YAML mapping"
    else:
        try:
            data = json.loads(text, object_pairs_hook=_refusing_duplicates(path))
        except json.JSONDecodeError as exc:
            raise UserError(
                f"config file {path} is not valid JSON ({exc}); write it as a JSON object (or YAML, as .yaml)."
            ) from None
        kind = "JSON object"
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a {kind} of field: value.")
    return data


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(key, line)
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader (no tags that build Python objects) refusing a mapping key written twice; keys a merge
    (`<<: *defaults`) brings in may still be overridden, which is what merges are for."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable):  # else the loader's own error names it
                if key in seen:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1)
                seen.add(key)
        return super().construct_mapping(node, deep)


def _refusing_duplicates(path: Path) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A `json.loads` object_pairs_hook that refuses a key given twice in one object of the config file `path`."""
    return refusing_duplicate_keys(
        lambda key: f"config file {path}: key {key!r} is given more than once; keep the one you mean."
    )


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`key=value` strings from `--set` into a dict (types are coerced later, per field)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"override {item!r} must look like key=value (for example hidden_size=128).")
        key, value = item.split("=", 1)
        if not key.strip():
            raise UserError(
                f"override {item!r}: the KEY is empty; write it as KEY=VALUE (for example hidden_size=128)."
            )
        out[key.strip().replace("-", "_")] = value.strip()
    return out
