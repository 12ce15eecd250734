"""The `label` program: one node's labels kept in line (the label loop) and its paced changes (the Pacer)."""
