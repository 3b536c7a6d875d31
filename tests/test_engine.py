"""The one training engine, on a task small enough to reason about: exact resume, accumulation, evaluation with
early stopping and best-state restore, the FLOP budget, namespaced logs; and GLUE resuming through it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import electra.training.engine as engine_module
import electra.training.meters as meters
import electra.training.run_checkpoints as checkpoints_module
import electra.training.stop_rules as stop_rules
from electra.core.errors import UserError
from electra.core.outputs import StepOutput
from electra.training.engine import Engine
from electra.training.run_log import read_csv, read_metrics
from electra.training.stop_rules import StopRules
from electra.training.task import EarlyStopping, Task, TrainArgs


class Regression(Task):
    """y = x·w* + noise, in batches drawn from a seeded order that any step can restart from."""

    def __init__(self, batch_size: int = 8, scores: list[float] | None = None):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(64, 4, generator=generator)
        self.y = self.x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(64, generator=generator)
        torch.manual_seed(1)
        self.model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 1))
        self.batch_size, self.scores, self.evaluated = batch_size, scores, 0

    def batches(self, start: int):
        n = 64 // self.batch_size
        step = start
        while True:
            order = torch.randperm(64, generator=torch.Generator().manual_seed(step // n))
            rows = order[(step % n) * self.batch_size : (step % n + 1) * self.batch_size]
            yield {"x": self.x[rows], "y": self.y[rows]}
            step += 1

    def step(self, model, batch) -> StepOutput:
        loss = nn.functional.mse_loss(model(batch["x"]).squeeze(-1), batch["y"])
        return StepOutput(loss, {"loss": loss.detach()})

    def tokens(self, batch) -> int:
        return len(batch["x"])

    def flops(self, micro_batches) -> float:
        return 100.0 * sum(len(b["x"]) for b in micro_batches)

    def evaluate(self, model) -> dict[str, float] | None:
        if self.scores is None:
            return None
        self.evaluated += 1
        return {"score": self.scores[self.evaluated - 1]}


def _args(tmp_path, **kw) -> TrainArgs:
    base = dict(
        max_steps=6, learning_rate=0.05, warmup_steps=2, output_dir=tmp_path, log_every=1, progress=False
    )
    return TrainArgs(**{**base, **kw})


def _die_after_checkpoint(monkeypatch, at: int):
    """Kill the next run right after its step-`at` checkpoint is written; returns the real saver to restore."""
    real_save = checkpoints_module.save_checkpoint

    def save_then_die(directory, step, *args, **kwargs):
        real_save(directory, step, *args, **kwargs)
        if step == at:
            raise KeyboardInterrupt(f"killed after the step-{at} checkpoint")

    monkeypatch.setattr(checkpoints_module, "save_checkpoint", save_then_die)
    return real_save


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _straight_and_killed(tmp_path, monkeypatch) -> Regression:
    """A 6-step run in `a`, and the same run in `b` killed after its step-4 checkpoint; returns the straight one's
    task, whose weights a resumed `b` must end with."""
    straight = Regression()
    torch.manual_seed(5)  # the run's RNG (dropout); a resumed run gets it back from the checkpoint
    Engine(_args(tmp_path / "a", save_every=2)).fit(straight)
    real_save = _die_after_checkpoint(monkeypatch, 4)
    killed = Regression()
    torch.manual_seed(5)
    with pytest.raises(KeyboardInterrupt):
        Engine(_args(tmp_path / "b", save_every=2)).fit(killed)
    monkeypatch.setattr(checkpoints_module, "save_checkpoint", real_save)
    return straight


def test_a_killed_run_resumes_exactly(tmp_path, monkeypatch):
    straight = _straight_and_killed(tmp_path, monkeypatch)
    resumed = Regression()  # fresh weights: everything must come from the checkpoint
    engine = Engine(_args(tmp_path / "b", save_every=2))
    result = engine.fit(resumed, engine.latest_checkpoint())
    assert result.step == 6
    a, b = _weights(straight.model), _weights(resumed.model)
    assert all(torch.equal(a[k], b[k]) for k in a)  # dropout, data order and Adam state all restored
    rows = lambda d: [(r["step"], r["loss"], r["learning_rate"]) for r in read_metrics(d)]  # noqa: E731
    assert rows(tmp_path / "a") == rows(tmp_path / "b")


def test_a_resume_without_save_every_still_continues_the_checkpoints(tmp_path, monkeypatch, capsys):
    """Before: the engine looked for checkpoints only when this run saved them, so `glue --resume` (or squad, tlm)
    without the first run's `--save-every` trained a killed seed again from step 0 beside the checkpoint it could
    continue. A resume that finds none, where a run left its folder, now says it starts over."""
    straight = _straight_and_killed(tmp_path, monkeypatch)
    resumed = Regression()
    engine = Engine(_args(tmp_path / "b", save_every=0))  # the resume left --save-every out
    checkpoint = engine.resume_checkpoint(True, "the run")
    assert checkpoint is not None and checkpoint.name == "step-00000004"
    assert engine.fit(resumed, checkpoint).step == 6
    a, b = _weights(straight.model), _weights(resumed.model)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert sorted(p.name for p in (tmp_path / "b" / "checkpoints").glob("step-*")) == [
        "step-00000002",
        "step-00000004",
    ]  # and it wrote none of its own
    capsys.readouterr()
    assert Engine(_args(tmp_path / "c", save_every=0)).resume_checkpoint(True, "the run") is None
    assert capsys.readouterr().err == ""  # nothing was there to continue: nothing to say
    (tmp_path / "c").mkdir()
    assert Engine(_args(tmp_path / "c", save_every=0)).resume_checkpoint(True, "the run") is None
    assert capsys.readouterr().err == (
        f"--resume: {tmp_path / 'c'} holds no checkpoint (checkpoints are kept with --save-every N); the run "
        "trains again from its first step.\n"
    )


def test_accumulation_of_half_batches_equals_the_full_batch(tmp_path):
    full, halves = Regression(batch_size=16), Regression(batch_size=8)
    halves.model.load_state_dict(full.model.state_dict())
    full.model[1].p = halves.model[1].p = 0.0  # no dropout: the two runs see identical arithmetic
    Engine(_args(None, max_steps=1, output_dir=None)).fit(full)
    Engine(_args(None, max_steps=1, output_dir=None, gradient_accumulation_steps=2)).fit(halves)
    for (name, a), b in zip(full.model.state_dict().items(), halves.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_early_stopping_keeps_and_restores_the_best_state(tmp_path):
    # Evaluated at steps 0 (start), 2, 4, 6, 8: best at step 2, then two evaluations without a gain.
    task = Regression(scores=[0.1, 0.9, 0.5, 0.4, 0.3])
    seen = {}
    scripted = task.evaluate

    def evaluate(model):
        metrics = scripted(model)
        seen[task.evaluated] = _weights(model)  # the weights behind the n-th evaluation
        return metrics

    task.evaluate = evaluate
    stopping = EarlyStopping("score", "max", patience=2, evaluate_at_start=True)
    result = Engine(_args(tmp_path, max_steps=20, eval_every=2, early_stopping=stopping, save_every=2)).fit(
        task
    )
    assert result.stop_reason == "early_stopping" and result.step == 6
    assert result.best["step"] == 2 and result.best["value"] == 0.9
    assert [e["step"] for e in result.evaluations] == [0, 2, 4, 6]
    assert all(torch.equal(v, seen[2][k]) for k, v in task.model.state_dict().items())  # step 2's weights
    columns = set().union(*(row.keys() for row in read_csv(tmp_path / "metrics.csv")))
    assert "train/loss" in columns and "eval/score" in columns
    assert (tmp_path / "logs").is_dir()  # TensorBoard
    assert (tmp_path / "checkpoints" / checkpoints_module.BEST_WEIGHTS).is_file()


def test_flop_budget_stops_at_the_first_step_that_spends_it(tmp_path):
    result = Engine(_args(tmp_path, max_steps=100, flops_budget=2500.0)).fit(Regression())
    assert result.stop_reason == "flops_budget"
    assert result.flops == 3200.0 and result.step == 4  # 800 FLOPs a step: 2400 < 2500 <= 3200


def test_a_time_budget_stops_at_the_step_that_spends_it_saves_and_resumes_exactly(tmp_path):
    straight = Regression()
    torch.manual_seed(5)
    Engine(_args(tmp_path / "a", save_every=100, log_every=3)).fit(straight)
    timed = Regression()
    torch.manual_seed(5)
    engine = Engine(_args(tmp_path / "b", save_every=100, log_every=3, time_budget=1e-9))
    result = engine.fit(timed)
    assert (result.stop_reason, result.step) == ("time_budget", 1)  # spent at once: the first step ends it
    assert engine.latest_checkpoint().name.endswith("1")
    resumed = Regression()
    engine = Engine(_args(tmp_path / "b", save_every=100, log_every=3))
    assert engine.fit(resumed, engine.latest_checkpoint()).step == 6
    a, b = _weights(straight.model), _weights(resumed.model)
    assert all(torch.equal(a[k], b[k]) for k in a)  # the schedule ran on as if never stopped


@pytest.mark.parametrize("processes", [1, 2])
def test_a_time_budget_between_log_steps_stops_within_a_step(processes, tmp_path, monkeypatch):
    """Before: the steps clock's budget was looked at only when a row was logged, so a Small run logging every 50
    steps of 9 s ran on for up to 7 minutes past it. One process now reads its clock after every step; several
    agree at each log step on the step their budget ends at (from the last window's pace) and stop there, with
    no talk between log steps. (Two processes are simulated: this one answers for both.)"""
    now = [0.0]
    _fake_clock(monkeypatch, now)
    if processes == 2:
        monkeypatch.setattr(StopRules, "_past_deadline", _as_if_two_processes(StopRules._past_deadline))
    args = _args(tmp_path, max_steps=1000, log_every=4, save_every=1000, time_budget=10.5)
    result = Engine(args).fit(TimedRegression(now))
    assert (result.stop_reason, result.step) == ("time_budget", 11)  # 1 s a step: step 11 ends at 11 s
    assert [int(r["step"]) for r in read_metrics(tmp_path)] == [4, 8, 11]


def test_the_time_clock_stops_within_a_step_before_it_has_a_pace(tmp_path, monkeypatch):
    """Before: the time clock projects its end from the pace it measures at log steps, so a budget that ended
    before the first one (here 10.5 s at 1 s an update, logging every 100, a warmup of 500) ran on to step 100.
    One process now also reads its clock after every step, as on the steps clock."""
    now = [0.0]
    _fake_clock(monkeypatch, now)
    args = _args(
        tmp_path,
        max_steps=6000,
        warmup_steps=500,
        log_every=100,
        save_every=6000,
        time_budget=10.5,
        schedule_clock="time",
    )
    result = Engine(args).fit(TimedRegression(now))
    assert (result.stop_reason, result.step) == ("time_budget", 11)
    assert [int(r["step"]) for r in read_metrics(tmp_path)] == [11]


@pytest.mark.parametrize("schedule_clock", ["steps", "time"])
def test_several_processes_stop_within_a_step_when_the_budget_ends_before_the_first_log(
    schedule_clock, tmp_path, monkeypatch
):
    """Before: several processes first agreed on the time budget at the first log step, so a budget that ended
    before it (here 10.5 s at 1 s an update, logging every 100) ran on to step 100 on either clock. They now agree
    after updates 1, 2, 4, ... until then, on the step it runs out at from the pace since update 1. (Two processes
    are simulated: this one answers for both, and its gather returns its own figures.)"""
    now = [0.0]
    _fake_clock(monkeypatch, now)
    for name in ("_past_deadline", "_probe_budget"):
        monkeypatch.setattr(StopRules, name, _as_if_two_processes(getattr(StopRules, name)))
    args = _args(
        tmp_path,
        max_steps=1000,
        warmup_steps=5,
        log_every=100,
        save_every=1000,
        time_budget=10.5,
        schedule_clock=schedule_clock,
    )
    result = Engine(args).fit(TimedRegression(now))
    assert (result.stop_reason, result.step) == ("time_budget", 11)
    assert [int(r["step"]) for r in read_metrics(tmp_path)] == [11]


@pytest.mark.parametrize(("warmup", "warned"), [(500, True), (4, False)])
def test_a_time_budget_that_ends_inside_the_warmup_is_warned_of(
    warmup, warned, tmp_path, monkeypatch, capsys
):
    """Before: on the time clock (whose warmup stays in steps) a budget that ends inside the warmup ran to its end
    at a fraction of the peak rate, never decaying, and said nothing. The first log step that projects the end
    now warns, once, with a warmup that fits."""
    now = [0.0]
    _fake_clock(monkeypatch, now)
    args = _args(
        tmp_path,
        max_steps=6000,
        warmup_steps=warmup,
        log_every=5,
        save_every=6000,
        time_budget=20.5,
        schedule_clock="time",
    )
    assert Engine(args).fit(TimedRegression(now)).step == 21
    err = capsys.readouterr().err
    assert err.count("inside the 500-step warmup") == (1 if warned else 0)
    if warned:
        assert "the time budget ends around step 21" in err and "--set warmup_steps=2," in err


def _fake_clock(monkeypatch, now: list[float]) -> None:
    """The engine's clocks (stop rules, log window) read `now[0]` instead of the real time."""
    fake = SimpleNamespace(perf_counter=lambda: now[0])
    for module in (stop_rules, meters):
        monkeypatch.setattr(module, "time", fake)


def _as_if_two_processes(check_budget):
    def check(self, *args):
        # what the checks read: the count, and a gather that returns this process's own figures
        real = self.accelerator
        self.accelerator = SimpleNamespace(num_processes=2, device=real.device, gather=lambda t: t)
        try:
            return check_budget(self, *args)
        finally:
            self.accelerator = real

    return check


class TimedRegression(Regression):
    """Each update takes one second of a fake clock that the engine reads instead of the real one."""

    def __init__(self, clock: list[float]):
        super().__init__()
        self.clock = clock

    def step(self, model, batch) -> StepOutput:
        self.clock[0] += 1.0
        return super().step(model, batch)


def test_the_time_clock_anneals_to_zero_at_the_budget_stops_there_and_resumes_exactly(tmp_path, monkeypatch):
    """Sized for 1,000 updates but given 20 s at 1 s an update: the decay must end, and the run stop, at update 20
    (not a log step), a killed run must resume onto the same rates, and the budget counts both invocations."""
    now = [0.0]
    _fake_clock(monkeypatch, now)
    timed = dict(max_steps=1000, log_every=3, save_every=9, time_budget=20.0, schedule_clock="time")
    straight = TimedRegression(now)
    torch.manual_seed(5)
    result = Engine(_args(tmp_path / "a", **timed)).fit(straight)
    assert (result.stop_reason, result.step) == ("time_budget", 20)
    rates = {int(r["step"]): r["learning_rate"] for r in read_metrics(tmp_path / "a")}
    # no update timed before step 3's log: steps decide; from then on the decay runs over the 18 s after the
    # 2-update warmup, so update s has done (s - 2) / 18 of it
    peak = 0.05
    assert rates[3] == pytest.approx(peak * (1000 - 3) / 998)
    assert rates[6] == pytest.approx(peak * (1 - 4 / 18)) and rates[12] == pytest.approx(peak * (1 - 10 / 18))
    assert rates[20] == 0.0

    real_save = _die_after_checkpoint(monkeypatch, 9)
    now[0] = 0.0
    killed = TimedRegression(now)
    torch.manual_seed(5)
    with pytest.raises(KeyboardInterrupt):
        Engine(_args(tmp_path / "b", **timed)).fit(killed)
    monkeypatch.setattr(checkpoints_module, "save_checkpoint", real_save)
    now[0] = 1000.0  # hours later: only training time counts
    resumed = TimedRegression(now)
    engine = Engine(_args(tmp_path / "b", **timed))
    assert engine.fit(resumed, engine.latest_checkpoint()).step == 20
    rows = lambda d: [(r["step"], r["loss"], r["learning_rate"]) for r in read_metrics(d)]  # noqa: E731
    assert rows(tmp_path / "a") == rows(tmp_path / "b")
    a, b = _weights(straight.model), _weights(resumed.model)
    assert all(torch.equal(a[k], b[k]) for k in a)
    # The whole budget is spent: resuming the finished run takes no further step (it took one before).
    engine = Engine(_args(tmp_path / "b", **timed))
    again = engine.fit(TimedRegression(now), engine.latest_checkpoint())
    assert (again.step, again.stop_reason) == (20, "time_budget")
    assert rows(tmp_path / "b") == rows(tmp_path / "a")
    # a time clock without a budget, or an unknown clock, is refused where settings come in (tests/test_config.py)


@pytest.mark.slow
def test_a_compiled_run_trains_like_the_eager_one_and_saves_plain_weights(tmp_path):
    """The GPU default (torch.compile) on the CPU: same weights as eager to rounding; checkpoints hold the module's
    own names (no `_orig_mod.` prefix), so they resume without compilation. Dropout is off: compiled code draws
    its own random numbers."""
    torch.manual_seed(5)
    eager = Regression()
    eager.model[1].p = 0.0
    Engine(_args(tmp_path / "eager", save_every=6)).fit(eager)
    torch.manual_seed(5)
    compiled = Regression()
    compiled.model[1].p = 0.0
    torch._dynamo.reset()
    engine = Engine(_args(tmp_path / "compiled", save_every=6, compile=True))
    assert engine.fit(compiled).step == 6
    for name, value in _weights(eager.model).items():
        torch.testing.assert_close(_weights(compiled.model)[name], value, rtol=1e-4, atol=1e-6, msg=name)
    saved = load_file(str(engine.latest_checkpoint() / "model.safetensors"))
    assert set(saved) == set(eager.model.state_dict())


def test_the_csv_log_resumes_even_when_accelerate_never_starts_it(tmp_path):
    """Accelerate before 1.8 does not call a tracker's `start`: the first `log` of a resumed run must still drop the
    rows after the resumed step and keep the file's columns (it had raised on the first evaluation column)."""
    from electra.training.trackers import CSVTracker

    first = CSVTracker(tmp_path)
    for step in (1, 2, 3):
        first.log({"train/loss": float(step)}, step=step)
    first.log({"eval/accuracy": 0.5}, step=3)
    # killed after step 3, resumed from the checkpoint at step 2
    resumed = CSVTracker(tmp_path, resume_step=2)
    resumed.log({"train/loss": 30.0}, step=3)
    rows = read_csv(tmp_path / "metrics.csv")
    assert [(row["step"], row.get("train/loss")) for row in rows] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0] == "step,train/loss,eval/accuracy"
    assert [line.split(",")[0] for line in lines[1:]] == ["1", "2", "3"]  # rewritten rows too: 1, not 1.0


