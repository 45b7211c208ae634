"""reel's proto package.

betterproto2 imports pydantic whenever it is installed (the mcp SDK brings it), only to tell a
pydantic dataclass message from a plain one (every encode, decode and ``to_dict`` asks). reel's
messages are plain (generated without pydantic), so betterproto2 is imported here as if
pydantic were absent: the node starts without pydantic (~20 ms of its import at load 2, several
times that under load; tests/transports/node/test_daemon_imports.py), no message asks it. Only
while this is the process's one thread: another could be importing pydantic for itself now.
"""

import sys
import threading

if "pydantic" not in sys.modules and threading.active_count() == 1:
    sys.modules["pydantic"] = None  # type: ignore[assignment]  # import pydantic -> ImportError
    try:
        import betterproto2  # noqa: F401
    finally:
        del sys.modules["pydantic"]
