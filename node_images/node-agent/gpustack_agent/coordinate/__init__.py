"""The `coordinate` program: the upgrade coordinator that grants the budget and carries out drains."""
