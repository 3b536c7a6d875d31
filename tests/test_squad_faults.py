"""`electra squad` and `squad-eval` on bad input and damaged outputs: each case one line on stderr (exit 2) or a
run that repairs what it can, never a traceback and never an earlier run deleted for a refusal. Each test failed
before its fix (the docstrings say how)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.app.cli import main
from electra.core.errors import UserError
from electra.squad.data import read_squad
from tests.test_squad_pipeline import _self_contained

SMALL = ["--max-seq-length", "64", "--max-query-length", "16", "--doc-stride", "32", "--batch-size", "8"]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("electra squad"), err
    return lines[0]


def _payload(answer: dict, context: str = "Denver won the game in 2016.") -> dict:
    qa = {"id": "q1", "question": "Who won?", "answers": [answer]}
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}]}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        # before: accepted; training labelled the token at answer_start as the answer
        (
            {"text": "", "answer_start": 7},
            "question q1: an answer whose text is empty or blank (answer_start=7)",
        ),
        (
            {"text": " ", "answer_start": 6},
            "question q1: an answer whose text is empty or blank (answer_start=6)",
        ),
    ],
)
def test_an_empty_answer_is_refused(tmp_path: Path, answer: dict, message: str) -> None:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(_payload(answer)))
    with pytest.raises(UserError, match=r"data\.json: ") as info:
        read_squad(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_json_cut_short_empty_or_too_deep_is_one_line_saying_so(tmp_path: Path) -> None:
    """Before: a file cut short read "malformed JSON (Expecting ...)", an empty one the same, and deep nesting ended
    in a RecursionError traceback."""
    text = json.dumps(_payload({"text": "Denver", "answer_start": 0}))
    cases = {
        "cut.json": (text[: len(text) // 2], "the file was cut short; copy or download it again"),
        "empty.json": ("\n", "the file is empty"),
        "deep.json": ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply to read"),
        "notjson.json": ("hello", ":1: malformed JSON (Expecting value)"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_text(content)
        with pytest.raises(UserError) as info:
            read_squad(path)
        assert str(info.value).startswith(str(path)) and message in str(info.value), name


def test_a_byte_order_mark_is_read_through(tmp_path: Path) -> None:
    """Before: a UTF-8 file saved with a BOM (Notepad) was refused as "malformed JSON (Unexpected UTF-8 BOM)"."""
    text = json.dumps(_payload({"text": "Denver", "answer_start": 0}))
    for name, data in (("bom8.json", b"\xef\xbb\xbf" + text.encode()), ("bom16.json", text.encode("utf-16"))):
        path = tmp_path / name
        path.write_bytes(data)
        assert [e.answers[0].text for e in read_squad(path)] == ["Denver"]


def test_squad_eval_predictions_not_utf8_or_cut_short(tmp_path: Path, capsys) -> None:
    """Before: Latin-1 predictions ended in a UnicodeDecodeError traceback (exit 1)."""
    data = tmp_path / "data.json"
    data.write_text(json.dumps(_payload({"text": "Denver", "answer_start": 0})))
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"q1": "Dénver"}'.encode("latin-1"))
    assert main(["squad-eval", "--data", str(data), "--predictions", str(latin)]) == 2
    assert f"{latin}:1: not UTF-8 text" in _one_line(capsys.readouterr().err)
    cut = tmp_path / "cut.json"
    cut.write_text('{"q1": "Den')
    assert main(["squad-eval", "--data", str(data), "--predictions", str(cut)]) == 2
    assert f"{cut}:1: the JSON stops before it is complete" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--batch-size", "0"], "batch_size must be at least 1, got 0."),  # before: ZeroDivisionError
        (["--eval-batch-size", "0"], "eval_batch_size must be at least 1, got 0."),  # before: after training
        (["--beam-size", "0"], "beam_size must be at least 1, got 0."),  # before: after training
        (["--n-best-size", "0"], "n_best_size must be at least 1, got 0."),  # before: kept one anyway
        (
            ["--max-answer-length", "0"],
            "max_answer_length must be at least 1, got 0.",
        ),  # before: "" everywhere
        (["--max-steps", "0"], "max_steps must be at least 1, got 0."),  # before: read as "not given"
        (
            ["--max-train-examples", "-1"],
            "max_train_examples must be at least 1, got -1.",
        ),  # dropped the last
        (["--max-query-length", "0"], "max_query_length must be at least 1, got 0."),
        (["--doc-stride", "0"], "doc_stride must be at least 1, got 0."),  # before: after --overwrite deleted
        (["--save-every", "-1"], "save_every must not be negative, got -1."),
        (
            ["--seed", "-1"],
            "seed must be in 0..4294967295 (the range numpy seeds), got -1.",
        ),  # before: ValueError traceback
        (["--na-threshold", "nan"], "na_threshold must be a finite number, got nan"),  # before: NaN in JSON
        (["--max-query-length", "61"], "--max-seq-length 64 leaves no room for context"),
    ],
)
def test_bad_option_values_are_refused_before_overwrite_deletes(
    tmp_path: Path, capsys, flags: list[str], message: str
) -> None:
    out = tmp_path / "out"
    (out / "model").mkdir(parents=True)
    (out / "results.json").write_text("{}\n")  # an earlier run's
    data = tmp_path / "data.json"
    data.write_text(json.dumps(_payload({"text": "Denver", "answer_start": 0})))
    argv = ["squad", "--model", str(tmp_path / "m"), "--train", str(data), "--eval", str(data)]
    assert main([*argv, "--output", str(out), *SMALL, *flags, "--overwrite"]) == 2
    assert message in _one_line(capsys.readouterr().err)
    assert (out / "results.json").is_file() and (out / "model").is_dir()  # nothing deleted


def test_resume_refuses_an_edited_training_file_and_rebuilds_a_damaged_cache(
    tmp_path: Path, capsys, caplog
) -> None:
    """Before: `--resume` after the training file was edited in place continued the checkpoint on other data;
    and a feature cache cut short in OUTPUT/cache ended every later run in pyarrow's OSError traceback."""
    made = _self_contained(tmp_path)
    out = tmp_path / "out"
    argv = ["squad", "--model", str(made["tiny"]), "--train", str(made["data"]), "--eval", str(made["data"])]
    argv += ["--output", str(out), "--max-steps", "2", "--save-every", "1", *SMALL]
    assert main(argv) == 0
    predictions = (out / "predictions.json").read_text()
    for arrow in (out / "cache").glob("squad-*/data-*.arrow"):
        arrow.write_bytes(arrow.read_bytes()[:1000])
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    damaged = [r.getMessage() for r in caplog.records if "building the features again" in r.getMessage()]
    assert len(damaged) == 2 and all("is damaged" in m for m in damaged)  # train and eval features
    assert (out / "predictions.json").read_text() == predictions
    original = made["data"].read_text()
    payload = json.loads(original)
    payload["data"][0]["paragraphs"] = payload["data"][0]["paragraphs"][:3]
    made["data"].write_text(json.dumps(payload))
    results = (out / "results.json").read_text()
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"--resume: {made['data'].resolve()} changed since {out} was started with it" in err
    assert "--overwrite" in err and (out / "results.json").read_text() == results
    made["data"].write_text(original)  # restored: the resume goes on
    assert main([*argv, "--resume"]) == 0