def test_a_csv_rewrite_that_fails_half_way_keeps_the_rows_logged_before(tmp_path, monkeypatch):
    """Before: the rewrite at a resume (and when a new column appears) opened metrics.csv for writing in place,
    so a kill or a full disk half-way left the run's earlier rows cut off. It is now published by one rename."""
    import csv

    from electra.training.trackers import CSVTracker

    first = CSVTracker(tmp_path)
    for step in range(1, 6):
        first.log({"train/loss": float(step)}, step=step)
    before = (tmp_path / "metrics.csv").read_bytes()
    write_rows = csv.DictWriter.writerows

    def fails_half_way(self, rows):
        rows = list(rows)
        write_rows(self, rows[:2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(csv.DictWriter, "writerows", fails_half_way)
    with pytest.raises(OSError, match="No space left"):
        CSVTracker(tmp_path, resume_step=4).start()
    assert (tmp_path / "metrics.csv").read_bytes() == before
    monkeypatch.undo()
    resumed = CSVTracker(tmp_path, resume_step=4)
    resumed.log(
        {"train/loss": 50.0, "eval/accuracy": 0.5}, step=5
    )  # drops step 5, adds a column: two rewrites
    rows = read_csv(tmp_path / "metrics.csv")
    assert [(row["step"], row["train/loss"]) for row in rows] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
        (4, 4.0),
        (5, 50.0),
    ]
    assert (tmp_path / "metrics.csv").read_bytes().startswith(b"step,train/loss,eval/accuracy\r\n1,1.0,\r\n")


def test_logs_go_through_accelerate_trackers(tmp_path):
    """The engine writes through accelerator.log: a tracker the user put on the accelerator receives exactly the rows
    of metrics.csv, and the engine's own trackers are detached when the run ends (the accelerator is reused)."""
    from accelerate import Accelerator
    from accelerate.tracking import GeneralTracker

    class Recorder(GeneralTracker):
        name, requires_logging_directory = "recorder", False

        def __init__(self):
            super().__init__()
            self.rows: list[dict] = []

        @property
        def tracker(self):
            return self.rows

        def store_init_configuration(self, values):
            pass

        def log(self, values, step=None, **kwargs):
            self.rows.append({"step": float(step), **values})

    recorder = Recorder()
    accelerator = Accelerator(cpu=True, log_with=[recorder])
    accelerator.init_trackers("test")
    for run in ("a", "b"):  # a second run on the same accelerator: no duplicated or leaked trackers
        Engine(_args(tmp_path / run), accelerator).fit(Regression())
        assert accelerator.trackers == [recorder]
    csv_rows = read_csv(tmp_path / "b" / "metrics.csv")
    assert len(csv_rows) == 6 and len(recorder.rows) == 12
    for sent, written in zip(recorder.rows[6:], csv_rows):
        assert sent.keys() == written.keys() and all(sent[k] == pytest.approx(written[k]) for k in sent)
    assert (tmp_path / "b" / "logs").is_dir()  # Accelerate's TensorBoard tracker wrote there


def test_a_non_finite_loss_is_a_one_line_error(tmp_path):
    from electra.core.errors import UserError

    with pytest.raises(UserError, match="loss is not finite"):
        Engine(_args(tmp_path, learning_rate=1e30, warmup_steps=0, max_steps=50)).fit(Regression())


def test_glue_resumes_an_interrupted_seed(tmp_path, monkeypatch):
    """GLUE through the engine: a seed killed after a checkpoint and resumed scores as the uninterrupted one."""
    from electra.app.cli import main
    from tests.golden_trace import export_word_model, write_stsb

    export_word_model(tmp_path / "run", layers=2)
    data = write_stsb(tmp_path / "glue")
    flags = [
        "--task",
        "stsb",
        "--data-dir",
        str(data),
        "--max-steps",
        "6",
        "--batch-size",
        "8",
        "--save-every",
        "2",
    ]

    def glue(out: str, *extra: str, code: int = 0) -> dict | None:
        argv = ["glue", "--model", str(tmp_path / "run"), *flags, "--output", str(tmp_path / out), *extra]
        assert main(argv) == code
        if code:
            return None
        return json.loads((tmp_path / out / "results.json").read_text())["results"]["stsb"]["medians"]

    straight = glue("straight")
    real_save = checkpoints_module.save_checkpoint

    def save_then_die(directory, step, *args, **kwargs):
        real_save(directory, step, *args, **kwargs)
        if step == 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoints_module, "save_checkpoint", save_then_die)
    glue("killed", code=130)  # the command reports the interruption and exits 130
    monkeypatch.setattr(checkpoints_module, "save_checkpoint", real_save)
    assert glue("killed", "--resume") == straight
    rows = read_metrics(tmp_path / "killed" / "runs" / "stsb" / "seed-1")
    assert [r["step"] for r in rows][-1] == 6 and "loss" in rows[-1]


