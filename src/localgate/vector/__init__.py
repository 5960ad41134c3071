"""The local vector layer: embeddings, the ChromaDB store, the cache and retrieval."""
