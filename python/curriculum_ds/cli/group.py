"""The ``curriculum-ds`` command group: the one place a user's mistake becomes one line.

Thin by design: each command parses options and calls one plain function. A
:class:`~curriculum_ds.errors.CurriculumError` becomes one clean line on stderr and exit code 1,
in one place (:class:`_Group`).
"""

from __future__ import annotations

from typing import Any

import click

from curriculum_ds.errors import CurriculumError

__all__ = ["main"]


class _Group(click.Group):
    """Turns a CurriculumError, a bad value or a refused path into one line and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (CurriculumError, ValueError) as exc:
            if isinstance(exc, click.ClickException):
                raise
            message = str(exc)
            if message == "embedded null byte":  # any os call on a path holding NUL
                message = "a path given holds a NUL byte (embedded null byte)"
            raise click.ClickException(message) from None
        except OSError as exc:
            # the net under the per-field checks: a path the system refused in a place no check
            # names (the commands name the option or field wherever they know it)
            from curriculum_ds.files.user_paths import os_reason, show_path

            where = f"{show_path(exc.filename)}: " if isinstance(exc.filename, str) else ""
            raise click.ClickException(f"{where}{os_reason(exc)}") from None


@click.group(cls=_Group)
@click.version_option(package_name="curriculum_ds")
def main() -> None:
    """Curriculum learning for LLM training on DeepSpeed."""
