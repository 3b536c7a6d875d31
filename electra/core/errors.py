"""One exception type for bad user input, so the CLI can print one line instead of a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (a path, a file's content, a flag). The message names the file and the fix."""


class ElectraWarning(UserWarning):
    """Something about the user's input the run works around (a corpus read as Latin-1, say). A `UserWarning`, so
    Python callers filter and catch it as usual; the CLI prints it as one `warning: ...` line, like its other
    warnings, instead of Python's two lines with the library's file and source line."""


def first_line(exc: BaseException) -> str:
    """An exception's own first line, or its type's name when it has no message: what a one-line error quotes of
    a library's multi-line one (matplotlib's, transformers', gloo's)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
