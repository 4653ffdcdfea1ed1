"""``python -m curriculum_ds.cli ...``: the same as the ``curriculum-ds`` command."""

from curriculum_ds.cli import main

main()
