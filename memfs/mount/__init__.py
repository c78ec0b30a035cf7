"""The mount daemon: everything that runs only inside ``memfs mount``.

``config`` (settings), ``daemon`` (lifecycle, signals, sd_notify), ``fs`` (the pyfuse3
adapter and the core it drives). Nothing outside this package imports it except the CLI.
"""
