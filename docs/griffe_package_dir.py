"""A griffe extension for the API reference: the folders pyproject.toml maps into `electra` (`glue/` is
`electra.glue`, ...). griffe finds `electra/` on disk and would not look for its subpackages elsewhere, so when it
loads `electra` this attaches each mapped folder as the member it is installed as."""

from __future__ import annotations

import sys
from pathlib import Path

import griffe

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the docs extra installs tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


class PackageDir(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        if pkg.name != "electra":
            return
        setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
        for dotted, folder in setuptools.get("package-dir", {}).items():
            parent, _, name = dotted.rpartition(".")
            if parent != "electra" or name in pkg.members:
                continue
            module = loader._load_module(name, ROOT / folder / "__init__.py", parent=pkg)
            pkg.set_member(name, module)
