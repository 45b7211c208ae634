"""The durable background task queue: task streams, workers, handlers."""
