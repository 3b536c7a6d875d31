"""One exception type for bad user input, so the CLI can print one line instead of a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (a path, a file's content, a flag). The message names the file and the fix."""
