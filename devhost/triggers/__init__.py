"""Non-HTTP, non-durable triggers: timer, blob (Azurite polling) and Service Bus (the Bus port)."""
