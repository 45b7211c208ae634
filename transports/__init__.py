"""Everything that speaks a protocol: gRPC, HTTP, the CLI, model providers, chat channels.

Exceptions, by module (no common root: each is caught where its caller can act on it; every
class's failure kind, and so its HTTP status, gRPC status, exit code and chat outcome, is in
:mod:`transports.failures`)::

    access.AccessError
    ├── PermissionDenied            Cedar did not permit the action (names it and the policies)
    └── ResourceNotFound            the resource the action is on does not exist
    tokens.TokenError               a malformed token request (ValueError; .field)
    tokens.UnknownToken             no token has this id (LookupError)
    tokens.TokenAlreadyRevoked      revoked before; nothing changed
    memory.MemoryInputError         a refused memory write or delete (ValueError; .field)
    memory.UnknownMemoryItem        no memory item has this id (LookupError)
    memory.MemoryItemAlreadyDeleted deleted before; nothing changed
    config.ConfigError              the node's config cannot be used (names the key)
    channels.InvalidMessage         a bad inbound message field (ValueError; .field)
    channels.UnknownChannel         no channel of that name (LookupError)
    channels.ConnectorError         a connector cannot start or deliver
    channels.commands.CommandSyntaxError  a ``!reel`` command this version does not know
    channels.matrix_answers: Refused, Unavailable, CursorRefused, RateLimited
                                    what a homeserver answered (the connector acts on each)
    grpc.GrpcTransportError
    ├── GrpcStartError              the gRPC server cannot listen
    └── GrpcClientError             a client cannot reach or use a node
    grpc.wire.MalformedMessage      request bytes that are not the method's message
    http.server.HttpStartError      the HTTP API cannot listen
    models.sse.SSEError             a provider's event stream is malformed
    cli.grpc_chat.ChatUsageError    a bad combination of ``reel chat`` options

``http.failures.ApiError`` (a status and code) and ``cli.errors.CliError`` (an exit code) are
an edge's answer, raised by its own handlers: they need no kind.
"""