def _draw_after_split(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from electra.nn.masking import choose_positions
    from electra.training.processes import split_rng_per_process

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(42)  # every process seeded alike, as `set_seed(config.seed)` does
    split_rng_per_process(rank, world)
    ids = torch.arange(5, 69).repeat(4, 1)
    positions = choose_positions(ids, torch.ones_like(ids), torch.tensor([0, 1, 2, 3]), 0.15).float()
    gathered = [torch.zeros_like(positions) for _ in range(world)]
    dist.all_gather(gathered, positions)
    if rank == 0:
        torch.save(torch.stack(gathered), out)
    dist.destroy_process_group()


def test_every_process_masks_its_own_positions(tmp_path):
    """Before: every rank drew the same random numbers, so the masks fell on the same positions of each rank's rows."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "masks.pt"
    mp.spawn(_draw_after_split, args=(2, port, str(out)), nprocs=2, join=True)
    masks = torch.load(out, weights_only=True)  # tensors only: nothing is unpickled
    overlap = (masks[0] * masks[1]).sum() / masks[0].sum()
    assert overlap < 0.5  # independent draws share ~15% of positions; identical ones would share 100%
    # One process keeps its stream: one-process runs are exactly what they were.
    torch.manual_seed(42)
    expected = torch.rand(3)
    torch.manual_seed(42)
    engine_module.split_rng_per_process(0, 1)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("choice", ["lanes", "torch"])
def test_the_engine_trains_with_the_chosen_cpu_dropout(tmp_path, choice):
    """Every task (GLUE, SQuAD, TLM) gets lane dropout from the engine unless it asks for torch's own."""
    from electra.nn.dropout import LaneDropout

    task = Regression()
    Engine(_args(None, max_steps=2, output_dir=None, cpu_dropout=choice)).fit(task)
    assert type(task.model[1]) is (LaneDropout if choice == "lanes" else nn.Dropout)
    assert task.model[1].p == 0.1


@pytest.mark.parametrize(("warmup", "warned"), [(6, True), (9, True), (5, False)])
def test_a_warmup_as_long_as_the_run_is_warned_of(warmup, warned, tmp_path, capsys):
    """`--max-steps 40` on a preset with 50 warm-up steps ends at a high rate that never decays: say so at the
    start, with the rate it will reach."""
    Engine(_args(tmp_path, warmup_steps=warmup)).fit(Regression())
    err = capsys.readouterr().err
    assert ("never decays" in err) is warned
    if warned:
        assert f"warmup_steps={warmup} is not below max_steps=6" in err
        assert f"(to {0.05 * 6 / warmup:.3g})" in err


def test_an_unknown_cpu_dropout_is_refused_in_one_line_where_settings_come_in(tmp_path):
    """The fine-tuners' settings are the boundary (pretraining's is its config, tests/test_config.py)."""
    from electra.glue.settings import FinetuneSettings
    from electra.squad.settings import SquadSettings

    with pytest.raises(UserError, match="cpu_dropout='fast' is not one of lanes, torch"):
        FinetuneSettings(cpu_dropout="fast")
    with pytest.raises(UserError, match="cpu_dropout='fast' is not one of lanes, torch"):
        SquadSettings(model=str(tmp_path), output=str(tmp_path), cpu_dropout="fast")


def test_mfu_is_tokens_per_second_times_the_tasks_flops_over_the_peak(tmp_path, monkeypatch):
    """A task that states what a token executes gets `train/mfu` in every row, against the peak measured in the
    run's precision; one that does not gets no MFU column."""
    asked = []

    def fake_peak(device, dtype):
        asked.append((device, dtype))
        return 2.0e6

    monkeypatch.setattr(engine_module, "cached_matmul_peak", fake_peak)
    Engine(_args(tmp_path / "plain")).fit(Regression())
    assert asked == [] and all("mfu" not in row for row in read_metrics(tmp_path / "plain"))

    task = Regression()
    task.executed_flops_per_token = 1000.0
    Engine(_args(tmp_path / "measured")).fit(task)
    assert asked == [("cpu", torch.float32)]
    rows = read_metrics(tmp_path / "measured")
    assert len(rows) == 6
    for row in rows:
        assert row["mfu"] == pytest.approx(row["tokens_per_second"] * 1000.0 / 2.0e6)


@pytest.mark.parametrize(
    ("later_interval", "readings", "charged"),
    [
        # every log reads it again: the highest reading so far is kept, a lower one neither inflates the MFU nor
        # replaces a better one
        (0.0, [4.0e6, 2.0e6, 8.0e6, 1.0e6, 1.0e6, 1.0e6], [4.0e6, 4.0e6, 8.0e6, 8.0e6, 8.0e6, 8.0e6]),
        # a run of a few minutes: the second reading comes early and the last log takes one more (a start-up
        # reading taken beside other work had put a card at 91.9% MFU)
        (1.0e9, [4.0e6, 8.0e6], [4.0e6, 4.0e6, 4.0e6, 4.0e6, 4.0e6, 8.0e6]),
    ],
)
def test_mfu_is_charged_against_the_highest_peak_read_so_far(
    later_interval, readings, charged, tmp_path, monkeypatch
):
    """The start-up reading (1e6 here) is read again after FIRST_PEAK_REREAD_SECONDS (here at once), then every
    PEAK_REREAD_SECONDS, and at the last log."""
    readings = iter(readings)
    monkeypatch.setattr(engine_module, "cached_matmul_peak", lambda device, dtype: 1.0e6)
    monkeypatch.setattr(engine_module, "matmul_peak", lambda device, dtype: next(readings))
    monkeypatch.setattr(meters, "FIRST_PEAK_REREAD_SECONDS", 0.0)
    monkeypatch.setattr(meters, "PEAK_REREAD_SECONDS", later_interval)
    task = Regression()
    task.executed_flops_per_token = 1000.0
    Engine(_args(tmp_path)).fit(task)
    rows = read_metrics(tmp_path)
    assert len(rows) == len(charged)
    for row, peak in zip(rows, charged):
        assert row["mfu"] == pytest.approx(row["tokens_per_second"] * 1000.0 / peak)


@pytest.mark.parametrize("native", [True, False])
def test_bf16_is_charged_against_its_own_peak_only_where_it_is_native(native, tmp_path, monkeypatch, capsys):
    """Where bf16 is native its MFU divides by the bf16 peak; where a CPU emulates it the run warns at the start
    and divides by the fp32 peak (the emulated product has no units of its own, and ATen's scalar bf16 `mm` is
    slower than the converting linear the model runs, which gave MFUs above 100%)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    import electra.flops.peak as peak_module

    def probe(device, dtype):
        return native or dtype == torch.float32

    asked = []
    monkeypatch.setattr(engine_module, "native_precision", probe)
    monkeypatch.setattr(peak_module, "native_precision", probe)
    monkeypatch.setattr(engine_module, "cached_matmul_peak", lambda d, dtype: asked.append(dtype) or 1.0e9)
    task = Regression()
    task.executed_flops_per_token = 1000.0
    AcceleratorState._reset_state(reset_partial_state=True)  # the process-wide state fixes the precision
    try:
        Engine(_args(tmp_path, max_steps=2), Accelerator(cpu=True, mixed_precision="bf16")).fit(task)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    err = capsys.readouterr().err  # beside the results, never inside them
    assert ("WARNING: this CPU has no native bf16 matmuls" in err) is not native
    assert asked == [torch.bfloat16 if native else torch.float32]


@pytest.mark.parametrize("native", [True, False])
def test_an_fp32_run_on_a_cpu_with_native_bf16_says_so_once(native, tmp_path, monkeypatch, capsys):
    """On a CPU with AMX or AVX-512-BF16 an fp32 run is told, once per process (GLUE runs an engine per task and
    seed), that bf16 would train faster; elsewhere nothing is said."""
    monkeypatch.setattr(
        engine_module, "native_precision", lambda device, dtype: native or dtype == torch.float32
    )
    monkeypatch.setattr(engine_module, "_hinted", False)
    Engine(_args(tmp_path / "a", max_steps=1)).fit(Regression())
    Engine(_args(tmp_path / "b", max_steps=1)).fit(Regression())
    assert capsys.readouterr().err.count(engine_module.BF16_HINT) == (1 if native else 0)


def test_a_fresh_run_beside_earlier_checkpoints_is_refused(tmp_path):
    """Before: the fresh run's checkpoints were pruned as it wrote them (the earlier run's higher steps sort last),
    and a later --resume continued the earlier run."""
    Engine(_args(tmp_path, max_steps=10, save_every=2)).fit(Regression())
    with pytest.raises(
        UserError, match="holds an earlier run's checkpoints \\(up to step-00000010\\).*--resume"
    ):
        Engine(_args(tmp_path, max_steps=4, save_every=2)).fit(Regression())
    engine = Engine(_args(tmp_path, max_steps=10, save_every=2))
    assert engine.fit(Regression(), engine.latest_checkpoint()).step == 10  # resuming it is still allowed


def test_a_second_run_in_a_live_runs_output_is_refused(tmp_path):
    """Before: a second command resuming in a folder a live run was writing continued from the first one's newest
    checkpoint and wrote its metrics.csv rows beside the first one's (duplicated steps)."""
    from electra.core.output_lock import LOCK_FILE, output_lock
    from tests.conftest import lock_held_elsewhere

    with lock_held_elsewhere(tmp_path) as pid:
        with pytest.raises(UserError, match=f"a run is writing here now \\(pid {pid}\\)"):
            Engine(_args(tmp_path, max_steps=2, save_every=2)).fit(Regression())
        assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "metrics.csv").exists()
    result = Engine(_args(tmp_path, max_steps=2, save_every=2)).fit(
        Regression()
    )  # a dead holder holds nothing
    assert result.step == 2 and not (tmp_path / LOCK_FILE).exists()
    with output_lock(tmp_path), output_lock(tmp_path / "other"):  # folders are independent
        pass


