"""Status codes and the exceptions refit raises (re-exported by ``refit``).

Every failed call raises a :class:`RefitError`; the codes a program
usually handles have a subclass of their own, so that::

    try:
        m.run_round(v)
    except refit.AbortedError:        # the round aborted: torn until a later one commits
        ...
    except refit.UnavailableError:    # refitd restarted, shut down or expired this member
        m.rejoin(); m.prepare()

``e.code`` is a :class:`StatusCode` and ``e.code_name`` its name
(``"ABORTED"``), as before the subclasses existed.
"""

import enum
from typing import Any, Dict, Optional, Tuple, Type

__all__ = ["StatusCode", "RefitError", "InvalidArgumentError", "DeadlineExceededError",
           "NotFoundError", "FailedPreconditionError", "AbortedError",
           "UnavailableError", "UnauthenticatedError"]


class StatusCode(enum.IntEnum):
    """absl::StatusCode, the codes of refit's C ABI (and of gRPC)."""
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class RefitError(RuntimeError):
    """A failed call: ``code`` (a :class:`StatusCode`; an int for a code
    this module does not know), ``code_name`` (``"ABORTED"``, ...) and
    ``message``, refit's message, which names the rank and the parameter.

    ``RefitError(code, message)`` makes the subclass of that code
    (``RefitError(10, "...")`` is an :class:`AbortedError`); a subclass
    takes the message alone (``AbortedError("...")``)."""

    _code: Optional[StatusCode] = None  # a subclass's own code

    def __new__(cls, *args: Any, **kwargs: Any) -> "RefitError":
        if cls is RefitError and args:
            try:
                cls = _BY_CODE.get(StatusCode(int(args[0])), RefitError)
            except (TypeError, ValueError):
                pass
        return super().__new__(cls)

    def __init__(self, *args: Any) -> None:
        code, message = self._code_and_message(args)
        try:
            self.code = StatusCode(code)
            self.code_name = self.code.name
        except ValueError:
            self.code = code
            self.code_name = str(code)
        # refit_last_error() starts with the code's name; say it once.
        if message.startswith(self.code_name + ": "):
            message = message[len(self.code_name) + 2:]
        self.message = message
        super().__init__(f"{self.code_name}: {message}")

    def _code_and_message(self, args: Tuple[Any, ...]) -> Tuple[int, str]:
        if len(args) == 2:
            return int(args[0]), str(args[1])
        if len(args) == 1 and isinstance(args[0], int) and not isinstance(args[0], bool):
            return int(args[0]), ""
        if len(args) <= 1 and self._code is not None:
            return int(self._code), str(args[0]) if args else ""
        raise TypeError(f"{type(self).__name__}(code, message) or a subclass's "
                        f"(message), not {args!r}")

    def __reduce__(self):  # pickles (multiprocessing) as the same class
        return (type(self), (int(self.code), self.message))


class InvalidArgumentError(RefitError):
    """Bad input (an option, a buffer, a version): fix the call."""
    _code = StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(RefitError):
    """A wait ran out of its timeout."""
    _code = StatusCode.DEADLINE_EXCEEDED


class NotFoundError(RefitError):
    """Something named is not there: a model, a library, or this member
    (refitd expired it: rejoin)."""
    _code = StatusCode.NOT_FOUND


class FailedPreconditionError(RefitError):
    """Not now: e.g. the plan changed (prepare again), another library is
    loaded, the member is closed."""
    _code = StatusCode.FAILED_PRECONDITION


class AbortedError(RefitError):
    """The round aborted (refitd's reason in the message); an engine is
    torn until a later round commits."""
    _code = StatusCode.ABORTED


class UnavailableError(RefitError):
    """refitd is not reachable, shut down, restarted, or a plan is being
    built: retry the call, or rejoin() and prepare()."""
    _code = StatusCode.UNAVAILABLE


class UnauthenticatedError(RefitError):
    """refitd refused the token."""
    _code = StatusCode.UNAUTHENTICATED


_BY_CODE: Dict[StatusCode, Type[RefitError]] = {
    c._code: c for c in (InvalidArgumentError, DeadlineExceededError, NotFoundError,
                         FailedPreconditionError, AbortedError, UnavailableError,
                         UnauthenticatedError)}