def test_squad_eval_nan_no_answer_scores_and_a_misshapen_file(tmp_path: Path, capsys) -> None:
    """Before: a NaN in --na-probs ended in a ValueError traceback from the threshold search; and a file whose
    article is not an object read "not a SQuAD file (missing string indices must be integers, not 'str')"."""
    payload = _payload({"text": "Denver", "answer_start": 0})
    payload["version"] = "v2.0"
    payload["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"] = False
    data = tmp_path / "data.json"
    data.write_text(json.dumps(payload))
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps({"q1": "Denver"}))
    na_probs = tmp_path / "null_odds.json"
    na_probs.write_text(json.dumps({"q1": float("nan")}))  # Python writes NaN, which json reads back
    argv = ["squad-eval", "--data", str(data), "--predictions", str(predictions)]
    assert main([*argv, "--na-probs", str(na_probs)]) == 2
    assert f"{na_probs}: question q1: value nan is not a finite number." in _one_line(capsys.readouterr().err)
    data.write_text(json.dumps({"version": "1.1", "data": ["an article"]}))
    assert main(argv) == 2
    assert f"{data}: article 0: missing field 'paragraphs'" in _one_line(capsys.readouterr().err)


def test_an_unusable_cache_dir_is_refused_before_any_work(tmp_path: Path, capsys) -> None:
    """Before: `--cache-dir` naming a file ended in NotADirectoryError once the features were built (after
    training, for the evaluation's)."""
    made = _self_contained(tmp_path)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    capsys.readouterr()
    argv = [
        "squad",
        "--model",
        str(made["tiny"]),
        "--train",
        str(made["data"]),
        "--output",
        str(tmp_path / "o"),
    ]
    assert main([*argv, *SMALL, "--max-steps", "1", "--cache-dir", str(a_file)]) == 2
    assert f"--cache-dir {a_file} is a file; choose a directory." in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "o").exists() and a_file.read_text() == "mine\n"


