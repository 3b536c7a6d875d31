import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from electra.core.errors import UserError
from electra.data.packing import (
    ExampleBuilder,
    ExampleSettings,
    PretrainingCollator,
    ResumableBatchOrder,
    build_pretraining_dataset,
)
from electra.data.tokenization import SPECIAL_TOKENS, load_or_train_tokenizer, load_vocab_tokenizer

CLS, SEP = 101, 102


def _build(settings, documents, seed=0):
    builder = ExampleBuilder(settings, CLS, SEP, random.Random(seed))
    out = []
    for doc in documents:
        for sentence in doc:
            out += builder.add_sentence(sentence)
        out += builder.end_document()
    return out


def _sentences(rng, n):
    return [[rng.randint(1000, 2000) for _ in range(rng.randint(3, 30))] for _ in range(n)]


def test_examples_are_well_formed_and_packed():
    rng = random.Random(1)
    settings = ExampleSettings(max_seq_length=64)
    docs = [_sentences(rng, 40) for _ in range(30)]
    examples = _build(settings, docs)
    total_in = sum(len(s) for d in docs for s in d)
    kept = 0
    for ids, types in examples:
        assert len(ids) <= 64 and len(ids) == len(types)
        assert ids[0] == CLS and ids[-1] == SEP
        seps = [i for i, t in enumerate(ids) if t == SEP]
        assert len(seps) in (1, 2)
        # segment ids: 0 up to and including the first [SEP], 1 after it
        assert types == [0] * (seps[0] + 1) + [1] * (len(ids) - seps[0] - 1)
        kept += len(ids) - 1 - len(seps)
    # Packing wastes little: most tokens survive truncation, and most examples are near full length.
    assert kept / total_in > 0.8  # the reference builder drops what overflows a full example
    assert np.mean([len(ids) for ids, _ in examples]) > 0.8 * 64


def test_single_segment_and_short_fractions_match_the_builder():
    rng = random.Random(2)
    settings = ExampleSettings(max_seq_length=128)
    docs = [_sentences(rng, 400) for _ in range(20)]
    examples = _build(settings, docs, seed=3)
    n = len(examples)
    single = sum(1 for ids, _ in examples if ids.count(SEP) == 1) / n
    assert 0.06 < single < 0.16  # ~10% asked for single segments
    short = sum(1 for ids, _ in examples if len(ids) < 100) / n
    assert 0.02 < short < 0.10  # ~5% aim at a random shorter length


def test_long_sentences_are_split_not_dropped():
    settings = ExampleSettings(max_seq_length=16, single_segment_prob=0.0, short_seq_prob=0.0)
    examples = _build(settings, [[[7, 8], list(range(1000, 1050)), [9]]])
    body = [t for ids, _ in examples for t in ids if t not in (CLS, SEP)]
    assert body == [7, 8, *range(1000, 1050), 9]
    assert all(len(ids) <= 16 for ids, _ in examples)


@pytest.fixture
def tokenizer(small_corpus, tmp_path):
    return load_or_train_tokenizer(None, small_corpus, 600, cache_dir=tmp_path / "tok")


def test_dataset_is_cached_and_rebuilt_when_inputs_change(small_corpus, tokenizer, tmp_path):
    settings = ExampleSettings(max_seq_length=48)
    cache = tmp_path / "cache"
    first = build_pretraining_dataset(small_corpus, tokenizer, settings=settings, cache_dir=cache, num_proc=1)
    assert len(first) > 50 and set(first.column_names) == {"input_ids", "token_type_ids"}
    assert max(len(x) for x in first["input_ids"]) <= 48
    entries = [p for p in cache.iterdir() if not p.name.startswith(".")]
    again = build_pretraining_dataset(small_corpus, tokenizer, settings=settings, cache_dir=cache, num_proc=1)
    assert again["input_ids"] == first["input_ids"]
    assert [p for p in cache.iterdir() if not p.name.startswith(".")] == entries
    # A different length, or an edited corpus, gives a new cache entry.
    build_pretraining_dataset(
        small_corpus, tokenizer, settings=ExampleSettings(max_seq_length=32), cache_dir=cache, num_proc=1
    )
    (small_corpus / "extra.txt").write_text("A brand new document appears here. It has two sentences.")
    build_pretraining_dataset(small_corpus, tokenizer, settings=settings, cache_dir=cache, num_proc=1)
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 3


