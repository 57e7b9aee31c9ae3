"""The custom operators one graph uses: which configs, found where, and the layer each type gets.

Sources, in order: the KUIPER_CUSTOM_OPS environment variable (paths separated by os.pathsep), then the
paths given to RuntimeGraph(custom_ops=...) or `kuiper run --custom-op`. Each path is a config file or a
directory, which stands for every *.toml file below it. A graph looks an operator's type up in its own
table before the global registry, so a config serves a new type, or overrides a built-in one, for the
graphs that ask for it and no others.
"""

from __future__ import annotations

import os
from pathlib import Path

from kuiper.custom.config import read_config
from kuiper.custom.layer import CustomLayer
from kuiper.core.errors import CustomOpError

ENV_VAR = "KUIPER_CUSTOM_OPS"


def config_files(path, source: str) -> list:
    """The config files a path stands for; `source` says where the path came from, for messages."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.rglob("*.toml"))
        if not found:
            raise CustomOpError(f"{path}: no custom operator config (*.toml) in this directory (from {source})")
        return found
    if not path.is_file():
        raise CustomOpError(f"{path}: no such custom operator config (from {source})")
    return [path]


class CustomOps:
    """{PNNX type: OpConfig}, with the layer factory the graph calls."""

    def __init__(self, configs=()):
        self._configs = {}
        for config in configs:
            other = self._configs.get(config.type)
            if other is not None:
                raise CustomOpError(f"{config.path}: type: '{config.type}' is already served by {other.path}")
            self._configs[config.type] = config

    @classmethod
    def load(cls, paths=None) -> "CustomOps":
        """The configs named by KUIPER_CUSTOM_OPS and then by `paths` (one path or a list); a file named
        twice is read once."""
        entries = [(p, f"${ENV_VAR}") for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        entries += [(p, "custom_ops") for p in paths or ()]
        files = {}
        for path, source in entries:
            for file in config_files(path, source):
                files.setdefault(file.resolve(), file)
        return cls(read_config(file) for file in files.values())

    def __contains__(self, pnnx_type: str) -> bool:
        return pnnx_type in self._configs

    def __iter__(self):
        return iter(self._configs.values())

    def __len__(self) -> int:
        return len(self._configs)

    def make_layer(self, op) -> CustomLayer:
        return CustomLayer(op, self._configs[op.type])

    def __repr__(self):
        return f"CustomOps({', '.join(self._configs) or 'none'})"
