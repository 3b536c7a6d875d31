"""Linear probes (`electra probe`): the probe's arithmetic on planted data, the readers, the word-piece alignment,
one end-to-end run on a micro model, and the command's one-line refusals."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import ElectraConfig, ElectraModel, ElectraTokenizerFast, GPT2Config, GPT2Model

from electra.app.cli import main
from electra.core.errors import UserError
from electra.core.files import file_sha256
from electra.core.run_records import INPUT_DIGESTS
from electra.probes.data import base_tag, read_brown, read_sst2, split_brown
from electra.probes.inputs import PROBES, check_probe_inputs
from electra.probes.linear import accuracy, fit_probe, load_frozen, sentence_features, token_features
from electra.probes.run import random_encoder_dir, run_probe, training_samples

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "play",
    "##ing",
    "good",
    "bad",
    "film",
    "movie",
    "is",
    "was",
    "great",
    "awful",
]


def _tokenizer() -> ElectraTokenizerFast:
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    return ElectraTokenizerFast(vocab=vocab, do_lower_case=True)


@pytest.fixture
def micro_encoder(tmp_path):
    """A random two-layer ElectraModel and its tokenizer, saved as a checkpoint directory."""
    tokenizer = _tokenizer()
    config = ElectraConfig(
        vocab_size=len(tokenizer),
        embedding_size=16,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    torch.manual_seed(1234)  # not random_encoder_dir's seed (0), so the random copy differs
    directory = tmp_path / "model"
    ElectraModel(config).save_pretrained(str(directory), safe_serialization=True)
    tokenizer.save_pretrained(str(directory))
    return directory


def _sst2(root, n_train: int = 40, n_dev: int = 10):
    folder = root / "glue" / "SST-2"
    folder.mkdir(parents=True)
    good = ["the film is great", "a good movie", "the movie was great", "a great film"]
    bad = ["the film is awful", "a bad movie", "the movie was bad", "an awful film"]
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        rows = [f"{(good if i % 2 else bad)[i % 4]}\t{i % 2}" for i in range(n)]
        (folder / name).write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    return root


def test_separable_points_are_all_right_on_dev():
    torch.manual_seed(0)
    centres = torch.tensor([[3.0, 0.0], [-3.0, 0.0], [0.0, 3.0]])
    labels = [i % 3 for i in range(60)]
    points = centres[labels] + 0.3 * torch.randn(60, 2)
    probe = fit_probe(points[:45], labels[:45], seed=1)
    assert probe.classes == [0, 1, 2]
    assert accuracy(probe, points[45:], labels[45:]) == 1.0


def test_one_unlearnable_dev_point_costs_exactly_one_in_n():
    train = torch.tensor([[-2.0, 0.0], [-1.5, 0.5], [-1.0, -0.5], [2.0, 0.0], [1.5, 0.5], [1.0, -0.5]])
    labels = ["neg"] * 3 + ["pos"] * 3
    dev = torch.tensor([[-1.8, 0.1], [1.8, -0.1], [1.2, 0.3], [-2.0, 0.0], [-1.2, 0.2]])
    # the last dev point sits among the negatives but says "pos"; a label unseen in training is never predicted
    assert accuracy(fit_probe(train, labels), dev, ["neg", "pos", "pos", "neg", "pos"]) == 4 / 5
    assert accuracy(fit_probe(train, labels), dev, ["neg", "pos", "pos", "neg", "other"]) == 4 / 5


def test_brown_tags_are_reduced_to_their_base_and_other_files_skipped(tmp_path):
    (tmp_path / "ca01").write_text(
        "\n\n\tThe/at-tl Fulton/np-tl County/nn-tl said/vbd ./.\n\n"
        "\tIt's/pps+bez 1/2/cd in/in-hl Atlanta's/np$ --/-- no/at-hl-tl ./.\n"
    )
    (tmp_path / "cb02").write_text("\tA/at dog/nn ./.\n")
    for name in ("README", "CONTENTS", "cats.txt"):
        (tmp_path / name).write_text("not / tagged text at all\n")
    sentences = read_brown(tmp_path)
    assert sentences[0] == [("The", "at"), ("Fulton", "np"), ("County", "nn"), ("said", "vbd"), (".", ".")]
    assert sentences[1] == [
        ("It's", "pps"),
        ("1/2", "cd"),
        ("in", "in"),
        ("Atlanta's", "np$"),
        ("--", "--"),
        ("no", "at"),
        (".", "."),
    ]
    assert len(sentences) == 3 and read_brown(tmp_path, max_sentences=2) == sentences[:2]
    assert base_tag("NN-TL-HL") == "nn" and base_tag("ppss+bem") == "ppss"
    train, dev = split_brown([[("w", str(i))] for i in range(25)])
    assert [s[0][1] for s in dev] == ["9", "19"] and len(train) == 23


def test_readers_refuse_in_one_line(tmp_path):
    (tmp_path / "README").write_text("nothing tagged here\n")
    with pytest.raises(UserError, match="no tagged sentences") as err:
        read_brown(tmp_path)
    assert "\n" not in str(err.value)
    bad = tmp_path / "train.tsv"
    bad.write_text("sentence\tlabel\ngood film\t2\n")
    with pytest.raises(UserError, match=r"train\.tsv:2: label '2'"):
        read_sst2(bad)
    bad.write_text("text\tlabel\ngood film\t1\n")
    with pytest.raises(UserError, match="no column 'sentence'"):
        read_sst2(bad)


def test_token_features_take_each_words_first_piece_and_drop_cut_words(micro_encoder):
    encoder, tokenizer = load_frozen(micro_encoder)
    sentences = [["the", "cat", "playing"], ["a", "dog"], ["playing", "the", "film", "is", "great"]]
    assert tokenizer.tokenize("playing") == ["play", "##ing"]
    features, kept = token_features(encoder, tokenizer, sentences, max_length=6, batch_size=2)
    # [CLS] playing -> play ##ing, the, film, [SEP] at length 6: "is" and "great" are cut off
    assert kept == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
    with torch.inference_mode():
        alone = encoder(**tokenizer([sentences[0]], is_split_into_words=True, return_tensors="pt"))
    # [CLS] the cat play ##ing [SEP]: "playing" is read at "play" (position 3), not "##ing"
    torch.testing.assert_close(features[:3], alone.last_hidden_state[0, [1, 2, 3]], atol=1e-5, rtol=1e-5)


def test_sentence_features_are_the_masked_mean_whatever_the_padding(micro_encoder):
    encoder, tokenizer = load_frozen(micro_encoder)
    texts = ["a dog", "the cat is playing the film", "great"]
    batched = sentence_features(encoder, tokenizer, texts, batch_size=3)
    with torch.inference_mode():
        for i, text in enumerate(texts):
            alone = encoder(**tokenizer([text], return_tensors="pt")).last_hidden_state[0].mean(0)
            torch.testing.assert_close(batched[i], alone, atol=1e-5, rtol=1e-5)


def test_run_probe_end_to_end_on_a_micro_model(micro_encoder, tmp_path):
    root = _sst2(tmp_path / "data")
    result = run_probe(
        micro_encoder, "sst2", root, seeds=(1, 2, 3), max_train=20, max_length=16, batch_size=8
    )
    assert result["min"] <= result["median"] <= result["max"]
    assert len(result["accuracy"]) == 3 and result["n_train"] == 20 and result["n_dev"] == 10
    assert result["unit"] == "sentence" and result["n_classes"] == 2
    random_dir = random_encoder_dir(micro_encoder, tmp_path / "random")
    a, b = (ElectraModel.from_pretrained(str(d)) for d in (micro_encoder, random_dir))
    assert a.config.hidden_size == b.config.hidden_size
    assert not torch.equal(a.embeddings.word_embeddings.weight, b.embeddings.word_embeddings.weight)
    assert set(PROBES) == {"sst2", "pos"}


def test_pos_probe_end_to_end_on_a_planted_corpus(micro_encoder, tmp_path):
    brown = tmp_path / "data" / "corpus" / "brown"
    brown.mkdir(parents=True)
    lines = ["\tthe/at cat/nn is/bez playing/vbg ./.", "\ta/at dog/nn-tl was/bedz great/jj ./."] * 10
    (brown / "ca01").write_text("\n\n".join(lines) + "\n")
    result = run_probe(micro_encoder, "pos", tmp_path / "data", seeds=(1, 2), max_train=8, max_length=16)
    assert result["unit"] == "token" and result["n_train"] == 8
    assert result["n_dev"] == 10  # 2 dev sentences of 5 words
    assert result["min"] <= result["median"] <= result["max"]


def test_cli_writes_json_and_refuses_in_one_line(micro_encoder, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ELECTRA_DATA", raising=False)
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    assert main(["probe", "--model", str(tmp_path / "missing"), "--data", str(root)]) == 2
    err = capsys.readouterr().err
    assert "config.json: not found" in err and err.count("\n") == 1 and "Traceback" not in err
    assert main(["probe", "--model", str(micro_encoder)]) == 2
    assert "ELECTRA_DATA" in capsys.readouterr().err
    out = tmp_path / "probe.json"
    argv = ["probe", "--model", str(micro_encoder), "--probes", "sst2", "--data", str(root), "--seeds", "2"]
    assert main([*argv, "--random-baseline", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "median" in printed and "random (" in printed
    results = json.loads(out.read_text())["results"]
    assert [r["random"] for r in results] == [False, True] and results[0]["seeds"] == [1, 2]
    assert main([*argv, "--output", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_real_data_readers(shared_data):
    texts, labels = read_sst2(shared_data / "glue" / "SST-2" / "dev.tsv")
    assert len(texts) == len(labels) == 872 and set(labels) == {0, 1}
    sentences = read_brown(shared_data / "corpus" / "brown", max_sentences=300)
    tags = {tag for sentence in sentences for _, tag in sentence}
    assert len(sentences) == 300 and {"nn", "np", "at"} <= tags
    assert not any(t.endswith(("-tl", "-hl", "-nc")) or "+" in t for t in tags)


def test_help_states_each_probes_own_training_sample(capsys):
    """Before: the help said `--max-train` defaulted to all of SST-2's training set, while the probe draws 10,000."""
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, spec in PROBES.items():
        assert f"{name} {spec.default_max_train}" in text
    assert "all for sst2" not in text


