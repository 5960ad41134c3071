"""The audit trail: per-tenant, tamper-evident (Merkle log, signed checkpoints), encrypted."""
