"""`raise` statements per 1,000 source lines in the algorithm floors, with the door modules counted apart.

The house rule is "check input once, at the door": a value is checked where it enters (a settings declaration, a
file reader, the run-input check, a command-line module) and the code below trusts it. This script measures how
well the algorithm floors keep that rule, so the figure can be compared between commits:

    python bench/raise_density.py                # a table per floor, of the working tree
    python bench/raise_density.py --modules      # and one row per module
    python bench/raise_density.py --rev 793a47b  # the files as committed at a revision (git show)

What is counted. A *source line* is a non-blank line of a `.py` file (docstrings and comments included, as a
reader meets them); a *raise site* is one `raise` statement found by parsing the file (`ast.Raise`), so a `raise`
inside a string or a comment does not count, and a bare re-raise does. Tests, docs and bench/ are not counted.

The floors:

- objectives and training: `electra/objectives/`, `electra/training/`, `electra/nn/`.
- consumers: `glue/`, `squad/`, `tagging/`, `pll/`, `tlm/`, `probes/`.

The doors, counted in their own row and left out of the floor's figure, because checking input is their job:

- command-line modules (`cli.py`, `*_cli.py`): flag handling, the command line's side of the door;
- settings declarations (`settings.py`, `tagging/cvt_settings.py`, `tlm/declared.py`): each setting's type, range
  and choices, checked once when the settings are made, from flags or from Python;
- run inputs (`electra/training/run_folder.py`, `glue/inputs.py`, `squad/inputs.py`, `probes/inputs.py`,
  `pll/rescore_inputs.py`, `pll/model_dirs.py`, `tlm/outputs.py`): the paths, model folder, output folder and
  resume record a run reads, checked before anything is written or loaded;
- file readers (`squad/data.py`, `tagging/conll.py`, `tagging/dependencies.py`, `tagging/word_vectors.py`,
  `pll/nbest.py`, `pll/nbest_formats/`, `pll/score_files.py`, `tlm/tasks.py`, `probes/data.py`,
  `glue/teachers.py`, the teacher files `--save-train-logits` writes and `--teachers` reads, `tlm/saved_index.py`,
  a saved BM25 index opened and checked, and
  `electra/training/continued.py`, which reads the `--init-from` checkpoint: its config, tokenizer and weights):
  a malformed file is refused where it is read, naming the file and line.

Everything else in a floor is algorithm code, and its figure is the one the rule is about.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FLOORS: dict[str, tuple[str, ...]] = {
    "objectives and training": ("electra/objectives", "electra/training", "electra/nn"),
    "consumers": ("glue", "squad", "tagging", "pll", "tlm", "probes"),
}

SETTINGS = {"tagging/cvt_settings.py", "tlm/declared.py"}
RUN_INPUTS = {
    "electra/training/run_folder.py",
    "glue/inputs.py",
    "pll/rescore_inputs.py",
    "pll/model_dirs.py",
    "probes/inputs.py",
    "squad/inputs.py",
    "tlm/outputs.py",
}
READERS = {
    "squad/data.py",
    "tagging/conll.py",
    "tagging/dependencies.py",
    "pll/nbest.py",
    "pll/score_files.py",
    "glue/teachers.py",
    "tlm/saved_index.py",
    "tlm/tasks.py",
    "probes/data.py",
    "tagging/word_vectors.py",
    "electra/training/continued.py",
}


READER_FOLDERS = ("pll/nbest_formats/",)  # one reader and writer per n-best layout


def door_kind(path: str) -> str | None:
    """Which kind of door a module (a path relative to the repository) is, or None for algorithm code."""
    name = path.rsplit("/", 1)[-1]
    if name == "cli.py" or name.endswith("_cli.py"):
        return "command line"
    if name == "settings.py" or path in SETTINGS:
        return "settings"
    if path in RUN_INPUTS:
        return "run inputs"
    if path in READERS or any(path.startswith(folder) for folder in READER_FOLDERS):
        return "reader"
    return None


@dataclass
class Count:
    lines: int = 0
    raises: int = 0

    def add(self, other: Count) -> None:
        self.lines += other.lines
        self.raises += other.raises

    @property
    def per_1000(self) -> float:
        return 1000.0 * self.raises / self.lines if self.lines else 0.0


def count_text(text: str, name: str) -> Count:
    """Non-blank lines and `raise` statements of one source file's text."""
    lines = sum(1 for line in text.splitlines() if line.strip())
    raises = sum(isinstance(node, ast.Raise) for node in ast.walk(ast.parse(text, name)))
    return Count(lines, raises)


def sources(folder: str, rev: str | None) -> Iterator[tuple[str, str]]:
    """(path relative to the repository, text) of each `.py` file directly in `folder`: in the working tree, or
    as committed at `rev` (so that figures do not depend on files being edited)."""
    if rev is None:
        for path in sorted((ROOT / folder).glob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")
        return
    listing = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:{folder}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for name in sorted(n for n in listing.stdout.split() if n.endswith(".py")):
        shown = subprocess.run(
            ["git", "show", f"{rev}:{folder}/{name}"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        yield f"{folder}/{name}", shown.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", action="store_true", help="also print one row per module")
    parser.add_argument(
        "--rev", help="count the files as committed at this git revision, not the working tree"
    )
    args = parser.parse_args()
    print(f"{'floor / module':<44} {'kind':<13} {'lines':>6} {'raises':>6} {'/1,000':>7}")
    for floor, folders in FLOORS.items():
        algorithm, doors, rows = Count(), Count(), []
        for folder in folders:
            for rel, text in sources(folder, args.rev):
                count, kind = count_text(text, rel), door_kind(rel)
                (doors if kind else algorithm).add(count)
                rows.append((rel, kind or "algorithm", count))
        if args.modules:
            for rel, kind, count in rows:
                print(f"  {rel:<42} {kind:<13} {count.lines:>6} {count.raises:>6} {count.per_1000:>7.1f}")
        everything = Count(algorithm.lines + doors.lines, algorithm.raises + doors.raises)
        for label, count in (("algorithm", algorithm), ("doors", doors), ("all", everything)):
            print(f"{floor:<44} {label:<13} {count.lines:>6} {count.raises:>6} {count.per_1000:>7.1f}")


if __name__ == "__main__":
    main()