def test_an_unwritable_output_is_one_line_before_any_work(micro_encoder, tmp_path, capsys, monkeypatch):
    """Before: the probes ran, and then writing --output raised a traceback (FileNotFoundError, NotADirectoryError)."""
    import electra.probes.run

    def probed(*args, **kwargs):
        raise AssertionError("probing started")

    monkeypatch.setattr(electra.probes.run, "run_probe", probed)
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    (tmp_path / "a-file").write_text("")
    argv = ["probe", "--model", str(micro_encoder), "--probes", "sst2", "--data", str(root), "--output"]
    for output in [tmp_path / "a-file" / "results.json", tmp_path / "a-file" / "deeper" / "results.json"]:
        assert main([*argv, str(output)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            f"electra probe: error: --output {output}: its folder {output.parent}: cannot write"
        )
        assert err.count("\n") == 1
    assert main([*argv, str(tmp_path), "--overwrite"]) == 2
    assert "is a folder" in capsys.readouterr().err
    # a writable path is tried for real and left as it was: the folders made to try it are gone again
    with pytest.raises(AssertionError, match="probing started"):
        main([*argv, str(tmp_path / "new" / "deeper" / "results.json")])
    assert not (tmp_path / "new").exists()


def test_a_checkpoint_without_a_tokenizer_is_refused_before_any_work(micro_encoder, tmp_path, capsys):
    """Before: transformers 5's AutoTokenizer built an empty five-piece tokenizer for a checkpoint saved without
    one, so every word was [UNK] and the probe printed a score of nothing."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((micro_encoder / name).read_bytes())
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    argv = ["probe", "--probes", "sst2", "--data", str(root), "--seeds", "1"]
    assert main([*argv, "--model", str(bare)]) == 2
    err = capsys.readouterr().err
    assert "holds no tokenizer" in err and err.count("\n") == 1
    with pytest.raises(UserError, match="holds no tokenizer"):
        run_probe(bare, "sst2", root, seeds=(1,))


def test_every_model_and_probe_input_is_checked_before_the_first_probe(
    micro_encoder, tmp_path, capsys, monkeypatch
):
    """Before: a pickled second --model, or a missing corpus/brown/ for the second probe, stopped the command only
    after the first probes had run on every model, and their results were lost."""
    import electra.probes.run

    def probed(*args, **kwargs):
        raise AssertionError("probing started")

    monkeypatch.setattr(electra.probes.run, "run_probe", probed)
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (pickled / name).write_bytes((micro_encoder / name).read_bytes())
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    argv = ["probe", "--data", str(root), "--seeds", "1", "--model", str(micro_encoder)]
    assert main([*argv, "--probes", "sst2", "--model", str(pickled)]) == 2
    assert "no .safetensors weights" in capsys.readouterr().err
    assert main([*argv, "--probes", "sst2,pos"]) == 2
    err = capsys.readouterr().err
    assert "corpus/brown" in err and err.count("\n") == 1


@pytest.mark.parametrize("max_length", [1, 2])
def test_a_max_length_with_no_room_for_a_word_is_refused(micro_encoder, tmp_path, max_length):
    """Before: --max-length 2 left [CLS] [SEP] only (the pos probe died in a traceback with no words to fit) and
    --max-length 1 was not applied at all (the tokenizer does not truncate below its special tokens)."""
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    with pytest.raises(UserError, match="--max-length must be at least 3"):  # the door, before any probe
        check_probe_inputs([PROBES["sst2"]], root, max_length)
    argv = ["probe", "--model", str(micro_encoder), "--probes", "sst2", "--data", str(root)]
    assert main([*argv, "--max-length", str(max_length)]) == 2


def test_a_brown_folder_too_small_for_a_dev_split_is_one_line(micro_encoder, tmp_path):
    """Before: fewer than ten Brown sentences left the dev split empty and the probe died in a TypeError."""
    brown = tmp_path / "data" / "corpus" / "brown"
    brown.mkdir(parents=True)
    (brown / "ca01").write_text("\n".join(["the/at cat/nn is/bez good/jj ./."] * 9) + "\n")
    with pytest.raises(UserError, match="too few for a dev split") as err:
        run_probe(micro_encoder, "pos", tmp_path / "data", seeds=(1,), max_length=16)
    assert "\n" not in str(err.value)


def test_random_baseline_of_a_corrupt_config_is_one_line(micro_encoder, tmp_path):
    """Before: --random-baseline read config.json with transformers directly, and a corrupt one was a traceback."""
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((micro_encoder / name).read_bytes())
    (broken / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="config.json") as err:
        random_encoder_dir(broken, tmp_path / "random")
    assert "\n" not in str(err.value)


def test_a_killed_probe_keeps_its_rows_and_resume_probes_the_rest(
    micro_encoder, tmp_path, capsys, monkeypatch
):
    """Before: the results file was written once all probes had run, so a run stopped at its last model (an hour
    of CPU) kept nothing, and there was no way to continue it."""
    import electra.probes.run

    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    argv = ["probe", "--model", str(micro_encoder), "--probes", "sst2", "--data", str(root), "--seeds", "2"]
    argv += ["--random-baseline", "--max-length", "16"]
    straight = tmp_path / "straight.json"
    assert main([*argv, "--output", str(straight)]) == 0
    real_probe, calls = electra.probes.run.run_probe, []

    def probe_then_die(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_probe(*args, **kwargs)

    monkeypatch.setattr(electra.probes.run, "run_probe", probe_then_die)
    out = tmp_path / "killed.json"
    assert main([*argv, "--output", str(out)]) == 130  # Ctrl-C
    kept = json.loads(out.read_text())
    assert kept["complete"] is False and [r["label"] for r in kept["results"]] == [str(micro_encoder)]
    capsys.readouterr()
    assert main([*argv, "--output", str(out)]) == 2  # not replaced unasked; the message names --resume
    assert "--resume to continue it" in capsys.readouterr().err
    # another number of seeds would mix rows of two settings: refused, naming the values
    assert main([*argv, "--output", str(out), "--resume", "--seeds", "3"]) == 2
    err = capsys.readouterr().err
    assert "seeds (saved [1, 2], now [1, 2, 3])" in err and err.count("\n") == 1
    calls.clear()
    assert main([*argv, "--output", str(out), "--resume"]) == 0
    assert len(calls) == 1 and "random" in calls[0]  # only the random baseline was probed again
    resumed, whole = (json.loads(p.read_text()) for p in (out, straight))
    assert resumed["complete"] is True and whole["complete"] is True
    timings = ("seconds", "extract_seconds")
    strip = [{k: v for k, v in r.items() if k not in timings} for r in whole["results"]]
    assert [{k: v for k, v in r.items() if k not in timings} for r in resumed["results"]] == strip
    assert main(["probe", "--model", str(micro_encoder), "--data", str(root), "--resume"]) == 2
    assert "pass --output FILE" in capsys.readouterr().err


def test_a_model_given_twice_is_probed_once(micro_encoder, tmp_path, capsys):
    """Before: `--model m --model m/` (or a run and its discriminator/) probed the same encoder twice and listed it
    as two rows."""
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    argv = ["probe", "--probes", "sst2", "--data", str(root), "--seeds", "1", "--max-length", "16"]
    out = tmp_path / "p.json"
    assert (
        main([*argv, "--model", str(micro_encoder), "--model", f"{micro_encoder}/", "--output", str(out)])
        == 0
    )
    err = capsys.readouterr().err
    assert f"--model {micro_encoder}/ is {micro_encoder} again" in err and "probed once" in err
    assert [r["label"] for r in json.loads(out.read_text())["results"]] == [str(micro_encoder)]


def test_an_output_the_probe_reads_is_never_replaced(micro_encoder, tmp_path, capsys):
    """Before: `--output DATA/glue/SST-2/dev.tsv --overwrite` replaced the data with the results, and `--output
    MODEL/config.json --overwrite` the checkpoint's config (the model no longer loaded); `--output out/` wrote a
    file named `out`."""
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    argv = ["probe", "--model", str(micro_encoder), "--probes", "sst2", "--data", str(root), "--seeds", "1"]
    argv += ["--max-length", "16"]
    dev, config = root / "glue" / "SST-2" / "dev.tsv", micro_encoder / "config.json"
    before = {path: path.read_bytes() for path in (dev, config)}
    for output, says in (
        (dev, "is the sst2 probe's data, which this command reads"),
        (config, f"is in --model {micro_encoder}, whose files this command reads"),
        (micro_encoder / ".." / "model" / "tokenizer.json", f"is in --model {micro_encoder}, whose files"),
    ):
        for extra in ([], ["--overwrite"], ["--resume"]):
            assert main([*argv, "--output", str(output), *extra]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"--output {output} {says}" in err, err
            assert "never replaced, even with --overwrite" in err
    assert {path: path.read_bytes() for path in before} == before
    assert main([*argv, "--output", f"{tmp_path / 'out'}/"]) == 2
    assert "is a folder; give the JSON file to write" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    # A pretraining run given as --model: its own files (the manifest that names the part, its config) are read
    # too. Before, `--output RUN/export.json --overwrite` replaced the manifest and the run no longer loaded.
    import shutil

    from electra.export.layout import FORMAT, MANIFEST

    run = tmp_path / "run"
    shutil.copytree(micro_encoder, run / "discriminator")
    manifest = {"format": FORMAT, "objective": "electra", "finetune": "discriminator", "scoring": {}}
    manifest["parts"] = {"discriminator": {"dir": "discriminator", "kind": "discriminator"}}
    (run / MANIFEST).write_text(json.dumps(manifest))
    (run / "config.json").write_text("{}")
    (run / "logs").mkdir()
    (run / "logs" / "metrics.csv").write_text("step\n")
    run_argv = [*argv[:2], str(run), *argv[3:]]
    kept = {
        path: path.read_bytes()
        for path in (run / MANIFEST, run / "config.json", run / "logs" / "metrics.csv")
    }
    for output in kept:
        assert main([*run_argv, "--output", str(output), "--overwrite"]) == 2
        assert f"--output {output} is in --model {run}, whose files" in capsys.readouterr().err
    assert {path: path.read_bytes() for path in kept} == kept
    # the command's own results file may sit in the model's folder, and is resumed and replaced as anywhere
    mine = micro_encoder / "probe.json"
    for extra in ([], ["--resume"], ["--overwrite"]):
        assert main([*argv, "--output", str(mine), *extra]) == 0
        assert json.loads(mine.read_text())["complete"] is True


def test_a_tokenizer_larger_than_the_embeddings_is_one_line_before_the_first_probe(
    micro_encoder, tmp_path, capsys, monkeypatch
):
    """Before: a tokenizer with more pieces than the model's embeddings have rows was an IndexError traceback in
    the embedding lookup, after the first --model's probes had run."""
    import electra.probes.run

    small = tmp_path / "small"
    config = ElectraConfig(
        vocab_size=5, embedding_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2
    )
    ElectraModel(config).save_pretrained(str(small), safe_serialization=True)
    _tokenizer().save_pretrained(str(small))
    with pytest.raises(UserError, match=f"{len(_tokenizer())} pieces but the model's embeddings only 5 rows"):
        load_frozen(small)

    def probed(*args, **kwargs):
        raise AssertionError("probing started")

    monkeypatch.setattr(electra.probes.run, "run_probe", probed)
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    argv = ["probe", "--probes", "sst2", "--data", str(root), "--model", str(micro_encoder)]
    assert main([*argv, "--model", str(small)]) == 2
    err = capsys.readouterr().err
    assert f"electra probe: error: {small}: its tokenizer has" in err and "Traceback" not in err


def test_data_a_later_probe_reads_is_checked_before_the_first_probe(
    micro_encoder, tmp_path, capsys, monkeypatch
):
    """Before: a malformed row in SST-2 stopped `--probes pos,sst2` only after the pos probe had run on every model,
    and the message offered --skip-malformed, a flag `electra probe` does not have."""
    import electra.probes.run

    def probed(*args, **kwargs):
        raise AssertionError("probing started")

    monkeypatch.setattr(electra.probes.run, "run_probe", probed)
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    brown = root / "corpus" / "brown"
    brown.mkdir(parents=True)
    (brown / "ca01").write_text("\n".join(["the/at cat/nn is/bez good/jj ./."] * 20) + "\n")
    train = root / "glue" / "SST-2" / "train.tsv"
    train.write_text(train.read_text() + "a row without its label\n")
    argv = ["probe", "--model", str(micro_encoder), "--probes", "pos,sst2", "--data", str(root)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{train}:14: expected at least 2 tab-separated fields" in err
    assert "--skip-malformed" not in err


def test_brown_files_are_decoded_as_every_user_file_is(tmp_path):
    """Before: Brown files were read with errors="replace": Latin-1 bytes became U+FFFD inside words without a
    word, and a UTF-16 file was refused as "'\\x00' is not word/tag"."""
    text = "\tThe/at café/nn is/bez good/jj ./.\n"
    (tmp_path / "ca01").write_bytes(text.encode("utf-16"))
    with pytest.warns(UserWarning, match="UTF-16"):
        assert read_brown(tmp_path)[0][1] == ("café", "nn")
    (tmp_path / "ca01").write_bytes(text.encode("latin-1"))
    with pytest.raises(UserError, match=r"ca01:1: not UTF-8 text.*expected Brown word/tag text") as err:
        read_brown(tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="is a file, not the Brown corpus directory"):
        read_brown(tmp_path / "ca01")


def _rewrite_labels(path, label_of):
    """`path` (an SST-2 TSV) with each row's label replaced by `label_of(row index, old label)`."""
    header, *rows = path.read_text().splitlines()
    cells = [row.split("\t") for row in rows]
    path.write_text(
        "\n".join([header, *(f"{text}\t{label_of(i, int(old))}" for i, (text, old) in enumerate(cells))])
        + "\n"
    )


def test_resume_probes_again_a_row_whose_data_or_model_changed(micro_encoder, tmp_path, capsys, monkeypatch):
    """Before: `--resume` kept every row of --output whatever had happened to its inputs since: a model retrained
    in place, or a relabelled dev file, kept the old model's (old data's) numbers beside the new ones."""
    import electra.probes.run

    other = tmp_path / "other"
    shutil.copytree(micro_encoder, other)
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    dev = root / "glue" / "SST-2" / "dev.tsv"
    out = tmp_path / "probe.json"
    argv = [
        "probe",
        "--model",
        str(micro_encoder),
        "--model",
        str(other),
        "--probes",
        "sst2",
        "--data",
        str(root),
    ]
    argv += ["--seeds", "1", "--max-length", "16", "--output", str(out)]
    assert main(argv) == 0
    first = json.loads(out.read_text())["results"]
    assert first[0][INPUT_DIGESTS] == {
        "data": {
            f"glue/SST-2/{name}": file_sha256(root / "glue" / "SST-2" / name)
            for name in ("dev.tsv", "train.tsv")
        },
        "model": {
            name: file_sha256(micro_encoder / name)
            for name in ("config.json", "model.safetensors", "tokenizer.json")
        },
    }
    real_probe, calls = electra.probes.run.run_probe, []

    def counted(*args, **kwargs):
        calls.append(str(args[0]))
        return real_probe(*args, **kwargs)

    monkeypatch.setattr(electra.probes.run, "run_probe", counted)
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0 and calls == []  # nothing changed: every row kept
    assert "probing it again" not in capsys.readouterr().err

    torch.manual_seed(99)  # other weights under the same path: the second model retrained in place
    ElectraModel(ElectraModel.from_pretrained(str(other)).config).save_pretrained(
        str(other), safe_serialization=True
    )
    assert main([*argv, "--resume"]) == 0 and calls == [str(other)]
    err = capsys.readouterr().err
    redone = [line for line in err.splitlines() if "probing it again" in line]
    assert redone == [
        f"probe: sst2 {other}: {other / 'model.safetensors'} changed since its row in {out} was probed; "
        "probing it again."
    ]
    assert f"sst2 {micro_encoder}: median" in err and "from the earlier run" in err
    second = json.loads(out.read_text())["results"]
    assert second[0] == first[0]  # the unchanged model's row kept as it was
    assert second[1][INPUT_DIGESTS]["model"]["model.safetensors"] == file_sha256(other / "model.safetensors")
    assert second[1][INPUT_DIGESTS]["model"] != first[1][INPUT_DIGESTS]["model"]

    calls.clear()
    _rewrite_labels(dev, lambda i, old: 1 - old)  # the dev set relabelled: every row's numbers are stale
    assert main([*argv, "--resume"]) == 0 and calls == [str(micro_encoder), str(other)]
    err = capsys.readouterr().err
    assert err.count(f"{dev} changed since its row in {out} was probed; probing it again.") == 2
    third = json.loads(out.read_text())
    assert third["complete"] is True
    assert [r[INPUT_DIGESTS]["data"]["glue/SST-2/dev.tsv"] for r in third["results"]] == [
        file_sha256(dev)
    ] * 2
    # every dev label flipped and the same probe: each accuracy is the complement of the one before
    assert [r["accuracy"][0] for r in third["results"]] == pytest.approx(
        [1 - r["accuracy"][0] for r in second]
    )


def test_training_data_of_one_class_is_refused_before_any_probe(micro_encoder, tmp_path, capsys, monkeypatch):
    """Before: a training file of one label (or a --max-train sample that drew one) fitted a probe that answers it
    everywhere, and its "accuracy" (the majority baseline) was reported as the encoder's."""
    import electra.probes.run

    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    train = root / "glue" / "SST-2" / "train.tsv"
    _rewrite_labels(train, lambda i, old: 0)
    with pytest.raises(
        UserError, match=f"{train}: every training sentence's label is 0; .* at least two"
    ) as err:
        run_probe(micro_encoder, "sst2", root, seeds=(1,), max_length=16)
    assert "\n" not in str(err.value)

    def probed(*args, **kwargs):
        raise AssertionError("probing started")

    monkeypatch.setattr(electra.probes.run, "run_probe", probed)
    capsys.readouterr()  # the direct call's progress bar
    argv = ["probe", "--model", str(micro_encoder), "--probes", "sst2", "--data", str(root), "--seeds", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{train}: every training sentence's label is 0" in err
    _rewrite_labels(train, lambda i, old: i % 2)  # two classes, but one sentence per seed holds one of them
    assert main([*argv, "--max-train", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{train}: seed 1's training sample (--max-train 1) holds one class only" in err
    assert "raise --max-train" in err
    with pytest.raises(AssertionError, match="probing started"):  # two per seed: both classes drawn, accepted
        main([*argv, "--max-train", "12"])
    brown = root / "corpus" / "brown"
    brown.mkdir(parents=True)
    (brown / "ca01").write_text("\n".join(["the/at a/at the/at-tl"] * 20) + "\n")
    with pytest.raises(UserError, match=f"{brown}: every training token's label is 'at'"):
        training_samples(PROBES["pos"], PROBES["pos"].read(root), root, (1,), None)


def _causal_checkpoints(tmp_path):
    """An ELECTRA encoder saved as a decoder (is_decoder) and a GPT-2 (decoder-only), with the test tokenizer."""
    tokenizer = _tokenizer()
    decoder = ElectraConfig(
        vocab_size=len(tokenizer),
        embedding_size=16,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        is_decoder=True,
    )
    gpt2 = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=16,
        n_layer=1,
        n_head=2,
        n_positions=32,
        bos_token_id=2,
        eos_token_id=3,
    )
    for name, model in (("decoder", ElectraModel(decoder)), ("gpt2", GPT2Model(gpt2))):
        model.save_pretrained(str(tmp_path / name), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp_path / name))
        yield tmp_path / name


def test_a_causal_model_is_refused_in_one_line(micro_encoder, tmp_path, capsys, monkeypatch):
    """Before: a decoder's states (each token seeing only the tokens before it) were probed as if bidirectional, and
    the gap to the random baseline measured the attention mask."""
    import electra.probes.run

    load_frozen(micro_encoder)  # a bidirectional encoder is accepted

    def probed(*args, **kwargs):
        raise AssertionError("probing started")

    monkeypatch.setattr(electra.probes.run, "run_probe", probed)
    root = _sst2(tmp_path / "data", n_train=12, n_dev=6)
    for causal in _causal_checkpoints(tmp_path):
        with pytest.raises(UserError, match=f"{causal}: is a causal \\(decoder\\) model") as err:
            load_frozen(causal)
        assert "\n" not in str(err.value)
        argv = ["probe", "--model", str(micro_encoder), "--model", str(causal), "--data", str(root)]
        capsys.readouterr()  # the loads' progress bars
        assert main([*argv, "--probes", "sst2"]) == 2
        said = capsys.readouterr().err
        assert said.count("\n") == 1 and "causal (decoder) model" in said and "bidirectional encoder" in said
