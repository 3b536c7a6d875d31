"""GLUE readers on real rows from ../shared/data/glue, on hand-written MNLI/QQP files in the exact GLUE format,
and the one-line errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from electra.core.errors import UserError
from electra.glue.tasks import (
    TASKS,
    get_task,
    parse_task_list,
    read_examples,
    resolve_data_dir,
    swap_pairs,
    task_file,
)

# ---------------------------------------------------------------------------------------------- real GLUE files


@pytest.fixture(scope="module")
def glue_dir(shared_data) -> Path:
    return shared_data / "glue"


def _read(glue_dir, task, split, labelled=True):
    spec = get_task(task)
    return read_examples(task_file(glue_dir, spec, split), spec, labelled)


def test_cola_headerless_train_and_headed_test(glue_dir):
    train = _read(glue_dir, "cola", "train.tsv")
    assert len(train) == 8551
    assert train[0].label == "1" and train[0].text_b is None
    assert train[0].text_a == "Our friends won't buy this analysis, let alone the next one we propose."
    assert train[0].guid == "train.tsv:1"
    assert len(_read(glue_dir, "cola", "dev.tsv")) == 1043
    test = _read(glue_dir, "cola", "test.tsv", labelled=False)
    assert len(test) == 1063 and test[0].guid == "0" and test[0].text_a == "Bill whistled past the house."
    assert test[0].label is None


def test_sst2(glue_dir):
    train = _read(glue_dir, "sst2", "train.tsv")
    assert len(train) == 67349
    assert (train[0].text_a, train[0].label) == ("hide new secretions from the parental units ", "0")
    dev = _read(glue_dir, "sst-2", "dev.tsv")  # alias
    assert len(dev) == 872 and dev[0].label == "1"
    assert sum(ex.label == "1" for ex in dev) == 444  # majority class: 444 / 872 = 50.9%


def test_mrpc_header_with_byte_order_mark(glue_dir):
    train = _read(glue_dir, "mrpc", "train.tsv")
    assert len(train) == 3667  # the staged copy lacks one pair (see SOURCES.md)
    assert train[0].label == "1" and train[0].text_a.startswith("Amrozi accused his brother , whom he called")
    assert train[0].text_b.startswith("Referring to him as only")
    assert len(_read(glue_dir, "mrpc", "dev.tsv")) == 408
    test = _read(glue_dir, "mrpc", "test.tsv", labelled=False)
    assert len(test) == 1725 and [ex.guid for ex in test[:2]] == ["0", "1"]
    assert test[0].text_a.startswith("PCCW 's chief operating officer")


def test_stsb_scores_are_floats(glue_dir):
    train = _read(glue_dir, "stsb", "train.tsv")
    assert len(train) == 5749
    assert train[0].label == 5.0 and train[1].label == pytest.approx(3.8)
    assert (train[0].text_a, train[0].text_b) == ("A plane is taking off.", "An air plane is taking off.")
    assert len(_read(glue_dir, "stsb", "dev.tsv")) == 1500
    assert len(_read(glue_dir, "sts-b", "test.tsv", labelled=False)) == 1379


def test_rte_wnli_qnli(glue_dir):
    rte = _read(glue_dir, "rte", "train.tsv")
    assert len(rte) == 2490 and rte[0].label == "not_entailment"
    assert rte[0].text_a == "No Weapons of Mass Destruction Found in Iraq Yet."
    assert len(_read(glue_dir, "rte", "test.tsv", labelled=False)) == 3000
    wnli = _read(glue_dir, "wnli", "train.tsv")
    assert len(wnli) == 635 and wnli[0].label == "1" and wnli[0].text_b == "The carrot had a hole."
    # QNLI has unbalanced quotes in its text; reading without quoting keeps exactly one example per line.
    qnli = _read(glue_dir, "qnli", "dev.tsv")
    assert len(qnli) == 5463 and qnli[0].label == "entailment"
    assert qnli[0].text_a == "What came into force after the new constitution was herald?"
    test = _read(glue_dir, "qnli", "test.tsv", labelled=False)
    assert len(test) == 5463 and '"quiescent"' in test[0].text_b


def test_missing_real_split_names_the_file(glue_dir):
    with pytest.raises(UserError, match=r"QNLI/train\.tsv: file not found"):
        _read(glue_dir, "qnli", "train.tsv")


# ---------------------------------------------------------------------------------------- hand-written MNLI/QQP

MNLI_PREFIX = "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2"


def _mnli_row(i, s1, s2, labels=()):
    parses = ["( x )", "( y )", "(ROOT x)", "(ROOT y)"]
    return "\t".join([str(i), "31193", f"{i}n", "government", *parses, s1, s2, *labels])


def write_mnli(directory: Path) -> Path:
    mnli = directory / "MNLI"
    mnli.mkdir(parents=True)
    (mnli / "train.tsv").write_text(
        MNLI_PREFIX
        + "\tlabel1\tgold_label\n"
        + _mnli_row(
            0,
            "Conceptually cream skimming has two basic dimensions.",
            "Product and geography are what make cream skimming work. ",
            ["neutral", "neutral"],
        )
        + "\n"
        + _mnli_row(
            1,
            'you know during the season and i guess at at your level uh you lose them "',
            "You lose the things to the following level if the people recall.",
            ["entailment", "entailment"],
        )
        + "\n"
        + _mnli_row(
            2,
            "One of our number will carry out your instructions minutely.",
            "A member of my team will execute your orders with immense precision.",
            ["entailment", "contradiction"],
        )
        + "\n",
        encoding="utf-8",
    )
    for name in ("dev_matched", "dev_mismatched"):
        (mnli / f"{name}.tsv").write_text(
            MNLI_PREFIX
            + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
            + _mnli_row(
                0,
                "The new rights are nice enough",
                "Everyone really likes the newest benefits ",
                ["neutral", "entailment", "neutral", "neutral", "neutral", "neutral"],
            )
            + "\n"
            + _mnli_row(
                1,
                "This site includes a list of all award winners.",
                "The Government Executive articles housed on the website are not able to be searched.",
                ["contradiction"] * 5 + ["contradiction"],
            )
            + "\n",
            encoding="utf-8",
        )
    for name in ("test_matched", "test_mismatched"):
        (mnli / f"{name}.tsv").write_text(
            MNLI_PREFIX
            + "\n"
            + _mnli_row(0, "Hierbas, ans seco, ans dulce, and frigola.", "Hierbas is a name.")
            + "\n"
            + _mnli_row(
                1, "The extent of the behavioral effects would depend.", "Many things would be affected."
            )
            + "\n",
            encoding="utf-8",
        )
    diagnostic = directory / "diagnostic"
    diagnostic.mkdir()
    (diagnostic / "diagnostic.tsv").write_text(
        "index\tsentence1\tsentence2\n0\tThe cat sat on the mat.\tThe cat did not sit on the mat.\n",
        encoding="utf-8",
    )
    return directory


def write_qqp(directory: Path) -> Path:
    qqp = directory / "QQP"
    qqp.mkdir(parents=True)
    header = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
    rows = [
        "133273\t213221\t213222\tHow is the life of a math student? Could you describe your own experiences?\tWhich level of prepration is enough for the exam jlpt5?\t0",
        '402555\t536040\t536041\tHow do I control my horny emotions?\tHow do you control your "horniness?\t1',
    ]
    (qqp / "train.tsv").write_text(header + "\n".join(rows) + "\n", encoding="utf-8")
    (qqp / "dev.tsv").write_text(header + "\n".join(reversed(rows)) + "\n", encoding="utf-8")
    (qqp / "test.tsv").write_text(
        "id\tquestion1\tquestion2\n0\tWhy do rockets look white?\tWhy are rockets and boosters painted white?\n",
        encoding="utf-8",
    )
    return directory


def test_mnli_reader_on_glue_format_rows(tmp_path):
    data = write_mnli(tmp_path)
    spec = get_task("mnli")
    train = read_examples(task_file(data, spec, "train.tsv"), spec, labelled=True)
    assert [ex.label for ex in train] == ["neutral", "entailment", "contradiction"]  # gold_label, not label1
    assert train[1].text_a.endswith('level uh you lose them "')  # a stray quote stays text
    dev = {
        name: read_examples(task_file(data, spec, rel), spec, True) for name, rel in spec.dev_files.items()
    }
    assert set(dev) == {"mnli", "mnli-mm"}
    assert [ex.label for ex in dev["mnli"]] == ["neutral", "contradiction"]
    assert dev["mnli"][0].text_b == "Everyone really likes the newest benefits "
    test = read_examples(task_file(data, spec, "test_matched.tsv"), spec, labelled=False)
    assert [ex.guid for ex in test] == ["0", "1"] and test[0].text_b == "Hierbas is a name."
    ax = read_examples(task_file(data, spec, spec.test_files["AX"]), spec, labelled=False)
    assert ax[0].text_b == "The cat did not sit on the mat."


def test_qqp_reader_on_glue_format_rows(tmp_path):
    data = write_qqp(tmp_path)
    spec = get_task("qqp")
    train = read_examples(task_file(data, spec, "train.tsv"), spec, labelled=True)
    assert [ex.label for ex in train] == ["0", "1"]
    assert train[1].text_b == 'How do you control your "horniness?'
    test = read_examples(task_file(data, spec, "test.tsv"), spec, labelled=False)
    assert test[0].guid == "0" and test[0].text_a == "Why do rockets look white?"


# --------------------------------------------------------------------------------------------------- bad input


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_label_outside_label_set_names_file_and_line(tmp_path):
    path = _write(
        tmp_path / "RTE/train.tsv",
        "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\tmaybe\n",
    )
    with pytest.raises(
        UserError, match=r"RTE/train\.tsv:3: label 'maybe' is not one of entailment, not_entailment"
    ):
        read_examples(path, get_task("rte"), labelled=True)


def test_missing_column_names_file_and_header(tmp_path):
    path = _write(tmp_path / "RTE/dev.tsv", "index\tsentence1\tsentence_two\tlabel\n0\ta\tb\tentailment\n")
    with pytest.raises(UserError, match=r"dev\.tsv:1: no column 'sentence2'"):
        read_examples(path, get_task("rte"), labelled=True)


def test_short_row_empty_split_bad_score(tmp_path):
    short = _write(tmp_path / "a/train.tsv", "sentence\tlabel\ngood film\t1\nno tab here\n")
    with pytest.raises(UserError, match=r"train\.tsv:3: expected at least 2 tab-separated fields, found 1"):
        read_examples(short, get_task("sst2"), labelled=True)
    empty = _write(tmp_path / "b/dev.tsv", "sentence\tlabel\n")
    with pytest.raises(UserError, match=r"dev\.tsv: no examples"):
        read_examples(empty, get_task("sst2"), labelled=True)
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    bad = _write(tmp_path / "c/train.tsv", header + "0\tg\tf\ty\t1\tn\tn\tA.\tB.\tfive\n")
    with pytest.raises(UserError, match=r"train\.tsv:2: score 'five' is not a number"):
        read_examples(bad, get_task("stsb"), labelled=True)
    typo = _write(
        tmp_path / "d/train.tsv",
        header + "0\tg\tf\ty\t1\tn\tn\tA.\tB.\t5.0\n1\tg\tf\ty\t1\tn\tn\tA.\tC.\t45\n",
    )
    with pytest.raises(UserError, match=r"train\.tsv:3: score '45' is outside 0-5"):
        read_examples(typo, get_task("stsb"), labelled=True)
    with pytest.raises(UserError, match=r"file not found"):
        read_examples(tmp_path / "missing.tsv", get_task("sst2"), labelled=True)


def test_task_names_and_data_dir(tmp_path, monkeypatch):
    assert [s.name for s in parse_task_list("all")] == list(TASKS)
    assert [s.name for s in parse_task_list("RTE,sts-b,rte")] == ["rte", "stsb"]
    with pytest.raises(UserError, match="unknown GLUE task 'squad'"):
        parse_task_list("squad")
    monkeypatch.delenv("GLUE_DIR", raising=False)
    with pytest.raises(UserError, match="GLUE_DIR"):
        resolve_data_dir(None)
    monkeypatch.setenv("GLUE_DIR", str(tmp_path))
    assert resolve_data_dir(None) == tmp_path


def test_swap_pairs_keeps_labels():
    from electra.glue.tasks import Example

    swapped = swap_pairs([Example("x:2", "first", "second", 3.5)])
    assert (swapped[0].text_a, swapped[0].text_b, swapped[0].label) == ("second", "first", 3.5)


def test_skip_malformed_rows_and_line_separators_inside_text(tmp_path):
    # U+2028 and U+0085 inside a sentence must not split the row (str.splitlines would); CRLF endings are fine.
    text = "sentence\tlabel\r\na fine\u2028film\t1\r\nbroken row\r\nnot\x85good\t0\r\n"
    path = _write(tmp_path / "SST-2/train.tsv", text)
    with pytest.raises(UserError, match=r"train\.tsv:3: expected at least 2"):
        read_examples(path, get_task("sst2"), labelled=True)
    examples = read_examples(path, get_task("sst2"), labelled=True, skip_malformed=True)
    assert [(ex.text_a, ex.label, ex.guid) for ex in examples] == [
        ("a fine\u2028film", "1", "train.tsv:2"),
        ("not\x85good", "0", "train.tsv:4"),
    ]
    empty = _write(tmp_path / "CoLA/train.tsv", "\n")
    with pytest.raises(UserError, match=r"CoLA/train\.tsv: the file is empty"):
        read_examples(empty, get_task("cola"), labelled=True)


def test_undecodable_and_utf16_files(tmp_path):
    """Before: a task file in Latin-1 (or any non-UTF-8 bytes) stopped `electra glue` with a UnicodeDecodeError
    traceback, and so did a UTF-16 file saved by a Windows editor. Now the first is one line naming the file, the
    line and the fix, and the second is read through its byte-order mark."""
    latin = tmp_path / "SST-2" / "train.tsv"
    latin.parent.mkdir()
    latin.write_bytes(b"sentence\tlabel\ngood film\t1\nmod\xe9le\t0\n")
    with pytest.raises(
        UserError,
        match=r"train\.tsv:3: not UTF-8 text: undecodable bytes at offset 30; expected a GLUE.*iconv",
    ):
        read_examples(latin, get_task("sst2"), labelled=True)
    latin.write_bytes(b"\xef\xbb\xbf" + latin.read_bytes())  # a UTF-8 byte-order mark before the bad byte
    with pytest.raises(UserError, match=r"train\.tsv:3: not UTF-8 text: undecodable bytes at offset 33"):
        read_examples(latin, get_task("sst2"), labelled=True)
    wide = tmp_path / "SST-2" / "dev.tsv"
    wide.write_bytes("sentence\tlabel\r\nun café\t1\r\n".encode("utf-16"))
    examples = read_examples(wide, get_task("sst2"), labelled=True)
    assert [(ex.text_a, ex.label) for ex in examples] == [("un café", "1")]
    wide.write_bytes(
        "sentence\tlabel\nun film\t1\n".encode("utf-16-le")
    )  # no mark: valid UTF-8, full of NULs
    with pytest.raises(
        UserError, match=r"dev\.tsv: UTF-16 text without a byte-order mark.*iconv -f utf-16le"
    ):
        read_examples(wide, get_task("sst2"), labelled=True)


def test_a_row_with_more_fields_than_the_header_is_refused(tmp_path):
    """Before: a row with a tab inside its text was read with its columns shifted and no word said: a CoLA
    sentence lost what followed the tab, an MNLI pair took the tail of sentence 1 for sentence 2. Now it is one
    line naming the row (--skip-malformed drops it); a tab at the very end of a row shifts nothing and passes,
    and a `"` inside a sentence (GLUE is unquoted) still never merges rows."""
    cola = _write(tmp_path / "CoLA/train.tsv", "gj04\t1\t\tThe book fell.\ngj04\t0\t*\tBook the\tfell.\n")
    with pytest.raises(UserError, match=r"CoLA/train\.tsv:2: 5 tab-separated fields where the layout has 4"):
        read_examples(cola, get_task("cola"), labelled=True)
    assert [ex.text_a for ex in read_examples(cola, get_task("cola"), True, skip_malformed=True)] == [
        "The book fell."
    ]
    header = "index\tsentence1\tsentence2\tlabel\n"
    rte = _write(tmp_path / "RTE/dev.tsv", header + "0\tA cat\tsat.\tA cat sat.\tentailment\n")
    with pytest.raises(
        UserError, match=r"RTE/dev\.tsv:2: 5 tab-separated fields where the header has 4; a tab"
    ):
        read_examples(rte, get_task("rte"), labelled=True)
    rows = '0\tHe said "no.\tHe spoke.\tentailment\t\n1\tShe left."\tShe stayed.\tnot_entailment\n'
    quoted = _write(tmp_path / "RTE/train.tsv", header + rows)
    examples = read_examples(quoted, get_task("rte"), labelled=True)
    assert [(ex.text_a, ex.label) for ex in examples] == [
        ('He said "no.', "entailment"),
        ('She left."', "not_entailment"),
    ]


def test_a_comma_separated_file_is_named_as_such(tmp_path):
    path = _write(tmp_path / "SST-2/train.tsv", "sentence,label\ngood,1\n")
    with pytest.raises(UserError, match=r"the header has no tab, but GLUE files are tab-separated"):
        read_examples(path, get_task("sst2"), labelled=True)


def test_a_test_row_needs_its_own_id(tmp_path):
    """Before: a test row with an empty id, or the id of an earlier row, was written to the predictions TSV as it
    was, and the GLUE server (which matches predictions to rows by it) scored the submission wrong. Now each is
    one line naming the row; a file without an id column numbers its rows, blank lines not counted (they had
    shifted every later id)."""
    rte = _write(tmp_path / "RTE/test.tsv", "index\tsentence1\tsentence2\n0\ta\tb\n\tc\td\n")
    with pytest.raises(UserError, match=r"RTE/test\.tsv:3: the 'index' field is empty; give the row its id"):
        read_examples(rte, get_task("rte"), labelled=False)
    _write(rte, "index\tsentence1\tsentence2\n0\ta\tb\n1\tc\td\n\n 0 \te\tf\n")
    with pytest.raises(
        UserError, match=r"RTE/test\.tsv:5: index '0' repeats line 2's; each test row needs its own id"
    ):
        read_examples(rte, get_task("rte"), labelled=False)
    qqp = _write(tmp_path / "QQP/test.tsv", "id\tquestion1\tquestion2\n7\ta?\tb?\n7\tc?\td?\n")
    with pytest.raises(UserError, match=r"QQP/test\.tsv:3: id '7' repeats line 2's"):
        read_examples(qqp, get_task("qqp"), labelled=False)
    _write(rte, "index\tsentence1\tsentence2\n0\ta\tb\n\n2\tc\td\n")  # ids need not be consecutive
    assert [ex.guid for ex in read_examples(rte, get_task("rte"), labelled=False)] == ["0", "2"]
    unnumbered = _write(tmp_path / "SST-2/test.tsv", "sentence\ngood\n\nbad\nfine\n")
    examples = read_examples(unnumbered, get_task("sst2"), labelled=False)
    assert [(ex.guid, ex.text_a) for ex in examples] == [("0", "good"), ("1", "bad"), ("2", "fine")]
