"""How many of the project's files a reader meets from a command to its result, measured by running the command.

A newcomer follows a command from its flags to what it writes; every file whose code runs on the way is a file
to open. This script runs three commands on small generated inputs under a profiler and counts:

- **files**: project files (tests excluded) in which a function runs while the command works. Code that runs
  while a module is imported (module bodies, class bodies, the decorators and `setting()` declarations in them)
  is not the command's path and is not counted;
- **moves**: distinct caller-file -> callee-file pairs. The caller of a call is the nearest project function on
  the stack, so the engine calling a model through `nn.Module.__call__` is a move from the engine's file;
- **up**: moves from a lower floor of the house to a higher one (floors as `tests/test_layers.py` declares
  them), each listed: these run code handed down (a task's hooks, a model to measure, a callback);
- **across**: moves from one consumer folder into another (`glue/` <- `tagging/`).

The commands: `python pretrain.py --size tiny --max-steps 3` (the embedded corpus), `electra rescore` of two
generated n-best lists with a one-layer masked LM, and `electra tag --cvt` of generated chunking files with a
one-layer encoder and a few lines of unlabeled text (4 updates).

    python bench/command_walk.py               # the working tree
    python bench/command_walk.py --rev 88b3797 # a revision, as committed
    python bench/command_walk.py --files       # and each command's files, in the order first met

Each tree is installed with pip into a scratch folder (`pip install --no-deps --target`) and every command runs
from a folder with no `electra/` in it, so the measured code is the installed package as a user gets it. It takes
about two minutes on 2 CPU cores and needs no data or network.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _layers():
    spec = importlib.util.spec_from_file_location("test_layers", REPO / "tests" / "test_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- inputs ---------------------------------------------------------------------------------------------------

WORDS = {"DT": ["the", "a"], "NN": ["cat", "dog", "bird", "fish"], "VB": ["runs", "sees", "sat", "ran"]}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sum(WORDS.values(), []), "sad", "rang", "."]


def write_inputs(folder: Path) -> None:
    """A one-layer masked LM and encoder over VOCAB, n-best lists, column files and unlabeled text."""
    import torch
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraModel, ElectraTokenizerFast
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    tokenizer = ElectraTokenizerFast(vocab={w: i for i, w in enumerate(VOCAB)})
    shape = dict(
        vocab_size=len(VOCAB),
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    for name, model in (("mlm", ElectraForMaskedLM), ("encoder", ElectraModel)):
        model(ElectraConfig(**shape)).save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
    hyps = [{"text": "the cat sad", "score": -1.0}, {"text": "the cat sat", "score": -1.2}]
    nbest = [{"id": f"u{i}", "ref": "the cat sat", "hyps": hyps} for i in range(3)]
    for name in ("dev.json", "test.json"):
        (folder / name).write_text(json.dumps(nbest), encoding="utf-8")
    rng = random.Random(0)
    for name, sentences in (("train.txt", 40), ("dev.txt", 10)):
        lines = []
        for _ in range(sentences):
            words = [(rng.choice(WORDS["DT"]), "B-NP"), (rng.choice(WORDS["NN"]), "I-NP")]
            lines += [f"{w} X {t}" for w, t in [*words, (rng.choice(WORDS["VB"]), "B-VP")]] + [""]
        (folder / name).write_text("\n".join(lines), encoding="utf-8")
    (folder / "raw.txt").write_text("the cat sat . a dog ran .\n\nthe bird sees a fish .\n", encoding="utf-8")


def commands(inputs: Path, out: Path) -> dict[str, list[str]]:
    """Each command's argv; a word is split before its folders are filled in, so a path may hold spaces."""
    lines = {
        "pretrain --size tiny": "pretrain.py --size tiny --max-steps 3 --output {out}/p",
        "rescore": "-m electra rescore --model {inputs}/mlm --dev {inputs}/dev.json --test {inputs}/test.json "
        "--output-dir {out}/r",
        "tag --cvt": "-m electra tag --model {inputs}/encoder --train {inputs}/train.txt --dev {inputs}/dev.txt "
        "--cvt --unlabeled {inputs}/raw.txt --max-steps 4 --batch-size 8 --output {out}/t",
    }
    return {name: [w.format(inputs=inputs, out=out) for w in line.split()] for name, line in lines.items()}


# --- the profiler (runs inside the measured command's process) -----------------------------------------------


