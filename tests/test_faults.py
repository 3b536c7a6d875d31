"""The fault suite: damaged checkpoints, full disks, non-finite weights. Nothing a user has is lost in any case."""

from __future__ import annotations

import errno
import subprocess

import pytest
import torch
from safetensors.torch import load_file

import electra.export.checkpoint as checkpoint_module
from electra.app.cli import main
from electra.core.errors import UserError
from electra.export.checkpoint import latest_checkpoint, verify_checkpoint
from electra.objectives import build_config
from electra.training.pretraining import RunInputs, pretrain


def _run(corpus, out, cache, overrides, resume=False):
    config = build_config("tiny", overrides=overrides)
    inputs = RunInputs(corpus=str(corpus), output_dir=out, cache_dir=str(cache), num_proc=1, resume=resume)
    return pretrain(config, inputs)


def _final_weights(run_dir):
    return load_file(str(run_dir / "discriminator" / "model.safetensors"))


@pytest.fixture(scope="module")
def straight(tmp_path_factory, micro_overrides_module, corpus_module):
    """An uninterrupted 6-step run, checkpoints at 2, 4 and 6 kept."""
    root = tmp_path_factory.mktemp("straight")
    _run(corpus_module, root / "run", root / "cache", micro_overrides_module)
    return root / "run"


@pytest.fixture(scope="module")
def micro_overrides_module():
    from tests.conftest import MICRO

    return {**MICRO, "save_every": 2, "keep_checkpoints": 3}


@pytest.fixture(scope="module")
def corpus_module(tmp_path_factory):
    """Every example differs (no sentence repeats), so a resume that starts at another batch shows."""
    from tests.conftest import write_distinct_corpus

    return write_distinct_corpus(tmp_path_factory.mktemp("corpus"))


def _copy_run(straight, tmp_path):
    """The straight run as it stood at its last checkpoint, to damage and resume."""
    target = tmp_path / "run"
    subprocess.run(["cp", "-r", str(straight), str(target)], check=True)
    (target / "summary.json").unlink()
    return target


