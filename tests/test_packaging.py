"""The wheel installs one import name, so no other distribution's package can take one of ours.

glue-core (glueviz) installs a top-level `glue`, and a folder named like one of the repository's (glue/, squad/, ...)
in the working directory or on PYTHONPATH comes before site-packages on sys.path. Every folder installs as
`electra.<folder>`, so neither can shadow it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("generators", "discriminators", "flops", "glue", "squad", "pll", "tlm", "probes", "tagging")


def test_fake_packages_named_like_our_folders_do_not_break_the_commands(tmp_path):
    fake = tmp_path / "fake"
    for name in FOLDERS:
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text("raise ImportError('the fake package was imported')\n")
    env = {**os.environ, "PYTHONPATH": str(fake)}
    done = subprocess.run(
        [sys.executable, "-m", "electra", "glue", "--help"], cwd=fake, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "--task" in done.stdout
    # The fakes are there to be found: a top-level `glue` is the fake one.
    plain = subprocess.run(
        [sys.executable, "-c", "import glue"], cwd=fake, env=env, capture_output=True, text=True
    )
    assert plain.returncode != 0 and "the fake package was imported" in plain.stderr


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package_with_every_folder(tmp_path):
    source = tmp_path / "source"  # setuptools builds in the tree it is given: not in the checkout
    shutil.copytree(
        REPO, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "runs", "__pycache__")
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("electra-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"electra"}
    for folder in FOLDERS:
        assert f"electra/{folder}/__init__.py" in names, folder
    assert "electra/app/cli.py" in names and "electra/core/errors.py" in names
    # every module of every folder, subpackages included (an unlisted one is left out, and its importers fail)
    modules = [path.relative_to(REPO) for path in (REPO / "electra").rglob("*.py")]
    modules += [
        Path("electra") / path.relative_to(REPO) for f in FOLDERS for path in (REPO / f).rglob("*.py")
    ]
    missing = sorted(str(m) for m in modules if "__pycache__" not in m.parts and m.as_posix() not in names)
    assert not missing, f"modules the wheel leaves out: {missing}"
    # the corpus `pretrain` trains on when given none, and its source and licence, travel with the package
    assert "electra/data/embedded/state_of_the_union.jsonl.gz" in names
    assert "electra/data/embedded/SOURCE.md" in names
