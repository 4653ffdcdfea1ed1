"""``python -m curriculum_ds.train`` (and ``deepspeed --module curriculum_ds.train``)."""

from __future__ import annotations

import sys

from curriculum_ds.train.entry import main, shutdown

if __name__ == "__main__":
    exit_code = main()
    shutdown()
    sys.exit(exit_code)
