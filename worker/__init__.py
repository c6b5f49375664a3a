"""ARQ worker: thin task functions that call app services."""
