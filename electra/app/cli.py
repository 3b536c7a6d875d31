"""The `electra` console script: one subcommand per job, each owned by the package that does the job.

Every package's `cli.py` exposes `register(subparsers)`, which adds its parser and sets `func`. Those modules import
only argparse-level code at the top and do their heavy imports inside `func`, so `electra --help` and a bad flag
answer at once. A `UserError` anywhere becomes one line on stderr and exit 2; under a launcher of several processes, a
process that fails only because another one ended becomes one line and exit 1, instead of a collective's traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator

from electra.app import compare_cli, flops_cli, plot, pretrain_cli
from electra.core import plugin_sources
from electra.core.errors import ElectraWarning, UserError, first_line
from electra.core.version import __version__
from electra.glue import cli as glue_cli
from electra.pll import nbest_cli, ngram_cli, rescore_cli, score_cli
from electra.probes import cli as probes_cli
from electra.squad import cli as squad_cli
from electra.tagging import cli as tag_cli
from electra.tagging import cvt_cli as tag_cvt_cli
from electra.tlm import cli as tlm_cli
from electra.tlm import tartan_cli
from electra.training import preemption
from electra.training.run_log import parse_report_to

# Each module and the commands (aliases included) its `register` adds, in the order `electra --help` lists them.
SUBCOMMANDS = {
    pretrain_cli: ("pretrain",),
    plot: ("plot",),
    flops_cli: ("flops",),
    glue_cli: ("glue", "glue-compare"),
    squad_cli: ("squad", "squad-eval"),
    tag_cli: ("tag",),
    tag_cvt_cli: ("tag-bilstm", "tag-cvt", "parse-bilstm", "parse-cvt", "word-vectors"),
    score_cli: ("score",),
    rescore_cli: ("rescore",),
    ngram_cli: ("ngram",),
    nbest_cli: ("nbest",),
    tlm_cli: ("tlm",),
    tartan_cli: ("tartan",),
    probes_cli: ("probe",),
    compare_cli: ("compare",),
}


class CommandParser(argparse.ArgumentParser):
    """argparse, answering as the rest of the CLI does: a bad flag is one line from the command it was given to
    (`electra pretrain: error: ...`, no usage block), an unknown flag gets the nearest real one as a hint, a flag
    must be spelled in full (a prefix such as `--max-step` is refused, not read as `--max-steps`), and the
    underscore spelling of any flag (`transformers` Trainer's `--report_to`, `--output_dir`,
    `--per_device_train_batch_size`) reads as the hyphenated one. Subcommands' parsers are made of this class too."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.set_defaults(_command_parser=self)  # the deepest parser the arguments reached wins

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(self._hyphenated(args), namespace)

    def _hyphenated(self, args: list[str]) -> list[str]:
        """`--output_dir x` and `--report_to=csv` as `--output-dir x`, `--report-to=csv`, where that flag exists."""
        out = []
        for i, arg in enumerate(args):
            if arg == "--":
                return out + args[i:]
            name, equals, value = arg.partition("=")
            if name.startswith("--") and "_" in name and name not in self._option_string_actions:
                hyphenated = "--" + name[2:].replace("_", "-")
                if hyphenated in self._option_string_actions:
                    arg = hyphenated + equals + value
            out.append(arg)
        return out

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        owner = vars(parsed).pop("_command_parser", self)
        if extras:
            owner.error(owner.unrecognized(extras))
        return parsed

    def unrecognized(self, extras: list[str]) -> str:
        """The message for flags this command does not take, with the nearest one it does take."""
        message = f"unrecognized arguments: {' '.join(extras)}"
        flag = next((e.partition("=")[0] for e in extras if e.startswith("--")), None)
        known = [o for o in self._option_string_actions if o.startswith("--")]
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75) if flag else []
        return message + (f" (did you mean {close[0]}?)" if close else "")

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or only of the module that registers `command` when one is named: a run
    builds the flags it reads and nothing of the other commands (whose registration reads their own settings,
    formats and registries)."""
    parser = CommandParser(
        prog="electra",
        description="Pretrain, count, fine-tune and score ELECTRA / Electric models.",
        epilog="`electra COMMAND --help` gives a command's flags. The guide is the documentation site in docs/ "
        "(mkdocs serve, or read docs/index.md); it starts at docs/getting-started.md.",
    )
    parser.add_argument("--version", action="version", version=f"electra {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = [module for module, commands in SUBCOMMANDS.items() if command in commands]
    for module in named or SUBCOMMANDS:
        module.register(subparsers)
    for leaf in _leaf_parsers(subparsers):
        add_common_flags(leaf)
        leaf.set_defaults(command_prog=leaf.prog)  # "electra tlm retrieve": errors name the step too
    return parser


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """Flags every command takes, with one spelling everywhere (as Trainer's --report_to and tqdm's switch)."""
    taken = {option for action in parser._actions for option in action.option_strings}
    if "--no-progress" not in taken:
        parser.add_argument("--no-progress", action="store_true", help="no progress bars (logs only)")
    parser.add_argument(
        "--report-to",
        default=None,
        metavar="WHERE",
        help="where training logs go: comma list of csv, tensorboard, wandb (if installed), or none "
        "(default csv,tensorboard)",
    )


def _leaf_parsers(subparsers) -> list[argparse.ArgumentParser]:
    found = []
    for parser in dict.fromkeys(subparsers.choices.values()):
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        found += _leaf_parsers(nested[0]) if nested else [parser]
    return found


def _progress_bars_off() -> list:
    """Silence every bar: tqdm's switch for ours, and the switches of datasets and transformers (they pass
    `disable=` themselves, which TQDM_DISABLE does not override: saving a model draws "Writing model shards").
    Returns the enable functions of the bars that were on, to give them back after."""
    os.environ["TQDM_DISABLE"] = "1"
    import datasets  # only when a command runs with --no-progress: --help and bad flags stay instant
    from transformers.utils import logging as transformers_logging

    restore = []
    if datasets.is_progress_bar_enabled():
        datasets.disable_progress_bars()
        restore.append(datasets.enable_progress_bars)
    if transformers_logging.is_progress_bar_enabled():
        transformers_logging.disable_progress_bar()
        restore.append(transformers_logging.enable_progress_bar)
    return restore


def _one_line_warnings(format_warning):
    """Python's warning format, but the library's `ElectraWarning`s read as one `warning: ...` line (the CLI's
    style) rather than two naming the library's file and source line. Only the format changes, so the warnings
    stay catchable (`warnings.catch_warnings`, `pytest.warns`) and filterable as before."""

    def format(message, category, filename, lineno, line=None) -> str:
        if issubclass(category, ElectraWarning):
            return f"warning: {message}\n"
        return format_warning(message, category, filename, lineno, line)

    return format


def _refuse_a_launch_it_does_not_use(args: argparse.Namespace) -> None:
    """Under torchrun or `accelerate launch` with several processes, a command that does not share its work
    (its parser sets no `several_processes`) would run whole in every process, each writing the same files. Every
    process refuses alike, so none waits on another."""
    processes = int(os.environ.get("WORLD_SIZE") or 1)
    if processes > 1 and not getattr(args, "several_processes", False):
        raise UserError(
            f"runs in one process, and the launcher started {processes}; run it without torchrun or accelerate "
            "launch (pretrain, glue, squad, tlm train and tartan are the commands that use several)."
        )


def _lost_its_peers(exc: BaseException) -> bool:
    """Whether `exc` is a collective failing because another process of the launch ended. When one process stops
    (its own one-line error, a kill), the others learn it inside their next barrier or all-reduce, from gloo or
    NCCL, as a plain RuntimeError and a traceback through `torch.distributed` that hides the real cause printed
    just above it. The exception's type says nothing (gloo raises RuntimeError), so where it was raised decides."""
    if int(os.environ.get("WORLD_SIZE") or 1) < 2 or not isinstance(exc, RuntimeError):
        return False
    inside = f"{os.sep}torch{os.sep}distributed{os.sep}"
    if any(inside in frame.filename for frame in traceback.extract_tb(exc.__traceback__)):
        return True
    # DDP's gradient all-reduce runs inside backward(): its failure surfaces from autograd, named by the backend
    said = first_line(exc)
    return "/gloo/" in said or "NCCL" in said


