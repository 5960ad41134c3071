"""The local vector store (ChromaDB, embedded or a server) and the local embedders."""