def test_a_resume_inside_a_log_window_logs_the_uninterrupted_rows(tmp_path, monkeypatch):
    """Before: a checkpoint between two logs lost the open window, so the first row after a resume averaged only
    the steps since the checkpoint (SQuAD: loss 3.735 logged against 3.978 uninterrupted)."""
    straight = Regression()
    torch.manual_seed(5)
    Engine(_args(tmp_path / "a", max_steps=9, save_every=2, log_every=3)).fit(straight)
    real_save = _die_after_checkpoint(monkeypatch, 4)  # step 4: one step into the window that logs at 6
    killed = Regression()
    torch.manual_seed(5)
    with pytest.raises(KeyboardInterrupt):
        Engine(_args(tmp_path / "b", max_steps=9, save_every=2, log_every=3)).fit(killed)
    monkeypatch.setattr(checkpoints_module, "save_checkpoint", real_save)
    engine = Engine(_args(tmp_path / "b", max_steps=9, save_every=2, log_every=3))
    engine.fit(Regression(), engine.latest_checkpoint())
    rows = lambda d: [(r["step"], r["loss"]) for r in read_metrics(d)]  # noqa: E731
    assert [step for step, _ in rows(tmp_path / "a")] == [3, 6, 9]
    assert rows(tmp_path / "b") == rows(tmp_path / "a")


