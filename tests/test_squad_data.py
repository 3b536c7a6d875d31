"""SQuAD readers: the real dev set reads in full; bad input fails with one line naming the question id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.app.cli import main
from electra.core.errors import UserError
from electra.squad.data import read_squad
from electra.squad.synthetic import construct_lookup, construct_v2, split_articles, swap_questions, write_json


def _file(tmp_path: Path, payload: object, name: str = "data.json") -> Path:
    path = tmp_path / name
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return path


def _one(qa: dict, context: str = "Denver won the game in 2016.", version: str = "1.1") -> dict:
    return {"version": version, "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}]}


def test_reads_the_real_dev_set(shared_data) -> None:
    examples = read_squad(shared_data / "squad" / "dev-v1.1.json")
    assert len(examples) == 10570  # the official count of SQuAD 1.1 dev questions
    assert len({e.qid for e in examples}) == len(examples)
    for e in examples[:500]:
        for answer in e.answers:
            assert e.context[answer.start : answer.end] == answer.text


def test_v2_fields(tmp_path: Path) -> None:
    qa_no = {
        "id": "q2",
        "question": "Who lost?",
        "answers": [],
        "is_impossible": True,
        "plausible_answers": [{"text": "Denver", "answer_start": 0}],
    }
    qa_yes = {
        "id": "q1",
        "question": "Who won?",
        "answers": [{"text": "Denver", "answer_start": 0}],
        "is_impossible": False,
    }
    payload = _one(qa_yes, version="v2.0")
    payload["data"][0]["paragraphs"][0]["qas"].append(qa_no)
    examples = read_squad(_file(tmp_path, payload))
    assert [e.is_impossible for e in examples] == [False, True]
    assert examples[1].answers == [] and examples[1].plausible_answers[0].text == "Denver"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ('{"data": [', "the file was cut short"),  # said so since tests/test_squad_faults.py
        ('{"data": [}', "malformed JSON"),
        ({"version": "1.1"}, "'data' list"),
        (
            _one({"id": "q7", "answers": [{"text": "Denver", "answer_start": 0}]}),
            "question q7: missing field 'question'",
        ),
        (
            _one({"id": "q8", "question": "Who?", "answers": [{"text": "Denver"}]}),
            "question q8 (answers): missing field 'answer_start'",
        ),
        (
            _one({"id": "q9", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 3}]}),
            "question q9: answer 'Denver' does not match the context at answer_start=3",
        ),
        (_one({"id": "q10", "question": "Who?", "answers": []}), "question q10: no answers"),
        (
            _one({"id": "q11", "question": "Who?", "answers": []}, version="v2.0"),
            "question q11: missing field 'is_impossible'",
        ),
    ],
)
def test_bad_input_names_the_file_and_question(tmp_path: Path, payload: object, message: str) -> None:
    path = _file(tmp_path, payload)
    with pytest.raises(UserError) as info:
        read_squad(path)
    assert str(path) in str(info.value) and message in str(info.value)
    assert "\n" not in str(info.value)


def test_cli_reports_bad_input_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = _file(
        tmp_path, _one({"id": "q9", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 3}]})
    )
    preds = _file(tmp_path, {"q9": "Denver"}, "preds.json")
    # The official evaluation scores such a file; squad-eval does too and warns (training on it is refused).
    assert main(["squad-eval", "--data", str(bad), "--predictions", str(preds)]) == 0
    assert "question q9" in capsys.readouterr().err
    missing = _file(tmp_path, {"q404": "x"}, "unknown.json")
    assert main(["squad-eval", "--data", str(bad), "--predictions", str(missing)]) == 2
    assert "question q404 is not in" in capsys.readouterr().err


def test_squad_eval_cli_matches_hand_numbers(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    qa1 = {"id": "q1", "question": "Who won?", "answers": [{"text": "Denver", "answer_start": 0}]}
    qa2 = {"id": "q2", "question": "When?", "answers": [{"text": "in 2016", "answer_start": 20}]}
    payload = _one(qa1)
    payload["data"][0]["paragraphs"][0]["qas"].append(qa2)
    data = _file(tmp_path, payload)
    # q1 exact; q2 "2016 game" vs "in 2016": [2016, game] vs [in, 2016], P = R = 1/2 -> F1 0.5.
    preds = _file(tmp_path, {"q1": "denver.", "q2": "2016 game"}, "preds.json")
    out = tmp_path / "result.json"
    assert main(["squad-eval", "--data", str(data), "--predictions", str(preds), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["exact_match"] == pytest.approx(50.0) and result["f1"] == pytest.approx(75.0)
    capsys.readouterr()


def test_constructed_v2_data_reads_back(shared_data, tmp_path: Path) -> None:
    """Constructed 2.0-format data (questions moved to another article's paragraph, marked unanswerable)."""
    train, held_out = split_articles(shared_data / "squad" / "dev-v1.1.json", 40)
    assert len(train["data"]) == 40 and len(held_out["data"]) == 8
    path = write_json(construct_v2(held_out), tmp_path / "v2.json")
    examples = read_squad(path)
    moved = [e for e in examples if e.is_impossible]
    assert moved and all(e.qid.endswith("_moved") and not e.answers for e in moved)
    titles = {e.qid: e.title for e in examples}
    # A moved question sits in a different article from the one it was written for.
    assert all(titles[e.qid] != titles[e.qid.removesuffix("_moved")] for e in moved)


def test_lookup_questions_name_their_unique_answer() -> None:
    """Lookup questions (the long learning check's data): each names a span that occurs once in its paragraph, the
    answer is that span at its offset, and swapping moves the question texts only."""
    context = (
        "The lower Rhine flows north. The river Rhine crosses Basel, then flows north again past Münster."
    )
    payload = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": []}]}]}
    lookup = construct_lookup(payload, per_paragraph=50, seed=0)
    qas = lookup["data"][0]["paragraphs"][0]["qas"]
    spans = {qa["answers"][0]["text"] for qa in qas}
    # a comma breaks a span; words twice in the paragraph, or shorter than four letters, are never answers
    assert "lower Rhine" in spans and "Basel" in spans and "crosses Basel then" not in spans
    assert not spans & {"Rhine", "flows", "north", "flows north", "The", "nster"}
    for qa in qas:
        answer = qa["answers"][0]
        assert context[answer["answer_start"] :].startswith(answer["text"])
        assert qa["question"] == f"Where is '{answer['text']}'?"
        assert context.lower().count(answer["text"].lower()) == 1
    assert payload["data"][0]["paragraphs"][0]["qas"] == []  # the input is not modified

    second = {"context": "Basel lies on the Rhine.", "qas": [{"id": "b", "question": "Q2?", "answers": []}]}
    two = {
        "version": "1.1",
        "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas[:2]}, second]}],
    }
    swapped = swap_questions(two)["data"][0]["paragraphs"]
    assert [qa["question"] for qa in swapped[0]["qas"]] == ["Q2?", "Q2?"]
    assert swapped[1]["qas"][0]["question"] == qas[0]["question"]
    assert [qa["answers"] for qa in swapped[0]["qas"]] == [qa["answers"] for qa in qas[:2]]
