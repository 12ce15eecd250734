"""The agent's model, pure: the node-pools document, labels, upgrade states, the budget's records and the handshakes on a Node (grants, drain requests)."""
