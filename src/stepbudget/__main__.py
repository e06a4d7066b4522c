"""The command (bin/stepbudget calls main) and ``python -m stepbudget``: Ctrl-C while the modules still load exits
130 quietly.

It imports nothing at module level but ``sys``, and ``import stepbudget`` loads nothing (the package's names
load on first use), so a Ctrl-C at any moment of start-up lands in the ``try`` below, not in a traceback.
"""

import sys


def main() -> None:
    try:
        from stepbudget.cli import run
    except KeyboardInterrupt:
        sys.exit(130)
    run()


if __name__ == "__main__":
    main()
