"""Adapters for agent frameworks, each behind its optional extra and imported lazily (see docs/integrations/)."""
