"""Facts about NVIDIA's hardware and software, as pure data and lookups: GPU models, MIG geometry, vGPU types,
DCGM metrics and alert rules, and the labels, paths and env names the operator's objects use.

Standard library only, and relative imports only: the policy pack carries a copy of these modules
(policies/gpu_stack_policies/facts, kept fresh by tests/test_policy_pack_facts.py), so the published pack reads
the same facts the program is built from.
"""
