"""ESPnet2's decoding folder: `1best_recog/`, `2best_recog/`, ... (or a `logdir` of `output.N/` jobs) read into
utterances, and the re-ranked 1-best written back as `text` and `score`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import write_text_atomically
from electra.pll.nbest import Hypothesis, Utterance
from electra.pll.nbest_formats.common import (
    is_number_text,
    keyed_lines,
    keyed_text,
    parse_number,
)

ESPNET_TEXT_FILES = ("text", "token", "token_int", "text_nospecial")


_ESPNET_RANK = re.compile(r"(\d+)best_recog")


def espnet_jobs(path: Path) -> list[Path]:
    """The folders holding `Nbest_recog/`: `path` itself, or the `output.N/` of an ESPnet logdir."""
    if any(_ESPNET_RANK.fullmatch(p.name) and p.is_dir() for p in path.iterdir()):
        return [path]
    jobs = [p for p in path.glob("output.*") if p.is_dir() and (p / "1best_recog").is_dir()]
    return sorted(jobs, key=lambda p: (len(p.name), p.name))


def read_espnet(path: Path, ref: Path | None) -> list[Utterance]:
    jobs = espnet_jobs(path)
    if not jobs:
        raise UserError(
            f"{path}: no 1best_recog/ folder (nor output.N/1best_recog/); give the folder ESPnet's asr_inference "
            "wrote (--output_dir), or its logdir."
        )
    utts: list[Utterance] = []
    seen: dict[str, Path] = {}
    for job in jobs:
        for utt in _read_espnet_job(job):
            if utt.id in seen:
                raise UserError(
                    f"{job}: utterance {utt.id!r} is also in {seen[utt.id]}; give each utterance once."
                )
            seen[utt.id] = job
            utts.append(utt)
    return utts


def _read_espnet_job(job: Path) -> list[Utterance]:
    ranks = sorted(
        (int(m.group(1)), p) for p in job.iterdir() if p.is_dir() and (m := _ESPNET_RANK.fullmatch(p.name))
    )
    if not ranks or ranks[0][0] != 1:
        raise UserError(f"{job}: no 1best_recog/ folder; ESPnet numbers its n-best folders from 1best_recog.")
    expected = "ESPnet's `UTT value` lines"
    order: list[str] = []
    hyps: dict[str, list[Hypothesis]] = {}
    for rank, folder in ranks:
        text_file, score_file = folder / "text", folder / "score"
        if not text_file.is_file():
            raise UserError(
                f"{folder}: no 'text' file (a model decoded without a token list writes only 'token'); "
                "decode with the token list so that ESPnet writes the text."
            )
        texts = keyed_lines(text_file, "ESPnet text file", expected)
        if not score_file.is_file():
            raise UserError(f"{folder}: no 'score' file beside 'text'; each hypothesis needs ESPnet's score.")
        scores = keyed_lines(score_file, "ESPnet score file", expected)
        features = _espnet_features(folder)
        for key, (number, text) in texts.items():
            if key not in scores:
                raise UserError(
                    f"{text_file}:{number}: hypothesis {key!r} has no score in {score_file}; give every "
                    "hypothesis its score line (as ESPnet writes them), or leave it out of 'text'."
                )
            line, raw = scores[key]
            extra = {}
            for name, (feature_file, values) in features.items():
                if key not in values:
                    raise UserError(
                        f"{text_file}:{number}: hypothesis {key!r} has no line in {feature_file}; every "
                        "hypothesis needs every numeric field, or remove that file."
                    )
                extra[name] = values[key]
            if rank == 1:
                order.append(key)
                hyps[key] = []
            elif key not in hyps:
                raise UserError(
                    f"{text_file}:{number}: utterance {key!r} has a {rank}-best hypothesis but none in "
                    f"{ranks[0][1] / 'text'}; an utterance's hypotheses start at 1best_recog."
                )
            score = parse_number(score_file, line, raw, f"the score of {key!r}")
            hyps[key].append(Hypothesis(text=text, score=score, key=f"{rank}best_recog", extra=extra))
        for key, (line, _) in scores.items():
            if key not in texts:
                raise UserError(
                    f"{score_file}:{line}: {key!r} has a score but no hypothesis in {text_file}; give its text, "
                    "or leave its score out."
                )
    return [Utterance(id=key, ref=None, hyps=hyps[key]) for key in order]


def _espnet_features(folder: Path) -> dict[str, tuple[Path, dict[str, float]]]:
    """Each further file of `KEY number` lines in an n-best folder (ESPnet's `rtf`, say): a feature of its name.
    Files whose first value is not a number (tokens, intermediate CTC texts) are not features and are skipped."""
    features = {}
    for file in sorted(folder.iterdir()):
        if not file.is_file() or file.name in (*ESPNET_TEXT_FILES, "score") or "." in file.name:
            continue
        values = keyed_lines(file, "ESPnet n-best file", "ESPnet's `UTT value` lines")
        first = next(iter(values.values()), None)
        if first is None or not is_number_text(first[1]):
            continue
        features[file.name] = (
            file,
            {k: parse_number(file, n, raw, f"{file.name} of {k!r}") for k, (n, raw) in values.items()},
        )
    return features


def write_espnet(stem: Path, chosen: Sequence[tuple[Utterance, Hypothesis, float]]) -> Path:
    folder = espnet_best(stem).parent
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomically(folder / "score", keyed_text([(u.id, repr(s)) for u, _, s in chosen]))
    write_text_atomically(folder / "text", keyed_text([(u.id, h.text) for u, h, _ in chosen]))
    return folder / "text"


def espnet_best(stem: Path) -> Path:
    return stem / "1best_recog" / "text"
