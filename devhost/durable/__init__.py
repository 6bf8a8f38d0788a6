"""devhost's durable engine: a local stand-in for the Durable Task extension (out-of-proc protocol)."""
