"""devhost: Weft's local Functions host with a faithful Durable Task extension emulation. Not deployed."""
