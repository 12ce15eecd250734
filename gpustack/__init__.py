"""The offline toolkit: render, check, diff, import and document a stack without a cluster."""

# gpu-stack's release, which the node agent image (node_images/node-agent, gpustack_agent.__version__) shares: the
# SARIF log names it as its tool's version.
__version__ = "0.10.0"
