"""`electra nbest`: n-best lists decoded from 16 kHz wav files with pocketsphinx (the optional ASR extra), with
each utterance's reference where a transcription names it, and the lists' 1-best and oracle WER.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from electra.core.errors import UserError
from electra.core.files import require_file
from electra.core.overwrite import check_output_file


def register(subparsers: argparse._SubParsersAction) -> None:
    nbest = subparsers.add_parser(
        "nbest",
        help="make n-best lists from 16 kHz wav files with pocketsphinx",
        description="Needs the optional ASR extra: pip install 'electra[asr]'.",
    )
    nbest.add_argument("--audio", required=True, help="directory of 16 kHz mono wav files")
    nbest.add_argument("--output", required=True, help="n-best JSON to write (list format)")
    nbest.add_argument("--nbest", type=int, default=20, help="distinct hypotheses per utterance")
    nbest.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    nbest.add_argument(
        "--refs",
        help="references: sphinx 'transcription' file or 'utt_id words' lines "
        "(default: AUDIO/transcription when present)",
    )
    nbest.set_defaults(func=run_nbest)


def run_nbest(args: argparse.Namespace) -> int:
    from electra.pll.asr import decode_nbest, read_transcription
    from electra.pll.nbest import write_nbest
    from electra.pll.rescore import first_best, oracle_best
    from electra.pll.wer import corpus_wer

    if args.nbest < 1:
        raise UserError("--nbest must be at least 1.")
    refs_path = Path(args.refs) if args.refs else Path(args.audio) / "transcription"
    check_output_file(args.output, args.overwrite, example="nbest.json", reads={"--refs": str(refs_path)})
    if args.refs:
        require_file(refs_path, "references file")
    audio = Path(args.audio)
    if not audio.is_dir():
        raise UserError(f"{audio}: audio directory does not exist; give the folder of the .wav files.")
    stems = [wav.stem for wav in sorted(audio.glob("*.wav"))]
    if not stems:
        raise UserError(f"{audio}: no .wav files.")
    refs = read_transcription(refs_path) if refs_path.is_file() else None
    if refs is not None:
        _check_refs_match(refs_path, refs, stems)
    utts = decode_nbest(args.audio, args.nbest, refs)
    write_nbest(args.output, utts, "list", lam=0.0)
    print(f"{len(utts)} utterances, {sum(len(u.hyps) for u in utts)} hypotheses -> {args.output}")
    with_refs = [u for u in utts if u.ref is not None]
    if with_refs:
        r = [u.ref or "" for u in with_refs]
        first = corpus_wer(r, [first_best(u) for u in with_refs])
        oracle = corpus_wer(r, [oracle_best(u) for u in with_refs])
        print(
            f"WER over {len(with_refs)} referenced utterances: 1-best {100 * first:.2f}%, "
            f"oracle {100 * oracle:.2f}%"
        )
    return 0


def _check_refs_match(path: Path, refs: dict[str, str], stems: Sequence[str]) -> None:
    """References are found by the wav file's name, so a transcription whose ids match none of the files
    (another corpus, ids with a speaker prefix) is refused before the decoding, which would write lists without
    a single 'ref' and print no WER. Files without a reference are named on standard error."""
    missing = [stem for stem in stems if stem not in refs]
    if len(missing) == len(stems):
        first = next(iter(refs), None)
        theirs = f" (its first is {first!r})" if first is not None else " (it holds none)"
        raise UserError(
            f"{path}: none of its utterance ids{theirs} is the name of a .wav file (the first is "
            f"{stems[0]!r}); the id is the wav file's name without .wav: give the references of these files."
        )
    if missing:
        print(
            f"warning: {path}: {len(missing)} of {len(stems)} .wav files have no reference (first: "
            f"{missing[0]!r}); their lists get no 'ref' and the WER leaves them out",
            file=sys.stderr,
        )
