"""Images that gpu-stack's GPU nodes run or boot: the node agent (node-agent/) and the node image catalog
(catalog.yaml, loaded by node_images.catalog) with its private precompiled driver builds (driver-precompiled/)."""
