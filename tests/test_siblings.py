"""The top-level packages the wheel installs (glue, squad, ...) cannot be shadowed by others of the same name.

glue-core 1.28 (glueviz) installs a top-level `glue` too, and a folder named like a sibling on PYTHONPATH or in the
working directory comes before site-packages on sys.path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from electra.errors import UserError
from electra.siblings import ROOT, SIBLINGS, bind_siblings, is_ours

REPO = Path(__file__).resolve().parent.parent


def _fake_packages(where: Path) -> Path:
    for name in SIBLINGS:
        (where / name).mkdir(parents=True)
        (where / name / "__init__.py").write_text("raise ImportError('the fake package was imported')\n")
    return where


def test_fake_packages_earlier_on_sys_path_do_not_break_the_commands(tmp_path):
    fake = _fake_packages(tmp_path / "fake")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(REPO)])}
    code = "from electra.cli import main; raise SystemExit(main(['glue', '--help']))"
    done = subprocess.run([sys.executable, "-c", code], cwd=fake, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--task" in done.stdout
    # Without the binding the same environment picks the fake: the check above is not vacuous.
    plain = subprocess.run(
        [sys.executable, "-c", "import glue"], cwd=fake, env=env, capture_output=True, text=True
    )
    assert plain.returncode != 0 and "the fake package was imported" in plain.stderr


def test_a_foreign_package_imported_first_is_named_in_one_line(tmp_path, monkeypatch):
    foreign = tmp_path / "glue"
    foreign.mkdir()
    (foreign / "__init__.py").write_text("")
    monkeypatch.delitem(sys.modules, "glue")
    monkeypatch.syspath_prepend(str(tmp_path))
    import glue  # the other distribution's

    assert not is_ours(glue)
    with pytest.raises(UserError, match=r"another package named 'glue' .* own virtual environment") as err:
        bind_siblings(strict=True)
    assert str(foreign) in str(err.value) and "\n" not in str(err.value)


def test_every_sibling_is_bound_to_the_copy_beside_electra():
    import electra  # noqa: F401  (binding happens on import)

    for name in SIBLINGS:
        assert is_ours(sys.modules[name]), name
        assert Path(sys.modules[name].__file__).resolve().parent == ROOT / name
