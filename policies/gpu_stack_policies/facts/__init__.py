"""Copies of gpu-stack's fact modules, so the published pack needs nothing outside policies/ (gpustack/packfacts.py)."""
