import json

import pytest

from electra.app.cli import main
from electra.core.config import SIZES
from electra.core.config_files import load_config_file, parse_overrides
from electra.core.errors import ElectraWarning, UserError
from electra.objectives import build_config

# The ELECTRA paper's Table 6 / dissertation Table 5.1: layers, hidden, FFN, heads, embedding, generator
# multiplier, mask percent, learning rate, batch size, train steps.
PAPER = {
    "small": (12, 256, 1024, 4, 128, 1 / 4, 0.15, 5e-4, 128, 1_000_000),
    "base": (12, 768, 3072, 12, 768, 1 / 3, 0.15, 2e-4, 256, 766_000),
    "large": (24, 1024, 4096, 16, 1024, 1 / 4, 0.25, 2e-4, 2048, 400_000),
}


@pytest.mark.parametrize("size", list(PAPER))
def test_paper_sizes(size):
    c = build_config(size)
    got = (
        c.num_hidden_layers,
        c.hidden_size,
        c.intermediate_size,
        c.num_attention_heads,
        c.embedding_size,
        c.generator_hidden_multiplier,
        c.mask_prob,
        c.learning_rate,
        c.train_batch_size,
        c.max_steps,
    )
    assert got == pytest.approx(PAPER[size])
    assert c.warmup_steps == 10_000
    assert c.hidden_size // c.num_attention_heads == 64


def test_generator_shape_follows_multiplier():
    small = build_config("small")
    assert (
        small.generator_hidden_size,
        small.generator_intermediate_size,
        small.generator_num_attention_heads,
    ) == (64, 256, 1)
    base = build_config("base")
    assert (
        base.generator_hidden_size,
        base.generator_intermediate_size,
        base.generator_num_attention_heads,
    ) == (256, 1024, 4)
    assert small.generator_layers == small.num_hidden_layers


def test_overrides_are_typed_and_layered(tmp_path):
    config_file = tmp_path / "c.json"
    config_file.write_text(json.dumps({"hidden_size": 128, "num_attention_heads": 2, "learning_rate": 3e-4}))
    c = build_config(
        "small", config_file, parse_overrides(["learning_rate=1e-3", "max_steps=2e3", "compile=true"])
    )
    assert c.hidden_size == 128 and c.learning_rate == 1e-3 and c.max_steps == 2000 and c.compile is True


def test_mlm_objective_uses_bert_masking():
    c = build_config("tiny", overrides={"objective": "mlm"})
    assert (c.mask_token_prob, c.random_token_prob) == (0.8, 0.1)
    assert build_config("tiny").random_token_prob == 0.0


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"size": "huge"}, "unknown size"),
        ({"overrides": {"hiden_size": 3}}, "hiden_size"),
        ({"overrides": {"objective": "xlnet"}}, "objective"),
        ({"overrides": {"hidden_size": "abc"}}, "hidden_size"),
        ({"overrides": {"embedding_sharing": "all"}}, "generator_hidden_multiplier=1.0"),
    ],
)
def test_bad_configs_raise_one_clear_error(kwargs, fragment):
    with pytest.raises(UserError, match=fragment):
        build_config(**{"size": "tiny", **kwargs})


def test_unknown_key_in_file_names_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hidden": 3}')
    with pytest.raises(UserError, match="bad.json"):
        build_config("tiny", bad)


# (hidden, layers, heads, FFN, embedding, generator width, sequence, batch, steps, learning rate): the ELECTRA paper's
# Table 6 for small/base/large, and the two CPU sizes as docs/pretraining describes them.
SIZE_TABLE = {
    "tiny": (128, 4, 2, 512, 128, 1 / 2, 128, 32, 600, 1e-3),
    "mini": (256, 4, 4, 1024, 128, 1 / 4, 128, 64, 10_000, 1e-3),
    "small": (256, 12, 4, 1024, 128, 1 / 4, 128, 128, 1_000_000, 5e-4),
    "base": (768, 12, 12, 3072, 768, 1 / 3, 512, 256, 766_000, 2e-4),
    "large": (1024, 24, 16, 4096, 1024, 1 / 4, 512, 2048, 400_000, 2e-4),
}


def test_every_size_validates_with_the_papers_hyperparameters():
    assert set(SIZES) == set(SIZE_TABLE)
    for size, expected in SIZE_TABLE.items():
        c = build_config(size)
        got = (
            c.hidden_size,
            c.num_hidden_layers,
            c.num_attention_heads,
            c.intermediate_size,
            c.embedding_size,
            c.generator_hidden_multiplier,
            c.max_seq_length,
            c.train_batch_size,
            c.max_steps,
            c.learning_rate,
        )
        assert got == pytest.approx(expected, rel=1e-12), size


