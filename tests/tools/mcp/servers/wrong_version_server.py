"""A stdio server that answers every request with a protocol version no SDK speaks (the
"wrong protocol version" fault): plain JSON-RPC lines, no SDK, on purpose."""

import json
import sys

for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue
    result = {
        "protocolVersion": "1999-01-01",
        "capabilities": {},
        "serverInfo": {"name": "old", "version": "0"},
    }
    print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}), flush=True)
