"""Kaldi's n-best archive (`words_text` with `acwt`, `lmwt.withlm` and further `lmwt.X` costs) read into
utterances, and the re-ranked 1-best written back as `text`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import write_text_atomically
from electra.pll.nbest import Hypothesis, Utterance
from electra.pll.nbest_formats.common import (
    keyed_lines,
    keyed_text,
    parse_number,
)

KALDI_ACOUSTIC_SCALE = 1.0 / 12.0  # steps/rnnlmrescore.sh's default --inv-acwt 12


def _kaldi_cost_files(path: Path) -> list[tuple[Path, str]]:
    """(cost file, feature name) of a Kaldi n-best archive: acwt -> am_score, lmwt.withlm -> lm_score, lmwt.X ->
    X_score."""
    files = [(path / "acwt", "am_score"), (path / "lmwt.withlm", "lm_score")]
    for file in sorted(path.glob("lmwt.*")):
        if file.name != "lmwt.withlm" and file.is_file():
            files.append((file, file.name.removeprefix("lmwt.") + "_score"))
    return files


def read_kaldi(path: Path, ref: Path | None) -> list[Utterance]:
    words_file = path / "words_text"
    if not words_file.is_file():
        raise UserError(
            f"{path}: no words_text (the n-best words keyed UTT-N); make it from nbest-to-linear's words with "
            "`utils/int2sym.pl -f 2- words.txt < words > words_text`."
        )
    expected = "Kaldi's `UTT-N value` lines"
    words = keyed_lines(words_file, "Kaldi n-best words", expected)
    costs = []
    for file, name in _kaldi_cost_files(path):
        if not file.is_file():
            raise UserError(
                f"{path}: no {file.name} beside words_text; nbest-to-linear writes the acoustic costs (acwt) and "
                "the LM costs (lmwt.withlm) that give each hypothesis its score."
            )
        costs.append((file, name, keyed_lines(file, "Kaldi cost file", expected)))
    order: list[str] = []
    by_utt: dict[str, list[tuple[int, Hypothesis]]] = {}
    for key, (number, text) in words.items():
        utt, _, rank = key.rpartition("-")
        if not utt or not rank.isdigit() or int(rank) < 1:
            raise UserError(
                f"{words_file}:{number}: key {key!r} is not UTT-N (an utterance id, a hyphen and the rank from "
                "1), which lattice-to-nbest writes."
            )
        extra = {}
        for file, name, values in costs:
            if key not in values:
                raise UserError(
                    f"{words_file}:{number}: hypothesis {key!r} has no cost in {file}; give every hypothesis "
                    "its line there (nbest-to-linear writes one per hypothesis)."
                )
            line, raw = values[key]
            extra[name] = -parse_number(file, line, raw, f"the cost of {key!r}")
        score = extra["am_score"] * KALDI_ACOUSTIC_SCALE + extra["lm_score"]
        if utt not in by_utt:
            order.append(utt)
            by_utt[utt] = []
        by_utt[utt].append((int(rank), Hypothesis(text=text, score=score, key=key, extra=extra)))
    for file, _, values in costs:
        for key, (line, _) in values.items():
            if key not in words:
                raise UserError(
                    f"{file}:{line}: {key!r} has a cost but no words in {words_file}; give its words, or leave "
                    "its cost out."
                )
    return [
        Utterance(id=u, ref=None, hyps=[h for _, h in sorted(by_utt[u], key=lambda p: p[0])]) for u in order
    ]


def write_kaldi(stem: Path, chosen: Sequence[tuple[Utterance, Hypothesis, float]]) -> Path:
    path = kaldi_best(stem)
    write_text_atomically(path, keyed_text([(u.id, h.text) for u, h, _ in chosen]))
    return path


def kaldi_best(stem: Path) -> Path:
    return stem.with_name(stem.name + ".text")
