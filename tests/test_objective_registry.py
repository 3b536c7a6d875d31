"""One registry is the only list of objectives, and a new objective is one class: proven with a toy defined here.

The toy, "uniform replacement detection", is ELECTRA without a generator: 15% of the tokens are replaced by tokens
drawn uniformly from the vocabulary and the discriminator learns to spot them. Nothing outside this file knows it,
yet it trains through the public API, its FLOPs are counted from its declaration, it exports, the CLI offers it.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import ElectraForPreTraining

import electra
from electra.core.config import load_saved_config
from electra.core.errors import UserError
from electra.core.outputs import StepOutput
from electra.discriminators.replaced_token import ReplacedTokenDiscriminator, replaced_token_loss
from electra.flops.analytic import FlopPlan
from electra.nn.hf_configs import discriminator_hf_config
from electra.nn.masking import choose_positions
from electra.nn.metrics import discriminator_metrics


@electra.register_objective
class UniformReplacementDetection(electra.Objective):
    name = "toy-uniform-rtd"
    summary = "replaced-token detection against uniformly random replacements (a test objective)"

    def build(self, model, token_counts=None):
        model.discriminator = ReplacedTokenDiscriminator(
            discriminator_hf_config(model.config, model.special.pad)
        )

    def step(self, model, input_ids, attention_mask, token_type_ids):
        positions = choose_positions(input_ids, attention_mask, model.special_ids, model.config.mask_prob)
        random_tokens = torch.randint(5, model.config.vocab_size, input_ids.shape, device=input_ids.device)
        corrupted = torch.where(positions, random_tokens, input_ids)
        is_replaced = corrupted != input_ids
        logits = model.discriminator(corrupted, attention_mask, token_type_ids)
        loss = replaced_token_loss(logits, is_replaced, attention_mask)
        metrics = {"loss": loss.detach(), **discriminator_metrics(logits, is_replaced, attention_mask)}
        return StepOutput(loss, metrics)

    def flop_plan(self, config):
        return FlopPlan(head="binary", generator=None)


def test_the_registry_is_the_one_list_of_names():
    names = electra.objective_names()
    assert names[0] == "electra" and "toy-uniform-rtd" in names
    assert {"electra", "mlm", "electric", "electra-tt", "electra-15", "replace-mlm", "all-tokens-mlm"} <= set(
        names
    )
    from electra.app.pretrain_cli import OBJECTIVE_CHOICES

    assert "toy-uniform-rtd" in OBJECTIVE_CHOICES and list(OBJECTIVE_CHOICES) == list(names)
    with pytest.raises(UserError, match="objective='nope' is not one of electra, "):
        electra.build_config("tiny", overrides={"objective": "nope"})
    with pytest.raises(ValueError, match="already registered"):

        @electra.register_objective
        class Impostor(electra.Objective):
            name = "electra"


def test_a_toy_objective_trains_three_steps_through_the_public_api(small_corpus, tmp_path, micro_overrides):
    config = electra.build_config(
        "tiny", overrides={**micro_overrides, "objective": "toy-uniform-rtd", "max_steps": 3, "log_every": 1}
    )
    report = electra.flop_report(config)
    assert report.params["generator"] == 0  # counted from its declaration: no generator
    run = electra.pretrain(
        config,
        output_dir=tmp_path / "run",
        corpus=small_corpus,
        cache_dir=str(tmp_path / "cache"),
        num_proc=1,
    )
    assert run.step == 3 and run.stop_reason == "max_steps"
    assert math.isfinite(run.metrics["loss"]) and 0.0 <= run.metrics["discriminator_auc"] <= 1.0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["flop_counter_check"]["ok"], summary["flop_counter_check"]
    ran = load_saved_config(tmp_path / "run" / "config.json")  # the run's own, with its vocabulary's size
    assert run.metrics["flops"] == pytest.approx(3 * electra.flop_report(ran).train_flops_per_step)

    export = electra.read_export(tmp_path / "run")
    assert export.objective == "toy-uniform-rtd" and list(export.parts) == ["discriminator"]
    assert export.scoring == {}  # nothing here can score text, and the manifest says so
    model = ElectraForPreTraining.from_pretrained(str(electra.finetune_dir(tmp_path / "run")))
    assert model.config.electra_objective == "toy-uniform-rtd"

    # From Python a refusal names the function's arguments, not the command line's flags.
    with pytest.raises(UserError) as refused:
        electra.pretrain(
            config, output_dir=tmp_path / "run", corpus=small_corpus, cache_dir=str(tmp_path / "cache")
        )
    assert "pass resume=True to continue it, overwrite=True to delete" in str(refused.value)
    assert "--" not in str(refused.value)


def test_the_lazy_package_names_exactly_the_api():
    import electra.app.api

    assert set(electra.API) == set(electra.app.api.__all__)


PLUGIN = """
import electra
from electra.objectives.masked_lm import MaskedLM


