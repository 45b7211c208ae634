"""A request whose deadline had passed before its handler started is the client's, not a fault.

grpclib enters the request's deadline as the handler starts; when it has already passed (the
client asked for 0.3 s and the loop was busy that long), ``grpclib.server`` logs the
``TimeoutError`` it raised with ``log.exception('Timeout occurred')``: a traceback at ERROR for
what its own cancellation path logs as ``Deadline exceeded`` at INFO, and the client is answered
``DEADLINE_EXCEEDED`` either way. This filter makes that one record what grpclib logs for a
deadline met mid-call; any other timeout a handler raises stays an error with its traceback.
"""

from __future__ import annotations

import logging

__all__ = ["install"]

_LOGGER = "grpclib.server"


class _ExpiredOnArrival(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        info = record.exc_info
        if (
            record.msg == "Timeout occurred"
            and info is not None
            and isinstance(info[1], TimeoutError)
            and str(info[1]) == "Deadline exceeded"
            and info[2] is not None
            and _raised_by_grpclib_deadline(info[2])
        ):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.exc_info, record.exc_text = "Deadline exceeded", None, None
        return True


def _raised_by_grpclib_deadline(tb: object) -> bool:
    """Whether the innermost frame is grpclib's deadline (``grpclib/utils.py``)."""
    last = tb
    while getattr(last, "tb_next", None) is not None:
        last = last.tb_next  # type: ignore[attr-defined]
    code = getattr(getattr(last, "tb_frame", None), "f_code", None)
    return code is not None and code.co_filename.replace("\\", "/").endswith("grpclib/utils.py")


_FILTER = _ExpiredOnArrival()


def install() -> None:
    """Add the filter to ``grpclib.server``'s logger (once, however many servers start)."""
    logger = logging.getLogger(_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
