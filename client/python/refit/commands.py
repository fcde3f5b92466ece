"""The wheel's commands: ``refitd`` (the sidecar) and ``refit`` (the command
line: plan, simulate, status, ...). pip installs both into the
environment's ``bin`` folder as console scripts that run these functions,
which execute the binaries the wheel carries in ``refit/_native`` (beside
the client library, with the shared libraries they load in
``_native/lib``); every argument is passed on unchanged::

    pip install refit_weights-*.whl
    refitd --address=0.0.0.0:50051 --token_file=/etc/refit/token
    refit status --server=127.0.0.1:50051
"""

import os
import sys
from typing import List, NoReturn, Optional

__all__ = ["binary_path", "refitd", "refit"]


def binary_path(name: str) -> str:
    """The path of the wheel's binary ``name`` ("refitd" or "refit")."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native", name)


def _exec(name: str, argv: Optional[List[str]]) -> NoReturn:
    path = binary_path(name)
    if not os.access(path, os.X_OK):
        sys.exit(f"{name}: {path} is not there: this installation of refit carries no "
                 f"{name} (the wheel from tools/wheel/wheel.sh does; in a bundle it is "
                 f"the bundle's own {name})")
    args = sys.argv[1:] if argv is None else argv
    os.execv(path, [name] + list(args))


def refitd(argv: Optional[List[str]] = None) -> NoReturn:
    """Replaces this process with the wheel's refitd (never returns)."""
    _exec("refitd", argv)


def refit(argv: Optional[List[str]] = None) -> NoReturn:
    """Replaces this process with the wheel's refit command line."""
    _exec("refit", argv)
