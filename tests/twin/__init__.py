"""The AmlCompute twin: Docker containers that behave like an AmlCompute cluster (cluster.py)."""
