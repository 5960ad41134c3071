"""Local retrieval: the tenant's documents ingested, searched and added to requests."""
