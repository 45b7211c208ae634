"""Everything that speaks a protocol: gRPC, HTTP, the CLI, model providers, chat channels."""