@electra.register_objective
class PluginMaskedLM(MaskedLM):
    name = "plugin-mlm"
    summary = "the MLM baseline under another name, registered by a plugin file"
"""


@pytest.fixture
def plugin_objectives():
    """Objectives the test's plugins register, taken out of the process-wide registry afterwards."""
    import sys

    from electra.objectives import registry

    names = set(registry._REGISTRY)
    yield
    for name in set(registry._REGISTRY) - names:
        del registry._REGISTRY[name]
    for module in ("plugin_file", "plugin_package"):
        sys.modules.pop(module, None)


def test_the_commands_offer_an_objective_a_plugin_registers(tmp_path, monkeypatch, capsys, plugin_objectives):
    """Before: README said `electra pretrain --objective my-objective` offers a registered objective, but each
    command runs in a fresh process that never imports the user's class: 'invalid choice'. ELECTRA_PLUGINS (modules
    or .py files) and the `electra.objectives` entry-point group are now imported before the flags are read."""
    from importlib.metadata import EntryPoint

    import electra.objectives.plugins as plugins
    from electra.app.cli import build_parser, main

    (tmp_path / "plugin_file.py").write_text(PLUGIN)
    monkeypatch.setenv("ELECTRA_PLUGINS", str(tmp_path / "plugin_file.py"))
    assert main(["flops", "--size", "tiny", "--set", "objective=plugin-mlm"]) == 0
    assert "plugin-mlm" in capsys.readouterr().out
    assert build_parser().parse_args(["pretrain", "--objective", "plugin-mlm"]).objective == "plugin-mlm"

    # An installed package's entry point may name the class itself, undecorated: it is registered.
    (tmp_path / "plugin_package.py").write_text(
        PLUGIN.replace("@electra.register_objective\n", "").replace("plugin-mlm", "entry-mlm")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("ELECTRA_PLUGINS")
    point = EntryPoint("entry-mlm", "plugin_package:PluginMaskedLM", "electra.objectives")
    monkeypatch.setattr(
        plugins, "entry_points", lambda group: [point] if group == "electra.objectives" else []
    )
    monkeypatch.setattr("electra.core.plugin_sources.entry_points", plugins.entry_points)
    assert main(["flops", "--size", "tiny", "--set", "objective=entry-mlm"]) == 0
    assert "entry-mlm" in electra.objective_names()


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [
        (
            "/nowhere/mine.py",
            "ELECTRA_PLUGINS: no file /nowhere/mine.py; give importable module names or paths",
        ),
        (
            "no_such_module_here",
            "ELECTRA_PLUGINS: no module 'no_such_module_here' on the import path; give a .py file's path",
        ),
        ("BROKEN", "importing it failed with NameError: name 'undefined_name' is not defined"),
    ],
)
def test_a_plugin_that_cannot_load_is_refused_in_one_line(
    plugin, expected, tmp_path, monkeypatch, capsys, plugin_objectives
):
    from electra.app.cli import main

    if plugin == "BROKEN":
        plugin = str(tmp_path / "plugin_file.py")
        (tmp_path / "plugin_file.py").write_text(PLUGIN + "\nundefined_name\n")
    monkeypatch.setenv("ELECTRA_PLUGINS", f"{plugin}, ")
    assert main(["flops", "--size", "tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("electra: error: ") and expected in err, err


def test_an_unknown_objective_flag_says_how_ones_own_gets_in(capsys):
    """Before: argparse's 'invalid choice' listed the names and stopped there; --set objective=... said more."""
    from electra.app.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["pretrain", "--objective", "xlnet"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --objective: invalid choice: 'xlnet' (choose from electra, electra-tt, mlm" in err
    assert "name its module in ELECTRA_PLUGINS, or declare it as an electra.objectives entry point" in err
