"""webhooks."""