def test_parallel_build_equals_serial(small_corpus, tokenizer, tmp_path):
    settings = ExampleSettings(max_seq_length=48)
    serial = build_pretraining_dataset(
        small_corpus, tokenizer, settings=settings, cache_dir=tmp_path / "a", num_proc=1
    )
    # Many documents so that two workers really split the work.
    many = tmp_path / "many"
    many.mkdir()
    for i in range(140):
        (many / f"{i:03d}.txt").write_text((small_corpus / "doc00.txt").read_text()[: 300 + i])
    one = build_pretraining_dataset(many, tokenizer, settings=settings, cache_dir=tmp_path / "b", num_proc=1)
    two = build_pretraining_dataset(many, tokenizer, settings=settings, cache_dir=tmp_path / "c", num_proc=2)
    assert len(serial) > 0 and one["input_ids"] == two["input_ids"]


def test_empty_corpus_fails_without_leaving_a_cache(tmp_path, tokenizer):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n")
    cache = tmp_path / "cache"
    with pytest.raises(UserError, match="empty"):
        build_pretraining_dataset(empty, tokenizer, settings=ExampleSettings(), cache_dir=cache)
    assert not cache.exists() or [p for p in cache.iterdir()] == []


def test_vocab_without_specials_is_rejected(tmp_path, shared_data):
    bad = tmp_path / "vocab.txt"
    bad.write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(UserError, match=r"lacks \[CLS\], \[SEP\], \[MASK\]"):
        load_vocab_tokenizer(bad)
    bert = load_vocab_tokenizer(shared_data / "bert_vocab" / "vocab.txt")
    assert len(bert) == 30522 and bert.mask_token_id == 103


def test_collator_pads_and_masks():
    batch = PretrainingCollator(pad_token_id=0)(
        [{"input_ids": [5, 6, 7], "token_type_ids": [0, 0, 1]}, {"input_ids": [5], "token_type_ids": [0]}]
    )
    assert batch["input_ids"].shape == (2, 8)
    assert batch["attention_mask"].sum(1).tolist() == [3, 1]
    assert batch["token_type_ids"][0, :3].tolist() == [0, 0, 1]


def test_batch_order_covers_each_epoch_once_and_resumes():
    order = ResumableBatchOrder(num_examples=103, batch_size=5, seed=7)
    it = order.batches()
    epoch = [next(it) for _ in range(order.batches_per_epoch)]
    flat = [i for b in epoch for i in b]
    assert len(flat) == len(set(flat)) == 100
    next_epoch = next(it)
    assert next_epoch != epoch[0]
    resumed = order.batches(start_step=order.batches_per_epoch)
    assert next(resumed) == next_epoch
    # Two processes see disjoint halves of every global batch.
    r0, r1 = (ResumableBatchOrder(100, 5, 7, rank, 2).batches() for rank in (0, 1))
    first0, first1 = next(r0), next(r1)
    assert not set(first0) & set(first1)


def test_shared_corpus_builds(shared_data, tmp_path):
    corpus = shared_data / "corpus" / "brown"
    tok = load_or_train_tokenizer(None, corpus, 2000, cache_dir=tmp_path / "tok")
    ds = build_pretraining_dataset(
        corpus, tok, settings=ExampleSettings(max_seq_length=128), cache_dir=tmp_path / "c"
    )
    lengths = np.array([len(x) for x in ds["input_ids"]])
    assert len(ds) > 5000 and lengths.max() == 128 and (lengths == 128).mean() > 0.8
    assert Path(ds.cache_files[0]["filename"]).exists()


def test_a_first_run_builds_its_example_cache_once(small_corpus, tmp_path):
    """Before: the cache key hashed the tokenizer's serialisation, which differs between a freshly trained tokenizer
    and the same one reloaded from the tokenizer cache, so the second run built the examples again."""
    from electra.data.packing import build_pretraining_dataset
    from electra.data.tokenization import load_or_train_tokenizer
    from electra.objectives import build_config

    config = build_config("tiny", overrides={"tokenizer_vocab_size": 300, "max_seq_length": 48})
    fresh = load_or_train_tokenizer(None, small_corpus, 300, True, tmp_path / "tok")
    build_pretraining_dataset(
        small_corpus, fresh, config, cache_dir=tmp_path / "ex", num_proc=1, show_progress=False
    )
    reloaded = load_or_train_tokenizer(None, small_corpus, 300, True, tmp_path / "tok")  # from its cache now
    build_pretraining_dataset(
        small_corpus, reloaded, config, cache_dir=tmp_path / "ex", num_proc=1, show_progress=False
    )
    assert len([p for p in (tmp_path / "ex").iterdir() if not p.name.startswith(".")]) == 1


