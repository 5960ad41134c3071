"""The internal request/answer interface: what one request carries through the stages,
what goes to an upstream and what comes back, and the interfaces of the stages."""
