"""The README and the documentation site (mkdocs.yml, docs/) are checked like code.

The site builds with `mkdocs build --strict` (a broken link, a page left out of the navigation or an API reference
that no longer resolves fails); the README keeps the two commands CI runs; every `electra ...` command the pages show
names a command and flags that exist; and the blocks marked `<!-- runs: tests/test_docs.py -->` are run here.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
RUNS_MARK = "<!-- runs: tests/test_docs.py -->"
# Blocks that run on the files in examples/, with `runs/tiny-electra` replaced by a tiny encoder the test saves.
EXAMPLES_MARK = "<!-- runs with a tiny model: tests/test_docs.py -->"
# The measurement logs are records of what was run on a day (flags since renamed included), not instructions.
LOGS = {"scoring-log.md", "speed-log.md"}

COMMAND_1 = "pip install torch==2.13.0 -e . && python pretrain.py --size tiny"
COMMAND_2 = 'pip install torch==2.13.0 -e ".[test]" && python -m pytest'


def pages() -> list[Path]:
    return [REPO / "README.md", *(p for p in sorted(DOCS.rglob("*.md")) if p.name not in LOGS)]


def code_blocks(text: str, mark: str = RUNS_MARK) -> list[tuple[str, str, bool]]:
    """(language, body, marked to run) of every fenced block; `mark` is the comment that marks a block to run."""
    found = []
    for match in re.finditer(rf"(?m)^({re.escape(mark)}\n)?```(\w*)\n(.*?)^```", text, re.S):
        found.append((match.group(2), match.group(3), bool(match.group(1))))
    return found


def test_mkdocs_build_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip(
            'mkdocs and mkdocstrings are not installed: pip install -e ".[docs]" (the test extra has them)'
        )
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "site" / "api" / "consumers" / "index.html").read_text()
    assert "electra.glue.finetune" in api and "electra.pll.fusion" in api  # the package-dir folders resolved


def test_readme_is_the_front_door():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    blocks = [body for lang, body, _ in code_blocks(readme) if lang == "bash"]
    commands = [line for line in blocks[0].splitlines() if line and not line.startswith("#")]
    assert commands == [COMMAND_1, COMMAND_2]
    # CI runs exactly the README's test command.
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("pip ")]
    assert ci == [COMMAND_2]
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / target).is_file(), target


def shown_commands() -> list[tuple[str, list[str]]]:
    """Every `electra ...` line of the pages' bash blocks (continuations joined), as (page, words)."""
    found = []
    for page in pages():
        for lang, body, _ in code_blocks(page.read_text()):
            if lang != "bash":
                continue
            for line in body.replace("\\\n", " ").splitlines():
                line = line.split(" #", 1)[0].strip()
                for part in re.split(r"\s*(?:&&|\|)\s*", line):
                    words = shlex.split(part.replace("'", "").replace('"', ""), comments=True)
                    while words and "=" in words[0] and not words[0].startswith("-"):
                        words = words[1:]  # ENV=value electra ...
                    if words[:1] == ["electra"]:
                        found.append((page.relative_to(REPO).as_posix(), words[1:]))
    return found


def test_shown_commands_name_real_commands_and_flags():
    import argparse

    from electra.app.cli import build_parser

    parser = build_parser()
    shown = shown_commands()
    assert len(shown) > 40
    bad = []
    for page, words in shown:
        command = parser
        path = []
        while True:
            nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
            if not nested or not words or words[0] not in nested[0].choices:
                break
            path.append(words[0])
            command = nested[0].choices[words.pop(0)]
        if command is parser and words and not words[0].startswith("-"):
            bad.append(f"{page}: no command {words[0]!r}")
            continue
        options = {option for action in command._actions for option in action.option_strings}
        for word in words:
            flag = word.split("=", 1)[0]
            if flag.startswith("--") and flag not in options:
                bad.append(f"{page}: electra {' '.join(path)} has no {flag}")
    assert not bad, "\n".join(bad)


