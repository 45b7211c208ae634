"""A tool invocation: gate, approval, execution, result."""