@pytest.mark.parametrize(
    "value, fragment",
    [
        ({"num_hidden_layers": 2.5}, "num_hidden_layers=2.5 is not a whole number"),
        ({"max_steps": "abc"}, "max_steps='abc' is not a valid int"),
        ({"compile": "maybe"}, "compile='maybe' is not a valid bool"),
        ({"mixed_precision": True}, "mixed_precision=True is not a valid str"),
        ({"learning_rate": [1]}, "learning_rate=\\[1\\] is not a valid float"),
        ({"hidden_size": None}, "hidden_size cannot be empty"),
    ],
)
def test_json_values_of_the_wrong_type_name_the_file(tmp_path, value, fragment):
    """Before: a float layer count reached transformers and ended in a traceback."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(value))
    with pytest.raises(UserError, match=f"config file {path}: {fragment}"):
        build_config("tiny", path)


@pytest.mark.parametrize(
    "override, fragment",
    [
        (
            {"max_steps": "5e-1"},
            "not a whole number",
        ),  # was floored to 0: an untrained model exported with exit 0
        ({"max_steps": "0"}, "max_steps must be at least 1"),
        ({"save_every": "0"}, "save_every must be at least 1"),  # was a division by zero after the first step
        ({"train_batch_size": "-4"}, "train_batch_size must be at least 1"),
        ({"num_attention_heads": "0"}, "num_attention_heads must be at least 1"),
        ({"flops_budget": "0"}, "flops_budget must be positive"),
        ({"time_budget_minutes": "0"}, "time_budget_minutes must be positive"),  # TrainArgs trusts it
        ({"cpu_dropout": "fast"}, "cpu_dropout='fast' is not one of lanes, torch"),
        ({"warmup_steps": "-1"}, "warmup_steps must not be negative"),
        ({"lr_schedule": "cosine"}, "lr_schedule='cosine' is not one of linear, reference"),
        ({"schedule_clock": "flops"}, "schedule_clock='flops' is not one of steps, time"),
        ({"schedule_clock": "time"}, "give one \\(--time-budget MINUTES\\)"),
    ],
)
def test_counts_and_choices_are_checked(override, fragment):
    with pytest.raises(UserError, match=fragment):
        build_config("tiny", overrides=override)
    assert build_config("tiny", overrides={"max_steps": "1e3"}).max_steps == 1000  # integral: accepted


def test_yaml_config_files(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("hidden_size: 64\nnum_attention_heads: 2\nlearning_rate: 3.0e-4\n")
    config = build_config("tiny", path)
    assert (config.hidden_size, config.num_attention_heads, config.learning_rate) == (64, 2, 3e-4)
    path.write_text("- not a mapping\n")
    with pytest.raises(UserError, match="must hold a YAML mapping"):
        build_config("tiny", path)


@pytest.mark.parametrize(
    ("overrides", "on_gpu", "processes", "expected"),
    [
        ({}, False, 1, (False, "default")),  # a CPU: compilation did not pay here
        ({}, True, 1, (True, "reduce-overhead")),  # one GPU: CUDA graphs, 2.3x the eager step
        ({}, True, 2, (False, "reduce-overhead")),  # several processes: opt in
        ({"compile": False}, True, 1, (False, "reduce-overhead")),
        ({"compile": True, "compile_mode": "max-autotune"}, False, 1, (True, "max-autotune")),
    ],
)
def test_compile_plan_follows_the_measurements_unless_told(overrides, on_gpu, processes, expected):
    from electra.training.pretraining import compile_plan

    assert compile_plan(build_config("small", overrides=overrides), on_gpu, processes) == expected


def test_compile_plan_stays_eager_on_a_torch_that_cannot_compile_the_step(monkeypatch):
    """Under torch 2.7 the compiler fails inside transformers' encoder: one GPU's default (compile) falls back to
    eager with a warning, and an explicit --compile gets a one-line error instead of a compiler traceback."""
    from electra.training import pretraining

    monkeypatch.setattr(pretraining.torch, "__version__", "2.6.0+cu124")
    with pytest.warns(UserWarning, match="training eagerly"):
        assert pretraining.compile_plan(build_config("small"), True, 1) == (False, "reduce-overhead")
    with pytest.raises(UserError, match="--compile needs torch >= 2.7"):
        pretraining.compile_plan(build_config("small", overrides={"compile": True}), True, 1)
    assert pretraining.compile_plan(build_config("small", overrides={"compile": False}), True, 1)[0] is False
    monkeypatch.setattr(pretraining.torch, "__version__", "2.10.1")
    assert pretraining.compile_plan(build_config("small"), True, 1) == (True, "reduce-overhead")


def test_an_unknown_compile_mode_is_refused():
    with pytest.raises(UserError, match="compile_mode='fast' is not one of default, reduce-overhead"):
        build_config("small", overrides={"compile_mode": "fast"})


@pytest.mark.parametrize("raw", ["inf", "-inf", "1e400", float("inf")])
def test_an_infinite_float_is_refused_where_it_is_given(raw):
    """Before: `--set generator_hidden_multiplier=inf` passed every check (inf is positive) and ended in an
    OverflowError traceback when the generator's width was rounded; `max_grad_norm=inf` and a loss weight of inf
    were accepted too. No field reads inf as "unbounded" (None says "none"), so it is refused in one line."""
    with pytest.raises(UserError, match="generator_hidden_multiplier=.* is not a finite number"):
        build_config("tiny", overrides={"generator_hidden_multiplier": raw})
    config = build_config("tiny")
    config.max_grad_norm = float("inf")  # set on the object, past coercion: the range check still holds
    with pytest.raises(UserError, match="max_grad_norm must be at least 0, got inf"):
        config.validate()


@pytest.mark.parametrize("item", ["=3", " =3", "="])
def test_an_override_with_an_empty_key_says_so(item):
    """Before: `--set =3` was "unknown config key(s): ." (an empty name in a list of unknown ones)."""
    with pytest.raises(UserError, match="the KEY is empty; write it as KEY=VALUE") as err:
        parse_overrides([item])
    assert "\n" not in str(err.value) and repr(item) in str(err.value)
    assert parse_overrides(["max_steps=3"]) == {"max_steps": "3"}


def test_an_empty_set_key_is_one_line_from_the_command(capsys):
    assert main(["pretrain", "--help-config", "--set", "=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'=3': the KEY is empty; write it as KEY=VALUE" in err
    assert "unknown config key" not in err


def test_a_key_given_twice_in_a_json_config_is_refused(tmp_path, capsys):
    """Before: `{"max_steps": 5, "max_steps": 7}` trained for 7 steps, the first value silently dropped."""
    path = tmp_path / "c.json"
    path.write_text('{"max_steps": 5, "hidden_size": 64, "max_steps": 7}')
    with pytest.raises(
        UserError, match=f"config file {path}: key 'max_steps' is given more than once"
    ) as err:
        build_config("tiny", path)
    assert "\n" not in str(err.value)
    assert main(["pretrain", "--help-config", "--config", str(path)]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and str(path) in said and "'max_steps'" in said
    path.write_text('{"max_steps": 5, "hidden_size": 64}')  # each key once: read as before
    assert build_config("tiny", path).max_steps == 5


def test_config_files_are_decoded_as_every_user_file_is(tmp_path):
    """Before: a UTF-8 byte-order mark (Notepad's "UTF-8 with BOM") was "not valid JSON (Unexpected UTF-8 BOM)",
    and UTF-16 (PowerShell's `>`) an undecodable-bytes message; now both read as other user files do."""
    path = tmp_path / "c.json"
    text = json.dumps({"max_steps": 9, "hidden_size": 64, "num_attention_heads": 2})
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert build_config("tiny", path).max_steps == 9
    path.write_bytes(text.encode("utf-16"))
    with pytest.warns(ElectraWarning, match=f"config file {path} is UTF-16"):
        assert build_config("tiny", path).max_steps == 9
    yaml_path = tmp_path / "c.yaml"
    yaml_path.write_bytes("\ufeffmax_steps: 13\n".encode())
    assert build_config("tiny", yaml_path).max_steps == 13
    for data, fragment in (
        (text.encode("utf-16-le"), "UTF-16 text without a byte-order mark"),
        (b'{"max_steps": 9, "run_name": "caf\xe9"}', "not UTF-8 text: undecodable bytes at offset 33"),
        (b'{"max_steps": 9}\x00', "holds NUL bytes"),
    ):
        path.write_bytes(data)
        with pytest.raises(UserError, match=fragment) as err:
            build_config("tiny", path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_key_given_twice_in_a_yaml_config_is_refused_and_merges_still_override(tmp_path):
    """Before: PyYAML kept the last of two `max_steps:` lines in silence. A merge (`<<: *base`) is not a repeat:
    its keys are there to be overridden."""
    path = tmp_path / "c.yaml"
    path.write_text("max_steps: 5\nhidden_size: 64\nmax_steps: 7\n")
    with pytest.raises(
        UserError, match=f"config file {path}:3: key 'max_steps' is given more than once"
    ) as err:
        build_config("tiny", path)
    assert "\n" not in str(err.value)
    path.write_text("outer:\n  a: 1\n  a: 2\n")  # a mapping nested in another is checked as well
    with pytest.raises(UserError, match=f"config file {path}:3: key 'a' is given more than once"):
        load_config_file(path)
    path.write_text("defaults: &d {max_steps: 5, learning_rate: 0.001}\nrun:\n  <<: *d\n  max_steps: 9\n")
    assert load_config_file(path)["run"] == {"max_steps": 9, "learning_rate": 0.001}
    path.write_text("max_steps: 5\nhidden_size: 64\n")
    assert build_config("tiny", path).max_steps == 5