@pytest.mark.parametrize("split", ["--train", "--eval"])
def test_a_run_folder_given_as_the_model_is_named_for_what_it_is(tmp_path: Path, capsys, split: str) -> None:
    """Before: a pretraining run stopped before its export (run.json and the run's own config.json, no
    export.json) was taken for a model and refused as holding no tokenizer, and a GLUE output as lacking a
    config.json. Now each is named, with what to give instead, before the output folder is made."""
    made = _self_contained(tmp_path)
    unexported = tmp_path / "unexported"
    unexported.mkdir()
    (unexported / "config.json").write_text(json.dumps({"hidden_size": 64, "objective": "electra"}))
    (unexported / "run.json").write_text(json.dumps({"corpus": "corpus.txt", "world_size": 1}))
    glue_output = tmp_path / "glue_out"
    glue_output.mkdir()
    (glue_output / "run.json").write_text(json.dumps({"command": "glue", "model": str(made["tiny"])}))
    expected = {
        unexported: f"--model {unexported}: a pretraining run of this library with no export yet",
        glue_output: f"--model {glue_output} is an `electra glue` output, not a model",
    }
    for model, message in expected.items():
        capsys.readouterr()
        argv = ["squad", "--model", str(model), split, str(made["data"]), "--output", str(tmp_path / "o")]
        assert main([*argv, *SMALL, "--max-steps", "1"]) == 2
        assert message in _one_line(capsys.readouterr().err)
        assert not (tmp_path / "o").exists()


def test_a_squad_output_given_to_init_from_is_named_as_one(tmp_path: Path) -> None:
    """Before: squad's run.json did not say which command wrote it, so `pretrain --init-from squad_out` (whose
    model is in squad_out/model) was refused as "a pretraining run of this library with no export yet"."""
    from electra.training.continued import kept_dir

    made = _self_contained(tmp_path)
    out = tmp_path / "o"
    argv = ["squad", "--model", str(made["tiny"]), "--train", str(made["data"]), "--output", str(out)]
    assert main([*argv, *SMALL, "--max-steps", "1"]) == 0
    assert json.loads((out / "run.json").read_text())["command"] == "squad"
    with pytest.raises(UserError, match=f"--init-from {out} is an `electra squad` output, not a model"):
        kept_dir(out)


def test_a_question_longer_than_the_model_is_cut_without_a_false_alarm(tmp_path: Path, capfd) -> None:
    """Before: a question longer than the tokenizer's model_max_length printed transformers' "Token indices sequence
    length is longer than ... will result in indexing errors" while being cut to --max-query-length, which it is."""
    from transformers import AutoTokenizer

    from electra.squad.data import SquadExample
    from electra.squad.features import FeatureSettings, build_features
    from tests.conftest import save_tiny_electra

    tokenizer = AutoTokenizer.from_pretrained(str(save_tiny_electra(tmp_path / "tiny")))
    tokenizer.model_max_length = 64
    words = "what module error value string loop"
    example = SquadExample("q1", "t", "the loop ran", " ".join([words] * 40), [])
    capfd.readouterr()
    features = build_features([example], tokenizer, FeatureSettings(64, 32, 16), train=False)
    assert len(features) == 1 and len(features[0]["input_ids"]) <= 64
    assert "indexing errors" not in capfd.readouterr().err


def test_an_evaluation_alone_with_resume_replaces_nothing(tmp_path: Path, capsys) -> None:
    """Before: `--resume` without `--train` skipped the check that keeps earlier results, so an evaluation replaced
    the results.json and predictions.json of an earlier run unasked."""
    data = tmp_path / "data.json"
    data.write_text(json.dumps(_payload({"text": "Denver", "answer_start": 0})))
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"mine": 1}')
    argv = ["squad", "--model", str(tmp_path / "m"), "--eval", str(data), "--output", str(out), "--resume"]
    assert main(argv) == 2
    assert "without --train there is nothing to resume" in _one_line(capsys.readouterr().err)
    assert (out / "results.json").read_text() == '{"mine": 1}'