_TRAIN_IN_A_FRESH_PROCESS = """
import json, sys
from electra.data.tokenization import load_or_train_tokenizer
tokenizer = load_or_train_tokenizer(None, sys.argv[1], 600, cache_dir=sys.argv[2])
print(json.dumps(tokenizer.get_vocab(), sort_keys=True))
"""


def test_a_trained_vocabulary_is_the_same_in_every_process(small_corpus, tmp_path):
    """`tokenizers`' trainer numbers the "##x" pieces in a hash map's order, which differs per process (and on tied
    counts that order picks the merges): two fresh processes numbered the same corpus's pieces differently in
    every run we tried. Ours register them sorted first, so the vocabulary is a function of the corpus."""
    vocabularies = [
        json.loads(
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _TRAIN_IN_A_FRESH_PROCESS,
                    str(small_corpus),
                    str(tmp_path / f"cache{i}"),
                ],
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).parents[1],
            ).stdout.splitlines()[-1]
        )
        for i in range(2)
    ]
    assert vocabularies[0] == vocabularies[1]
    by_id = sorted(vocabularies[0], key=vocabularies[0].get)
    continuations = [p for p in by_id if p.startswith("##") and len(p) == 3]
    assert continuations == sorted(continuations) and by_id.index(continuations[0]) == len(SPECIAL_TOKENS)


def test_the_registered_pieces_are_not_special_tokens(tokenizer):
    """The "##x" pieces are handed to the trainer as special tokens only to fix their numbers: afterwards they
    must split like any piece (a special token is matched whole in raw text and dropped when decoding)."""
    assert set(tokenizer.all_special_tokens) == set(SPECIAL_TOKENS)
    piece = next(p for p in tokenizer.get_vocab() if p.startswith("##") and len(p) == 3)
    assert piece not in tokenizer.tokenize(f"a {piece}")  # split into '#', '#' (or [UNK]) and its character
    ids = tokenizer.convert_tokens_to_ids(["[CLS]", "the", piece])
    assert tokenizer.decode(ids, skip_special_tokens=True) == "the" + piece[2:]


def test_packing_without_a_bar_prints_lines_with_the_time_left(
    small_corpus, tokenizer, tmp_path, monkeypatch, capsys
):
    """--no-progress (TQDM_DISABLE) turns the bar off; a long build still says how far it is, every 30 s (here at
    every chunk), with documents, bytes, examples and the time left, and its totals at the end."""
    from electra.data import packing, progress

    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    monkeypatch.setattr(packing, "CHUNK_CHARS", 500)
    dataset = build_pretraining_dataset(
        small_corpus,
        tokenizer,
        settings=ExampleSettings(max_seq_length=48),
        cache_dir=tmp_path / "c",
        num_proc=1,
    )
    err = capsys.readouterr().err
    assert "%|" not in err  # no bar
    lines = [line for line in err.splitlines() if line.startswith("packing examples")]
    assert lines[0].startswith("packing examples of ") and lines[0].endswith("MB: started")
    assert any(
        " documents, " in line and "MB/s, about " in line and " s left" in line for line in lines[1:-1]
    )
    assert lines[-1].startswith(f"packing examples: {len(dataset):,} examples from ")


_POOL_UNDER_THE_CLI = """
import multiprocessing, signal, sys
from electra.app.cli import _termination_as_interrupt
from electra.data import packing

def sigterm_action(_):
    return "default" if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL else "a Python handler"

context = multiprocessing.get_context("fork")
with _termination_as_interrupt():  # the command line's SIGTERM handler, inherited by every forked worker
    with context.Pool(2, initializer=packing._start_packer, initargs=(sys.argv[1], 1, 2, None)) as pool:
        print(sorted(set(pool.map(sigterm_action, range(8)))))
"""


def test_packing_workers_take_sigterm_as_its_default(tmp_path):
    """Before: a packing worker forked under the command line's SIGTERM handler kept it, and could sit in the
    pool's queue lock without running it, so the pool's exit (which ends its workers with SIGTERM) waited forever:
    a whole test run hung on it once. Now each packer resets SIGTERM to its default action when it starts."""
    from tokenizers import Tokenizer, models

    script = tmp_path / "pools.py"
    script.write_text(_POOL_UNDER_THE_CLI)
    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]")).to_str()
    done = subprocess.run(
        [sys.executable, str(script), tokenizer], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['default']", done.stdout
