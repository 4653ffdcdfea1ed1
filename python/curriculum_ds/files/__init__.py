"""Files and paths of the user's: written atomically, and refused by the system in one line.

Module map:

* ``atomic.py``: ``replace_atomically`` / ``write_text_atomically`` (a temporary file in the same
  folder, fsync, rename), for every record a kill must not leave half written;
* ``user_paths.py``: a path from a command line or a config that the operating system refuses
  (read-only, not a folder, a component too long, a NUL byte) as one line naming the field.
"""