def trace(site: Path, source: Path, report: Path, argv: list[str]) -> None:
    """Run `argv` (`pretrain.py ...` from `source`, or `-m electra ...`) and write what it ran to `report`."""
    import runpy
    import threading

    site = site.resolve()
    named: dict[str, str | None] = {}

    def module_of(code) -> str | None:
        """The dotted module a code object belongs to, when it is the project's (the entry script included)."""
        path = code.co_filename
        if path not in named:
            resolved = Path(path).resolve()
            if resolved == (source / "pretrain.py").resolve():
                named[path] = "pretrain"
            elif resolved.is_relative_to(site) and resolved.suffix == ".py":
                parts = resolved.relative_to(site).with_suffix("").parts
                named[path] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                if not named[path].startswith("electra"):
                    named[path] = None
            else:
                named[path] = None
        return named[path]

    files: dict[str, int] = {}
    moves: dict[tuple[str, str], int] = {}

    def profile(frame, event, arg) -> None:
        if event != "call":
            return
        callee = module_of(frame.f_code)
        if callee is None or frame.f_code.co_name == "<module>":
            return
        caller, bodies, outer = None, 0, frame.f_back
        while outer is not None:
            name = module_of(outer.f_code)
            if name is not None:
                if outer.f_code.co_name == "<module>":
                    bodies += 1
                elif caller is None:
                    caller = name
            outer = outer.f_back
        if (
            bodies > 1
        ):  # a module is being imported: its body runs for whoever imports it, not for the command
            return
        files.setdefault(callee, len(files))
        if caller is not None and caller != callee:
            moves[(caller, callee)] = moves.get((caller, callee), 0) + 1

    sys.argv = argv[1:] if argv[0] == "-m" else argv
    threading.setprofile(profile)
    sys.setprofile(profile)
    status = 0
    try:
        if argv[0] == "-m":
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(str(source / argv[0]), run_name="__main__")
    except SystemExit as stop:
        status = stop.code or 0
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    report.write_text(
        json.dumps(
            {
                "status": status,
                "files": sorted(files, key=files.get),
                "moves": [[*k, n] for k, n in moves.items()],
            }
        )
    )


# --- measuring a tree ------------------------------------------------------------------------------------------


def install(rev: str | None, scratch: Path) -> tuple[Path, Path]:
    """(the tree's source folder, the folder pip installed it into)."""
    source = scratch / "source"
    if rev is None:
        source = REPO
    else:
        source.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    site = scratch / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target"]
    done = subprocess.run([*pip, str(site), str(source)], cwd=scratch, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"pip could not install {rev or 'the working tree'}:\n{done.stderr[-3000:]}")
    return source, site


def measure(rev: str | None) -> dict[str, dict]:
    layers = _layers()
    with tempfile.TemporaryDirectory(prefix="command-walk-") as folder:
        scratch = Path(folder)
        source, site = install(rev, scratch)
        inputs, out, run = scratch / "inputs", scratch / "out", scratch / "run"
        for made in (inputs, out, run):
            made.mkdir()
        write_inputs(inputs)
        env = {**os.environ, "PYTHONPATH": str(site), "TQDM_DISABLE": "1", "ELECTRA_REPORT_TO": "csv"}
        results = {}
        for name, argv in commands(inputs, out).items():
            report = scratch / f"{name.split()[0]}.json"
            here = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--trace",
                str(site),
                str(source),
                str(report),
            ]
            done = subprocess.run([*here, "--", *argv], cwd=run, env=env, capture_output=True, text=True)
            found = json.loads(report.read_text()) if report.is_file() else {"status": done.returncode}
            if done.returncode or found["status"]:
                raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
            floor = {m: layers.floor_of(m) for m in found["files"]}
            folder_of = {m: layers.folder_of(m) for m in found["files"]}
            consumer = layers.FLOOR_NAMES.index("consumers")
            pairs = [(a, b) for a, b, _ in found["moves"] if a in floor and b in floor]
            results[name] = {
                "files": found["files"],
                "moves": len(pairs),
                "up": [(a, b) for a, b in pairs if floor[b] > floor[a]],
                "across": [
                    (a, b)
                    for a, b in pairs
                    if floor[a] == floor[b] == consumer and folder_of[a] != folder_of[b]
                ],
            }
        return results


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--trace":
        site, source, report, _, *argv = sys.argv[2:]  # _: the `--` before the command
        trace(Path(site), Path(source), Path(report), argv)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", help="measure this revision as committed (default: the working tree)")
    parser.add_argument("--files", action="store_true", help="list each command's files too")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", args.rev or "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"tree: {args.rev or 'working tree'} ({commit})")
    print(f"{'command':24s} {'files':>5s} {'moves':>5s} {'up':>3s} {'across':>6s}")
    for name, found in measure(args.rev).items():
        print(
            f"{name:24s} {len(found['files']):5d} {found['moves']:5d} {len(found['up']):3d} {len(found['across']):6d}"
        )
        for a, b in found["up"]:
            print(f"    up:     {a} -> {b}")
        for a, b in found["across"]:
            print(f"    across: {a} -> {b}")
        if args.files:
            print("    files: " + " ".join(found["files"]))


if __name__ == "__main__":
    main()