def _peer_loss_line(exc: BaseException) -> str:
    """One line for a process that lost its peers: which process, that the cause is another's message, and the
    backend's own first sentence (gloo prefixes its source file: `[.../pair.cc:553] Connection closed by peer`)."""
    said = first_line(exc)
    if said.startswith("[") and "] " in said:
        said = said.split("] ", 1)[1]
    said = said.split(". ")[0].rstrip(".")
    rank, size = os.environ.get("RANK", "?"), os.environ.get("WORLD_SIZE", "?")
    if "timed out" in said.lower() or "timeout" in said.lower():
        return (
            f"process {rank} of {size} stopped because another process of the launch did not answer within the "
            "collective timeout (ELECTRA_COLLECTIVE_TIMEOUT seconds, 600 by default): it may hang on a file system "
            f"or be stopped; the backend said: {said}."
        )
    return (
        f"process {rank} of {size} stopped because another process of the launch ended first (its own message, "
        f"above or in the launcher's summary, says why); the backend said: {said}."
    )


def _quiet_stdout() -> None:
    """Point standard output at the null device: once its reader has gone, the flush at exit would raise the
    BrokenPipeError again, as a traceback ("Exception ignored ... BrokenPipeError")."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGUSR1 outside training (`kill`, a batch scheduler's time limit, a launcher stopping its other
    processes), raised in the main thread as Ctrl-C is, so the command's `finally` blocks and context managers run:
    left to the default action, a killed `probe --random-baseline` left a model-sized scratch folder in /tmp, and
    `tlm train` its scratch copies. While a run trains, the signal stops it at the next update instead, with a
    checkpoint (`electra.training.preemption`)."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _termination_as_interrupt() -> Iterator[None]:
    """While the command runs, SIGTERM and SIGUSR1 stop a training run at its next update, with a checkpoint
    (`electra.training.preemption`), and raise `Terminated` in this process at any other time. A process forked
    from it outside training (a `datasets` map worker) inherits the handler but dies of the signal as before, and
    a second signal during the cleanup kills at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def stop(signum, frame) -> None:
        if preemption.defer(signum):  # a run is training: it stops at the next update boundary
            return
        signal.signal(signum, signal.SIG_DFL)
        if os.getpid() != owner:
            os.kill(os.getpid(), signum)
            return
        raise Terminated(signum)

    previous = {signum: signal.signal(signum, stop) for signum in preemption.SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main(argv: list[str] | None = None) -> int:
    try:
        # before the flags are read: a plugin's objective is one of --objective's choices
        if plugin_sources.requested():
            from electra.objectives.plugins import load_plugins

            load_plugins()
    except UserError as exc:
        print(f"electra: error: {exc}", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    saved = {name: os.environ.get(name) for name in ("TQDM_DISABLE", "ELECTRA_REPORT_TO")}
    bars_to_restore: list = []
    format_warning = warnings.formatwarning
    warnings.formatwarning = _one_line_warnings(format_warning)
    try:
        _refuse_a_launch_it_does_not_use(args)
        if getattr(args, "no_progress", False):
            bars_to_restore = _progress_bars_off()
        if getattr(args, "report_to", None) is not None:
            parse_report_to(args.report_to)  # refuse an unknown name now, in one line
            os.environ["ELECTRA_REPORT_TO"] = args.report_to
        with _termination_as_interrupt():
            return int(args.func(args) or 0)
    except UserError as exc:
        print(f"{args.command_prog}: error: {exc}", file=sys.stderr)
        return 2
    except preemption.Preempted as stop:
        kept = (
            "its checkpoint is saved: run the same command with --resume to continue"
            if stop.saved
            else "this run keeps no checkpoints (--save-every N keeps them), so a rerun starts over"
        )
        print(
            f"{args.command_prog}: stopped by {stop.cause} after update {stop.step}; {kept}",
            file=sys.stderr,
        )
        return preemption.PREEMPTED_STATUS
    except Terminated as stop:
        print(f"{args.command_prog}: terminated ({signal.Signals(stop.signum).name})", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        print(f"{args.command_prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `electra flops --paper --json | head`: the reader has what it wanted
        _quiet_stdout()
        return 141  # as a process killed by SIGPIPE, the shell's convention
    except RuntimeError as exc:
        if not _lost_its_peers(exc):
            raise
        print(f"{args.command_prog}: error: {_peer_loss_line(exc)}", file=sys.stderr)
        return 1
    finally:  # the command's settings end with it (main() may be called again in the same process)
        warnings.formatwarning = format_warning
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for enable in bars_to_restore:
            enable()
