"""API access: the clients, reads and writes with their retries, watches resumed from a resourceVersion."""
