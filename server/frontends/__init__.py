"""Front ends of the queue other than gRPC: each translates its wire format to `core.QueueCore`."""
