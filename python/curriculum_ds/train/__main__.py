"""``python -m curriculum_ds.train`` (and ``deepspeed --module curriculum_ds.train``)."""

from __future__ import annotations

from curriculum_ds.train.entry import exit_now, main, shutdown

if __name__ == "__main__":
    exit_code = main()
    shutdown()
    exit_now(exit_code)