def test_an_impossible_mfu_reads_the_peak_again_at_once(tmp_path, monkeypatch):
    """Before: a run shorter than FIRST_PEAK_REREAD_SECONDS had only its start-up reading, and one taken beside
    other work put `mfu=117%` on the bar and `MFU 116.5%` on a fresh clone's model card. An MFU above 1 now reads
    the peak again at once (at most IMPOSSIBLE_MFU_REREADS times a run)."""
    readings = []

    def fresh(device, dtype):
        readings.append(1.0e15)
        return 1.0e15

    monkeypatch.setattr(
        engine_module, "cached_matmul_peak", lambda device, dtype: 1.0
    )  # a reading in a burst
    monkeypatch.setattr(engine_module, "matmul_peak", fresh)
    monkeypatch.setattr(meters, "FIRST_PEAK_REREAD_SECONDS", 1.0e9)
    monkeypatch.setattr(meters, "IMPOSSIBLE_MFU_REREAD_SECONDS", 0.0)
    task = Regression()
    task.executed_flops_per_token = 1000.0
    Engine(_args(tmp_path)).fit(task)
    rows = read_metrics(tmp_path)
    assert len(readings) == 1 and len(rows) > 1
    for row in rows:
        assert row["mfu"] == pytest.approx(row["tokens_per_second"] * 1000.0 / 1.0e15) and row["mfu"] < 1.0

    # a host that stays busy pays only IMPOSSIBLE_MFU_REREADS readings, not one at every log
    readings.clear()
    monkeypatch.setattr(engine_module, "matmul_peak", lambda device, dtype: readings.append(1.0) or 1.0)
    Engine(_args(tmp_path / "busy")).fit(task)
    assert len(read_metrics(tmp_path / "busy")) > meters.IMPOSSIBLE_MFU_REREADS
    assert len(readings) == meters.IMPOSSIBLE_MFU_REREADS
