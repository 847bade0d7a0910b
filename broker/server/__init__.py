"""The broker process: its listeners and connections, request dispatch and the handlers
of every API (handlers/), topic administration, and the Broker that starts and stops the
rest (docs/architecture.md)."""
