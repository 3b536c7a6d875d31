"""Rebuild the example n-best lists of this folder from asr_tts_wiki's pocketsphinx lists (JSON).

    python examples/nbest/make_examples.py /path/to/asr_tts_wiki

The first 6 utterances of dev.json and of test.json, each cut to its first 10 hypotheses, written in every layout
`electra rescore --format` reads: the JSON list itself, an ESPnet2 decoding folder, a Kaldi n-best archive, NeMo's
beams file with its manifest, Whisper-style JSON lines and a TSV table. The same hypotheses and scores in each, so
that rescoring any of them gives the JSON list's WER.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

UTTERANCES, HYPOTHESES = 6, 10
HERE = Path(__file__).resolve().parent


def main(source: Path) -> None:
    for split in ("dev", "test"):
        data = json.loads((source / f"{split}.json").read_text(encoding="utf-8"))[:UTTERANCES]
        utts = [
            {
                "id": u["id"],
                "ref": u["ref"],
                "duration": u["duration_s"],
                "hyps": [
                    {k: h[k] for k in ("text", "score", "am_score", "lm_score")}
                    for h in u["hyps"][:HYPOTHESES]
                ],
            }
            for u in data
        ]
        write_json(split, utts)
        write_espnet(split, utts)
        write_kaldi(split, utts)
        write_nemo(split, utts)
        write_whisper(split, utts)
        write_tsv(split, utts)


def put(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def write_json(split: str, utts: list[dict]) -> None:
    records = [{"id": u["id"], "ref": u["ref"], "hyps": u["hyps"]} for u in utts]
    put(HERE / "json" / f"{split}.json", [json.dumps(records, indent=1)])


def write_espnet(split: str, utts: list[dict]) -> None:
    """asr_inference.py's folders: Nbest_recog/{text,score}, the score as ESPnet prints a tensor."""
    for rank in range(1, HYPOTHESES + 1):
        folder = HERE / "espnet" / split / f"{rank}best_recog"
        put(folder / "text", [f"{u['id']} {u['hyps'][rank - 1]['text']}" for u in utts])
        put(folder / "score", [f"{u['id']} tensor({u['hyps'][rank - 1]['score']:.4f})" for u in utts])
    put(HERE / "espnet" / "data" / split / "text", [f"{u['id']} {u['ref']}" for u in utts])


def write_kaldi(split: str, utts: list[dict]) -> None:
    """nbest-to-linear's archives: words_text keyed UTT-N, acoustic and LM costs (negated log scores)."""
    folder = HERE / "kaldi" / split
    keyed = [(f"{u['id']}-{n}", h) for u in utts for n, h in enumerate(u["hyps"], start=1)]
    put(folder / "words_text", [f"{key} {h['text']}" for key, h in keyed])
    put(folder / "acwt", [f"{key} {-h['am_score']!r}" for key, h in keyed])
    put(folder / "lmwt.withlm", [f"{key} {-h['lm_score']!r}" for key, h in keyed])
    put(HERE / "kaldi" / "data" / split / "text", [f"{u['id']} {u['ref']}" for u in utts])


def write_nemo(split: str, utts: list[dict]) -> None:
    """eval_beamsearch_ngram's beams file (text<TAB>score, width lines per utterance) and its input manifest."""
    folder = HERE / "nemo" / split
    put(
        folder / f"preds_out_width{HYPOTHESES}_alpha1.0_beta0.0.tsv",
        [f"{h['text']}\t{h['score']!r}" for u in utts for h in u["hyps"]],
    )
    manifest = [
        json.dumps({"audio_filepath": f"audio/{u['id']}.wav", "duration": u["duration"], "text": u["ref"]})
        for u in utts
    ]
    put(HERE / "nemo" / f"{split}_manifest.json", manifest)


def write_whisper(split: str, utts: list[dict]) -> None:
    """generate()'s beams as JSON lines: decoded sequences, their scores, and further per-sequence features."""
    lines = []
    for u in utts:
        record = {
            "id": u["id"],
            "ref": u["ref"],
            "sequences": [h["text"] for h in u["hyps"]],
            "sequences_scores": [h["score"] for h in u["hyps"]],
            "am_score": [h["am_score"] for h in u["hyps"]],
            "lm_score": [h["lm_score"] for h in u["hyps"]],
        }
        lines.append(json.dumps(record))
    put(HERE / "whisper" / f"{split}.jsonl", lines)


def write_tsv(split: str, utts: list[dict]) -> None:
    rows = ["utt\ttext\tscore\tam_score\tlm_score\tref"]
    for u in utts:
        rows += [
            f"{u['id']}\t{h['text']}\t{h['score']!r}\t{h['am_score']!r}\t{h['lm_score']!r}\t{u['ref']}"
            for h in u["hyps"]
        ]
    put(HERE / "tsv" / f"{split}.tsv", rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