def test_squad_eval_output_never_replaces_an_input_and_is_checked_first(tmp_path: Path, capsys) -> None:
    """Before: `--output` naming the --data (or --predictions) file replaced it with the scores, and a folder or a
    path that cannot be written was an IsADirectoryError or FileNotFoundError traceback once scoring was done."""
    data = tmp_path / "data.json"
    data.write_text(json.dumps(_payload({"text": "Denver", "answer_start": 0})))
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps({"q1": "Denver"}))
    argv = ["squad-eval", "--data", str(data), "--predictions", str(predictions), "--output"]
    before = {path: path.read_text() for path in (data, predictions)}
    for read, option in ((data, "--data"), (predictions, "--predictions")):
        assert main([*argv, str(read)]) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"--output {read} is the {option} file" in err and "choose another --output" in err
    assert {path: path.read_text() for path in before} == before
    assert main([*argv, str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"--output {tmp_path} is a directory" in _one_line(captured.err) and not captured.out
    assert main([*argv, str(data / "result.json")]) == 2  # under a file: nothing can be written there
    assert f"{data} is a file" in _one_line(capsys.readouterr().err)
    result = tmp_path / "new" / "result.json"  # a folder still to be made is made
    assert main([*argv, str(result)]) == 0
    assert json.loads(result.read_text())["exact_match"] == 100.0
    assert main([*argv, str(result)]) == 0  # an earlier result is replaced, as it always was
    capsys.readouterr()


def test_squad_eval_refuses_no_answer_scores_of_other_questions(tmp_path: Path, capsys) -> None:
    """Before: --na-probs written for another data file (its ids unknown here), or missing a question that has a
    prediction, scored those questions with a no-answer score of 0.0 in silence (the official script fails on a
    missing one); the scores below came out 100 with a threshold of 0.0."""
    payload = _payload({"text": "Denver", "answer_start": 0})
    payload["version"] = "v2.0"
    qas = payload["data"][0]["paragraphs"][0]["qas"]
    qas[0]["is_impossible"] = False
    qas.append({"id": "q2", "question": "Who lost?", "answers": [], "is_impossible": True})
    data = tmp_path / "data.json"
    data.write_text(json.dumps(payload))
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps({"q1": "Denver", "q2": "game"}))
    na_probs = tmp_path / "null_odds.json"
    argv = ["squad-eval", "--data", str(data), "--predictions", str(predictions), "--na-probs", str(na_probs)]
    na_probs.write_text(json.dumps({"other1": 3.0, "other2": -1.0}))
    assert main(argv) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{na_probs}: question other1 is not in {data} (2 unknown ids)" in err and "null_odds.json" in err
    na_probs.write_text(json.dumps({"q1": -2.0}))
    assert main(argv) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{na_probs}: no no-answer score for question q2, which {predictions} answers (1 missing)" in err
    na_probs.write_text(json.dumps({"q1": -2.0, "q2": 5.0}))  # the matching file scores as before
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["exact"] == 100.0 and result["best_exact"] == 100.0 and result["best_exact_thresh"] == -2.0


def test_resume_writes_nothing_into_a_users_folder_and_an_evaluation_is_not_offered_resume(
    tmp_path: Path, capsys
) -> None:
    """Before: `--resume` into a folder of the user's (their own train/, no run.json) wrote the run into it: their
    train/ got the logs, and the model, results and cache went beside; and an evaluation alone, refused for an
    earlier one's results, was offered --resume, which it refuses."""
    data = tmp_path / "data.json"
    data.write_text(json.dumps(_payload({"text": "Denver", "answer_start": 0})))
    out = tmp_path / "mine"
    (out / "train").mkdir(parents=True)
    (out / "train" / "notes.txt").write_text("mine\n")
    argv = ["squad", "--model", str(tmp_path / "m"), "--train", str(data), "--output", str(out), *SMALL]
    assert main([*argv, "--resume"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{out} holds train, but no run.json shows that a run wrote them" in err
    assert sorted(p.name for p in out.rglob("*")) == ["notes.txt", "train"]
    evaluated = tmp_path / "evaluated"  # an earlier evaluation alone: its results and predictions
    evaluated.mkdir()
    for name in ("results.json", "predictions.json"):
        (evaluated / name).write_text("{}\n")
    argv = ["squad", "--model", str(tmp_path / "m"), "--eval", str(data), "--output", str(evaluated)]
    assert main(argv) == 2
    err = _one_line(capsys.readouterr().err)
    assert (
        "already exists" in err
        and "pass --overwrite to replace it, or choose" in err
        and "--resume" not in err
    )


def test_the_models_limits_are_refused_before_overwrite_deletes(tmp_path: Path, capsys) -> None:
    """Before: a --tokenizer with more pieces than the model's embeddings, and a --max-seq-length cut to the
    model's 128 positions with no room left after --max-query-length 126, were refused only once the model loaded:
    --overwrite had deleted the earlier run and a run.json was written. The first named the model's folder, not
    the tokenizer's; the second said to raise --max-seq-length, which the model does not allow."""
    from transformers import ElectraTokenizerFast

    from tests.conftest import save_tiny_electra

    model = save_tiny_electra(tmp_path / "tiny")
    big = tmp_path / "big-tokenizer"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(200))]
    ElectraTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(str(big))
    data = tmp_path / "data.json"
    data.write_text(json.dumps(_payload({"text": "Denver", "answer_start": 0})))
    out = tmp_path / "out"
    (out / "model").mkdir(parents=True)
    earlier = json.dumps({"settings": {}, "eval": {"exact_match": 1.0}})
    (out / "results.json").write_text(earlier)
    argv = ["squad", "--model", str(model), "--train", str(data), "--output", str(out), "--overwrite"]
    capsys.readouterr()
    assert main([*argv, *SMALL, "--tokenizer", str(big)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{big}: its tokenizer has 205 pieces but the model's embeddings only" in err
    assert main([*argv, "--max-seq-length", "384", "--max-query-length", "126"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{model}: the model takes 128 positions, so --max-seq-length 384 is cut to 128" in err
    assert "give --max-query-length 124 or less" in err
    assert (out / "results.json").read_text() == earlier and (out / "model").is_dir()
    assert not (out / "run.json").exists()


def test_whitespace_at_an_answers_edges_is_not_labelled_as_tokens(tmp_path: Path) -> None:
    """Before: an answer " loop " (it matches its context, so it is read) was labelled from the token before it
    ("the") to the token after it, a span two tokens too wide."""
    from transformers import AutoTokenizer

    from electra.squad.data import Answer, SquadExample
    from electra.squad.features import FeatureSettings, build_features
    from tests.conftest import save_tiny_electra

    tokenizer = AutoTokenizer.from_pretrained(str(save_tiny_electra(tmp_path / "tiny")))
    context = "the loop ran the value"
    spans = {}
    for text in ("loop", " loop", "loop ", " loop "):
        start = context.index("loop") - text.startswith(" ")
        example = SquadExample("q", "t", context, "what loop ?", [Answer(text, start)])
        row = build_features([example], tokenizer, FeatureSettings(64, 32, 16), train=True)[0]
        ids = row["input_ids"][row["start_positions"] : row["end_positions"] + 1]
        spans[text] = tokenizer.convert_ids_to_tokens(ids)
    assert spans == {text: ["loop"] for text in spans}


def test_a_v2_file_read_as_v11_names_the_flag(tmp_path: Path) -> None:
    """Before: "question q2: no answers; an answerable question needs at least one (is this a v2.0 file?)": the
    file says it is, and `electra squad` reads 1.1 unless told; the fix is --version 2.0."""
    payload = _payload({"text": "Denver", "answer_start": 0})
    payload["version"] = "v2.0"
    qas = payload["data"][0]["paragraphs"][0]["qas"]
    qas[0]["is_impossible"] = False
    qas.append({"id": "q2", "question": "Who lost?", "answers": [], "is_impossible": True})
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(UserError) as info:
        read_squad(path, "1.1")
    assert str(info.value).startswith(f"{path}: question q2: an unanswerable question (is_impossible: true)")
    assert str(info.value).endswith("this is a SQuAD 2.0 file: pass --version 2.0.")
    assert [e.is_impossible for e in read_squad(path, "2.0")] == [False, True]