@pytest.mark.parametrize("damage", ["flip a byte", "truncate"])
def test_a_damaged_checkpoint_falls_back_to_the_previous_one(
    straight, tmp_path, micro_overrides_module, corpus_module, capsys, damage
):
    """Before: a truncated file gave a traceback, a flipped bit loaded and exported NaN-free garbage with exit 0."""
    run = _copy_run(straight, tmp_path)
    latest = latest_checkpoint(run / "checkpoints")
    assert latest.name == "step-00000006" and verify_checkpoint(latest) is None
    weights = latest / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if damage == "flip a byte":
        data[len(data) // 2] ^= 0x40
    else:
        data = data[: len(data) // 2]
    weights.write_bytes(bytes(data))
    assert "model.safetensors does not match its checksum" in verify_checkpoint(latest)
    result = _run(corpus_module, run, tmp_path / "cache", micro_overrides_module, resume=True)
    captured = capsys.readouterr()  # on standard error: `electra squad ... > results.json` must parse
    assert "step-00000006 is damaged (model.safetensors does not match its checksum)" in captured.err
    assert "resuming from step-00000004" in captured.err and "is damaged (" not in captured.out
    assert result.step == 6
    a, b = _final_weights(straight), _final_weights(run)
    assert all(torch.equal(a[k], b[k]) for k in a)  # steps 5-6 redone: the same weights as never damaged


def test_every_checkpoint_damaged_is_one_line(straight, tmp_path, micro_overrides_module, corpus_module):
    run = _copy_run(straight, tmp_path)
    for checkpoint in (run / "checkpoints").glob("step-*"):
        (checkpoint / "optimizer.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(UserError, match="every checkpoint is damaged"):
        _run(corpus_module, run, tmp_path / "cache", micro_overrides_module, resume=True)


@pytest.mark.parametrize("pointer", ["names a deleted checkpoint", "is gone"])
def test_a_lost_latest_pointer_neither_hides_nor_deletes_the_checkpoints(
    straight, tmp_path, micro_overrides_module, corpus_module, pointer
):
    """Before: with checkpoints/latest gone, or naming a checkpoint deleted by hand, `--resume` said the run had
    no complete checkpoint (steps 2 and 4 were there), and a run started without `--resume` took the folder for a
    run killed before its first checkpoint and deleted them, unasked. Now the newest complete one is found."""
    run = _copy_run(straight, tmp_path)
    subprocess.run(["rm", "-r", str(run / "checkpoints" / "step-00000006")], check=True)
    if pointer == "is gone":
        (run / "checkpoints" / "latest").unlink()
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    with pytest.raises(UserError, match="already holds a run; pass --resume"):
        _run(corpus_module, run, tmp_path / "cache", micro_overrides_module)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before
    result = _run(corpus_module, run, tmp_path / "cache", micro_overrides_module, resume=True)
    assert result.step == 6
    a, b = _final_weights(straight), _final_weights(run)
    assert all(torch.equal(a[k], b[k]) for k in a)  # steps 5-6 redone from step 4: the uninterrupted weights


def test_a_damaged_run_record_is_one_line_on_resume(straight, tmp_path, corpus_module, capsys):
    """Before: `--resume` of a run whose run.json was cut short (a full disk, a crash of the machine) ended in
    json's JSONDecodeError traceback. Now one line names the file and both ways on."""
    run = _copy_run(straight, tmp_path)
    (run / "run.json").write_text('{"corpus": "/data/cor')
    config = run / "config.json"
    argv = ["pretrain", "--config", str(config), "--corpus", str(corpus_module), "--output", str(run)]
    assert main([*argv, "--resume", "--no-plot", "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{run / 'run.json'} is damaged" in err[0], err
    assert "delete it to resume unchecked" in err[0] and not (run / "summary.json").exists()


def test_a_refused_resume_names_the_config_that_repeats_the_settings_and_it_resumes(
    straight, tmp_path, corpus_module, capsys
):
    """A `--resume` without every `--set` of the first run is refused with a list of differences; the refusal now
    names `--config RUN/config.json`, which repeats them all, and that command continues the run."""
    run = _copy_run(straight, tmp_path)
    subprocess.run(["rm", "-r", str(run / "checkpoints" / "step-00000006")], check=True)
    common = ["--corpus", str(corpus_module), "--output", str(run), "--resume", "--no-plot"]
    common += ["--cache-dir", str(tmp_path / "cache")]
    assert main(["pretrain", *common]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "differs from this run in hidden_size" in err[0], err
    config = run / "config.json"
    assert f"`--config {config} --resume` repeats them all" in err[0]
    assert main(["pretrain", "--config", str(config), *common]) == 0
    a, b = _final_weights(straight), _final_weights(run)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_full_disk_is_refused_before_writing(corpus_module, micro_overrides_module, tmp_path, monkeypatch):
    """Before: a traceback, and a `.partial` directory left behind."""
    free = {"bytes": 10**12}
    real = checkpoint_module.shutil.disk_usage
    monkeypatch.setattr(
        checkpoint_module.shutil, "disk_usage", lambda path: real(path)._replace(free=free["bytes"])
    )
    free["bytes"] = 1000
    with pytest.raises(UserError, match="free, a checkpoint needs about .* MiB"):
        _run(corpus_module, tmp_path / "run", tmp_path / "cache", micro_overrides_module)
    assert not list((tmp_path / "run" / "checkpoints").glob(".*partial"))


def test_a_failed_write_cleans_up_and_keeps_earlier_checkpoints(
    corpus_module, micro_overrides_module, tmp_path, monkeypatch
):
    real = checkpoint_module.save_model
    calls = {"n": 0}

    def disk_fills_on_the_second(model, path, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            with open(path, "wb") as handle:
                handle.write(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(model, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module, "save_model", disk_fills_on_the_second)
    with pytest.raises(UserError, match="No space left on device.*previous checkpoints are intact"):
        _run(corpus_module, tmp_path / "run", tmp_path / "cache", micro_overrides_module)
    checkpoints = tmp_path / "run" / "checkpoints"
    assert not list(checkpoints.glob(".*partial"))
    assert verify_checkpoint(latest_checkpoint(checkpoints)) is None  # step 2, intact


def test_a_real_small_disk_gives_one_line(corpus_module, micro_overrides_module, tmp_path, capsys):
    """On a 1 MiB tmpfs, where the test may mount one (root in a namespace that allows it)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()[:80]})")
    try:
        flags = [f"--set={k}={v}" for k, v in micro_overrides_module.items()]
        argv = [
            "pretrain",
            "--corpus",
            str(corpus_module),
            "--output",
            str(mount / "run"),
            "--no-plot",
            *flags,
        ]
        assert main([*argv, "--cache-dir", str(tmp_path / "cache")]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("electra pretrain: error:") and ("free" in err or "could not write" in err), err
        assert not list((mount / "run" / "checkpoints").glob(".*partial"))
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_non_finite_weights_are_never_exported(micro_overrides, tmp_path):
    from electra.training.model import build_pretraining_model
    from tests.test_pll_scoring import tokenizer

    config = build_config("tiny", overrides=micro_overrides)
    model = build_pretraining_model(config, tokenizer())
    with torch.no_grad():
        model.discriminator.model.electra.encoder.layer[0].output.dense.weight[0, 0] = float("nan")
    with pytest.raises(UserError, match="not exported: 1 weight tensor\\(s\\) hold NaN or inf"):
        model.export(tmp_path / "export", tokenizer())
    assert not (tmp_path / "export" / "export.json").exists()


@pytest.mark.parametrize(
    "phase",
    [
        "_save_rng",
        "save_model",
        "_save_optimizer",
        "file_sha256",
        "replace",
        "write_text_atomically",
        "_prune",
    ],
)
def test_a_kill_in_any_checkpoint_phase_resumes_to_the_same_weights(
    straight, tmp_path, micro_overrides_module, corpus_module, monkeypatch, phase
):
    """Killed inside the step-4 checkpoint write, in each of its phases (RNG, weights, optimizer, checksums, the
    rename, the `latest` pointer, pruning), then resumed: the final weights equal the uninterrupted run's. (The
    cached vocabulary is shared: WordPiece training is not reproducible from one process to the next.)"""
    import electra.training.run_checkpoints as checkpoints_module

    target = checkpoint_module.os if phase == "replace" else checkpoint_module
    real, real_save = getattr(target, phase), checkpoint_module.save_checkpoint
    writing_step_4 = {"now": False}

    def killed(*args, **kwargs):
        if writing_step_4["now"]:
            raise KeyboardInterrupt(f"killed in {phase}")
        return real(*args, **kwargs)

    def save(directory, step, *args, **kwargs):
        writing_step_4["now"] = step == 4
        try:
            return real_save(directory, step, *args, **kwargs)
        finally:
            writing_step_4["now"] = False

    monkeypatch.setattr(checkpoints_module, "save_checkpoint", save)
    monkeypatch.setattr(target, phase, killed)
    with pytest.raises(KeyboardInterrupt):
        _run(corpus_module, tmp_path / "run", straight.parent / "cache", micro_overrides_module)
    monkeypatch.setattr(target, phase, real)
    result = _run(
        corpus_module, tmp_path / "run", straight.parent / "cache", micro_overrides_module, resume=True
    )
    assert result.step == 6
    a, b = _final_weights(straight), _final_weights(tmp_path / "run")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_an_interrupted_atomic_write_leaves_the_old_file_and_no_half_one(tmp_path, monkeypatch):
    """Before: Ctrl-C, SIGTERM or a full disk while the staging file was written kept the old file but left a
    hidden `.NAME.partial` beside it, in every folder a killed command had been writing to."""
    import pathlib

    from electra.core.files import write_text_atomically

    path = tmp_path / "results.json"
    write_text_atomically(path, "old")
    real_write = pathlib.Path.write_text

    def interrupted(self, text, *args, **kwargs):
        real_write(self, text[: len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(pathlib.Path, "write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomically(path, "new " * 1000)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["results.json"]
