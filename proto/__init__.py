"""reel's proto package.

betterproto2 imports pydantic whenever it is installed (the mcp SDK brings it), only to tell a
pydantic dataclass message from a plain one, and every message then asks. reel's messages are
plain (generated without pydantic), so betterproto2 is imported here as if pydantic were absent:
the node starts without pydantic (a tenth of a second of a loaded 2-core machine's start; see
tests/transports/node/test_daemon_imports.py) and a message never asks. Only while this is the
process's one thread: another thread could be importing pydantic for itself at this moment.
"""

import sys
import threading

if "pydantic" not in sys.modules and threading.active_count() == 1:
    sys.modules["pydantic"] = None  # type: ignore[assignment]  # import pydantic -> ImportError
    try:
        import betterproto2  # noqa: F401
    finally:
        del sys.modules["pydantic"]
