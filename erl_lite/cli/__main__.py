"""``python -m erl_lite.cli`` (as ``accelerate launch -m erl_lite.cli`` runs it): the ``erl-lite`` command.
"""

import sys

from erl_lite.cli import main

if __name__ == "__main__":
    sys.exit(main())