def test_marked_python_blocks_run():
    blocks = [
        (page, body)
        for page in pages()
        for lang, body, marked in code_blocks(page.read_text())
        if marked and lang == "python"
    ]
    assert blocks, "docs/finetuning/glue.md marks its metric snippet to run"
    for page, body in blocks:
        # Each statement whose comment shows a value (`# {'accuracy': 0.75, ...}`) must give that value.
        checks = "".join(
            f"assert {code.strip()} == {ast.literal_eval(shown.strip())!r}, {code.strip()!r}\n"
            for code, shown in re.findall(r"(?m)^([^#=\n]+\))\s+#\s*(\{.*\})$", body)
        )
        done = subprocess.run(
            [sys.executable, "-c", body + "\n" + checks],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{page.relative_to(REPO)}:\n{body}\n{done.stderr}"


def test_marked_bash_blocks_run(tmp_path):
    """The rescoring recipe, on two small n-best lists and a corpus written here (DIR)."""
    blocks = [
        body
        for page in pages()
        for lang, body, marked in code_blocks(page.read_text())
        if marked and lang == "bash"
    ]
    assert blocks, "docs/results/rescoring.md marks its n-gram recipe to run"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the cat sat down on the mat.\n\na dog ran far away.\n\nthe cat ran.\n")
    lists = {
        "u1": {
            "hyp_1": {"score": -10.0, "text": "the cat sat down on the mat"},
            "hyp_2": {"score": -9.5, "text": "the cat sat town on the mat"},
            "ref": "the cat sat down on the mat",
        },
        "u2": {
            "hyp_1": {"score": -9.0, "text": "a dog ran far away"},
            "hyp_2": {"score": -8.0, "text": "a dog ran fara way"},
            "ref": "a dog ran far away",
        },
    }
    for name in ("dev.json", "test.json"):
        (tmp_path / name).write_text(json.dumps(lists))
    for body in blocks:
        script = body.replace("\\\n", " ").replace("DIR", str(corpus))
        script = re.sub(r"(?m)^electra ", f"{sys.executable} -m electra ", script)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{body}\n{done.stdout}\n{done.stderr}"
    report = json.loads((tmp_path / "rescored-ngram" / "report.json").read_text())
    assert report


def test_malformed_input_table_lists_every_case():
    """docs/reliability.md holds `python -m tests.test_malformed_inputs`'s table: one row per case the suite tries."""
    from tests.test_malformed_inputs import CASES

    page = (DOCS / "reliability.md").read_text()
    table = page.split("| input | the command's answer (stderr, exit 2) |", 1)[1].split("\n\n", 1)[0]
    labels = [row.split(" | ", 1)[0].removeprefix("| ") for row in table.strip().splitlines()[1:]]
    assert labels == [case[0] for case in CASES]
    for row, (_, _, fragment) in zip(table.strip().splitlines()[1:], CASES):
        assert " ".join(fragment.split()) in " ".join(row.split()), row


def test_example_commands_run(tmp_path):
    """The blocks marked to run on examples/ (docs/data.md, the rescoring recipes), with `runs/tiny-electra` a micro
    pretraining run made here as the first command makes its own (an export with a discriminator to fine-tune and a
    generator to score with): every command finishes and writes its output (the example files are in the layouts
    the pages state)."""
    from tests.conftest import MICRO, SAMPLE_TEXT

    blocks = [
        body
        for page in pages()
        for lang, body, marked in code_blocks(page.read_text(), EXAMPLES_MARK)
        if marked and lang == "bash"
    ]
    assert blocks, "docs/data.md marks its commands on examples/ to run"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(12):
        (corpus / f"doc{i:02d}.txt").write_text(SAMPLE_TEXT * 6)
    settings = {**MICRO, "max_position_embeddings": 512}  # room for SQuAD's and tagging's default lengths
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    pretrain = [sys.executable, "-m", "electra", "pretrain", "--size", "tiny", "--corpus", str(corpus)]
    pretrain += ["--output", "runs/tiny-electra", "--no-progress", "--report-to", "csv"]
    pretrain += [word for key, value in settings.items() for word in ("--set", f"{key}={value}")]
    done = subprocess.run(pretrain, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (tmp_path / "examples").symlink_to(REPO / "examples")
    for body in blocks:
        script = re.sub(r"(?m)^electra ", f"{sys.executable} -m electra ", body.replace("\\\n", " "))
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert done.returncode == 0, f"{body}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        for output in re.findall(r"--(?:output|out) (\S+)", body):
            written = tmp_path / output  # a folder, or one file (`electra score --output`)
            assert written.is_file() or (written.is_dir() and any(written.iterdir())), (
                f"{output}: nothing written"
            )


# Words about how the work behind the software was organised, not about the software (the pages speak to users).
ORGANISATION_WORDS = re.compile(
    r"\b(issues?|sessions?|tickets?|lent|borrowed|agents?)\b|\(#\d+|\.\./shared\b", re.IGNORECASE
)


def test_pages_speak_of_the_software():
    """No page (README, every docs page, the histories included) speaks of who worked when, on which ticket or on
    which borrowed machine, or names a path under ../shared that users do not have."""
    found = []
    for page in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for match in ORGANISATION_WORDS.finditer(line):
                found.append(f"{page.relative_to(REPO)}:{number}: {match.group(0)!r} in {line.strip()[:100]}")
    assert not found, "\n".join(found)
